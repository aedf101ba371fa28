package fleet

import (
	"github.com/prefixring/prefixring/sim/workload"
	"os"
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/engine"
)

// conversationTrace is the Mooncake conversation trace, beside the repo.
const conversationTrace = "../../shared/traces/mooncake/conversation_trace.jsonl"

// BenchmarkMooncakeConversation replays the Mooncake conversation trace
// (12,031 requests over an hour, ~145 M input tokens) over 8 engines behind
// the production CHWBL balancer, keyed on the first 1024 tokens. Its budget
// is 30 s per replay on the 2-core reference machine, so that the study's
// trace runs stay affordable.
//
//	go test ./sim/fleet -run '^$' -bench MooncakeConversation -benchtime 1x
func BenchmarkMooncakeConversation(b *testing.B) {
	f, err := os.Open(conversationTrace)
	if err != nil {
		b.Skipf("trace not available: %v", err)
	}
	reqs, err := workload.LoadMooncake(f)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		bal, err := ring.NewBalancer(ring.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		if err := bal.SetEndpoints(EndpointIDs(8)); err != nil {
			b.Fatal(err)
		}
		cfg := Config{Engines: 8, Engine: engine.DefaultConfig(), Picker: bal, Key: workload.PrefixKey(1024)}
		res, err := Run(cfg, reqs)
		if err != nil {
			b.Fatal(err)
		}
		report(b, res)
	}
}

func report(b *testing.B, res *Result) {
	var prompt, cached, n int
	var ttft time.Duration
	for _, r := range res.Records {
		if r.Err != "" {
			continue
		}
		n++
		prompt += r.PromptTokens
		cached += r.CachedTokens
		ttft += r.TTFT
	}
	b.ReportMetric(float64(res.Steps), "steps")
	b.ReportMetric(float64(cached)/float64(prompt), "hit-ratio")
	b.ReportMetric((ttft/time.Duration(n)).Seconds()*1e3, "mean-ttft-ms")
	b.ReportMetric(float64(len(res.Records)-n), "rejected")
}
