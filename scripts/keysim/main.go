// Command keysim measures prefix-key windows in the fleet simulator: the
// Mooncake traces replayed over 8 simulated vLLM engines, each request
// rendered as a /v1/completions body with a token-id prompt and keyed by the
// production keyer (prefix.Keyer) at several --prefix-chars, placed by the
// production CHWBL balancer; a round-robin picker is the baseline.
//
//	go run ./scripts/keysim -traces ../shared/traces/mooncake
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/fleet"
	"github.com/prefixring/prefixring/sim/workload"
)

func main() {
	traces := flag.String("traces", "../shared/traces/mooncake", "folder of the Mooncake traces")
	engines := flag.Int("engines", 8, "simulated engines")
	flag.Parse()
	for _, name := range []string{"conversation_trace.jsonl", "synthetic_trace.jsonl"} {
		reqs := load(filepath.Join(*traces, name))
		fmt.Printf("%s: %d requests, %d engines (Llama-3.1-8B on H100 profile, default KV capacity)\n", name, len(reqs), *engines)
		fmt.Printf("  %-26s %10s %12s %12s %10s\n", "routing", "hit rate", "TTFT mean", "TTFT p99", "spilled")
		for _, chars := range []int{2048, 4096, 8192} {
			bal, err := ring.NewBalancer(ring.DefaultConfig())
			check(err)
			check(bal.SetEndpoints(fleet.EndpointIDs(*engines)))
			row(fmt.Sprintf("CHWBL, prefix-chars %d", chars), run(*engines, bal, keyer(chars), reqs))
		}
		row("round-robin", run(*engines, &roundRobin{ids: fleet.EndpointIDs(*engines)}, keyer(4096), reqs))
	}
}

func load(path string) []workload.Request {
	f, err := os.Open(path)
	check(err)
	defer f.Close()
	reqs, err := workload.LoadMooncake(f)
	check(err)
	return reqs
}

// keyer renders a request as the body a client would send (token ids, 4
// characters' worth each to the keyer) and keys it as the router would.
func keyer(chars int) workload.KeyFunc {
	cfg := prefix.DefaultConfig()
	cfg.MaxChars = chars
	k, err := prefix.New(cfg)
	check(err)
	return func(r *workload.Request) (uint64, bool) {
		toks := r.AppendTokens(nil, chars/4+1)
		var b strings.Builder
		b.WriteString(`{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":[`)
		for i, t := range toks {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatUint(uint64(t), 10))
		}
		b.WriteString(`]}`)
		key, ok, err := k.Key(prefix.RouteCompletions, []byte(b.String()))
		check(err)
		return key, ok
	}
}

func run(engines int, p policy.Picker, key workload.KeyFunc, reqs []workload.Request) *fleet.Result {
	res, err := fleet.Run(fleet.Config{Engines: engines, Engine: engine.DefaultConfig(), Picker: p, Key: key}, reqs)
	check(err)
	return res
}

func row(name string, res *fleet.Result) {
	var prompt, cached, spilled int
	var ttfts []time.Duration
	for _, r := range res.Records {
		if r.Err != "" {
			continue
		}
		prompt += r.PromptTokens
		cached += r.CachedTokens
		ttfts = append(ttfts, r.TTFT)
		if r.Decision == "spill" {
			spilled++
		}
	}
	slices.Sort(ttfts)
	var sum time.Duration
	for _, d := range ttfts {
		sum += d
	}
	fmt.Printf("  %-26s %10.3f %10.0fms %10.0fms %9.1f%%\n", name, float64(cached)/float64(prompt),
		float64(sum.Milliseconds())/float64(len(ttfts)), float64(ttfts[len(ttfts)*99/100].Milliseconds()),
		100*float64(spilled)/float64(len(ttfts)))
}

// roundRobin ignores keys: the baseline most fleets start from.
type roundRobin struct {
	ids  []string
	next atomic.Uint64
}

func (rr *roundRobin) Acquire(ring.Request) (ring.Lease, error) {
	return ring.Lease{Endpoint: rr.ids[rr.next.Add(1)%uint64(len(rr.ids))], Decision: ring.DecisionFallback}, nil
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
