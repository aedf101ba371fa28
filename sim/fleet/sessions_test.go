package fleet

import (
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/workload"
)

// Sessions play in closed loop: each turn arrives its think time after the
// previous turn's answer, carries the history (so it is longer and mostly
// cached on the same engine), and every turn is recorded once.
func TestRunSessionsIsClosedLoop(t *testing.T) {
	w := workload.DefaultMultiTurn(workload.Chat)
	w.Conversations, w.Turns = 6, 4
	sessions, err := w.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	b, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	// The router knows the engines' KV capacity (vllm:cache_config_info),
	// which six conversations do not fill: K never moves one.
	ec := engine.DefaultConfig()
	var eps []ring.Endpoint
	for _, id := range EndpointIDs(3) {
		eps = append(eps, ring.Endpoint{ID: id, Healthy: true, KVCapacity: int64(ec.Blocks() * ec.BlockSize)})
	}
	if err := b.Update(eps); err != nil {
		t.Fatal(err)
	}
	// Key each session on its id: a conversation stays on one engine.
	key := func(c *workload.Call, _ time.Duration) ring.Request {
		return ring.Request{Key: uint64(c.Session) + 1, Keyed: true}
	}
	res, reqs, err := RunSessions(Config{Engines: 3, Engine: engine.DefaultConfig(), Picker: b}, sessions, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 24 || len(reqs) != 24 {
		t.Fatalf("%d records, %d requests; want 24 turns", len(res.Records), len(reqs))
	}
	type last struct {
		done           time.Duration
		prompt, output int
		ep             string
	}
	seen := map[int]last{}
	turns := map[int]int{}
	for _, r := range res.Records {
		if r.Err != "" {
			t.Fatalf("turn rejected: %+v", r)
		}
		if p, ok := seen[r.Session]; ok {
			think := sessions[r.Session].Turns[r.Turn].Think
			if r.Arrival != p.done+think {
				t.Fatalf("session %d turn %d arrived %v, want the answer's end %v + think %v", r.Session, r.Turn, r.Arrival, p.done, think)
			}
			// The engine cached the last turn's answer as it generated
			// it, as vLLM does: the turn finds the full blocks of the last
			// prompt and of the answer's tokens with KV (all but the last).
			bs := ec.BlockSize
			if r.PromptTokens <= p.prompt || r.Endpoint != p.ep || r.CachedTokens < (p.prompt+p.output-1)/bs*bs {
				t.Fatalf("session %d turn %d: prompt %d (before %d, and %d generated), cached %d, engine %s (before %s)",
					r.Session, r.Turn, r.PromptTokens, p.prompt, p.output, r.CachedTokens, r.Endpoint, p.ep)
			}
		} else if r.Turn != 0 {
			t.Fatalf("session %d starts at turn %d", r.Session, r.Turn)
		}
		if r.Turn != turns[r.Session] {
			t.Fatalf("session %d: turn %d out of order", r.Session, r.Turn)
		}
		turns[r.Session]++
		seen[r.Session] = last{r.Arrival + r.E2E, r.PromptTokens, r.OutputTokens, r.Endpoint}
	}
}

// With Concurrency, sessions play closed loop as `prefixring load
// --concurrency` plays them: that many at a time, whatever their Start,
// the next one starting when one ends.
func TestRunSessionsConcurrency(t *testing.T) {
	w := workload.DefaultMultiTurn(workload.Chat)
	w.Conversations, w.Turns = 7, 3
	sessions, err := w.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	b, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetEndpoints(EndpointIDs(2)); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Engines: 2, Engine: engine.DefaultConfig(), Picker: b, Concurrency: 3}
	res, _, err := RunSessions(cfg, sessions, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 21 {
		t.Fatalf("%d records, want 21", len(res.Records))
	}
	first, last := map[int]time.Duration{}, map[int]time.Duration{}
	for _, r := range res.Records {
		if r.Turn == 0 {
			first[r.Session] = r.Arrival
		}
		if r.Turn == 2 {
			last[r.Session] = r.Arrival + r.E2E
		}
	}
	for s := range 7 {
		if s < 3 {
			if first[s] != 0 {
				t.Fatalf("session %d started at %v, want 0", s, first[s])
			}
			continue
		}
		// Session s starts when an earlier one ends, with fewer than 3
		// others still running.
		active, endsThen := 0, false
		for o := range s {
			if last[o] > first[s] {
				active++
			}
			endsThen = endsThen || last[o] == first[s]
		}
		if active >= 3 || !endsThen || first[s] < first[s-1] {
			t.Fatalf("session %d started at %v with %d running (one ending then: %v)", s, first[s], active, endsThen)
		}
	}
}

// A streamed request's prefill weight (P) is settled at its first token,
// as the router settles it at the first byte; a non-streamed one's is held
// until its answer is complete, as production holds it (the router sees
// no byte before).
func TestNonStreamedHoldsPrefillWeight(t *testing.T) {
	w := workload.DefaultMultiTurn(workload.Chat)
	w.Conversations, w.Turns, w.OutputTokens = 1, 1, 64
	held := map[bool]bool{}
	for _, stream := range []bool{true, false} {
		sessions, err := w.Sessions()
		if err != nil {
			t.Fatal(err)
		}
		sessions[0].Stream = stream
		b, err := ring.NewBalancer(ring.DefaultConfig()) // counts tokens
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SetEndpoints(EndpointIDs(1)); err != nil {
			t.Fatal(err)
		}
		type obs struct {
			at   time.Duration
			load int64
		}
		var seen []obs
		cfg := Config{Engines: 1, Engine: engine.DefaultConfig(), Picker: b,
			Advance: func(now time.Duration) { seen = append(seen, obs{now, b.Inflight().Load("engine-0")}) }}
		res, _, err := RunSessions(cfg, sessions, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := res.Records[0]
		first := seen[0].load // before the first step's end: the whole weight
		held[stream] = true
		for _, o := range seen {
			// After the step that made the first token, before the last.
			if o.at > r.Arrival+r.TTFT && o.at < r.Arrival+r.E2E && o.load != first {
				held[stream] = false
			}
		}
		if first <= 0 {
			t.Fatalf("stream %v: weight %d at the start", stream, first)
		}
	}
	if held[true] || !held[false] {
		t.Fatalf("held until the end: streamed %v, non-streamed %v; want false, true", held[true], held[false])
	}
}

// runScaled plays w's sessions on one engine, the first session's text
// tokenized at scale.
func runScaled(t *testing.T, w workload.MultiTurn, scale float64) *Result {
	t.Helper()
	sessions, err := w.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	sessions[0].TokenScale = scale
	b, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetEndpoints(EndpointIDs(1)); err != nil {
		t.Fatal(err)
	}
	res, _, err := RunSessions(Config{Engines: 1, Engine: engine.DefaultConfig(), Picker: b}, sessions, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A session's TokenScale makes the engine's token count depart from the
// router's bytes/4: 0.5 (the router counts half the engine's tokens)
// doubles the engine's tokens of the text the client wrote, and later turns
// still find the earlier ones cached. The answers in the history count the
// tokens the engine generated at any scale
// (TestScaledAnswerIsTheTokensGenerated).
func TestTokenScale(t *testing.T) {
	w := workload.DefaultMultiTurn(workload.Chat)
	w.Conversations, w.Turns = 1, 3
	prompt := map[float64][]int{}
	for _, scale := range []float64{1, 0.5} {
		res := runScaled(t, w, scale)
		for _, r := range res.Records {
			prompt[scale] = append(prompt[scale], r.PromptTokens)
			if r.Turn > 0 && r.CachedTokens < prompt[scale][r.Turn-1]/2 {
				t.Fatalf("scale %v turn %d: %d of %d cached", scale, r.Turn, r.CachedTokens, r.PromptTokens)
			}
		}
	}
	for k := range prompt[1] {
		answers := k * w.OutputTokens
		if got, want := prompt[0.5][k], 2*(prompt[1][k]-answers)+answers; got < want-2 || got > want+2 {
			t.Fatalf("turn %d: %d tokens at scale 0.5, want about %d", k, got, want)
		}
	}
}

// A session's answers are the tokens the engine generated, at any
// TokenScale: a real tokenizer cuts a model's output text back into about
// the tokens it was generated as, so the next turn carries the answer as
// OutputTokens tokens and finds them cached (all but the block of the last,
// which has no KV, and the block where the answer joins the prompt). Each
// turn then grows by its answer and by the new message's text, which alone
// scales: 1/scale times its tokens at scale 1.
func TestScaledAnswerIsTheTokensGenerated(t *testing.T) {
	w := workload.DefaultMultiTurn(workload.Chat)
	w.Conversations, w.Turns = 1, 4
	bs := engine.DefaultConfig().BlockSize
	added := map[float64][]int{} // tokens each later turn adds besides the answer
	for _, scale := range []float64{1, 0.5, 1.5} {
		res := runScaled(t, w, scale)
		for k, r := range res.Records[1:] {
			p := res.Records[k]
			grow := r.PromptTokens - p.PromptTokens - p.OutputTokens
			added[scale] = append(added[scale], grow)
			if uncached := r.PromptTokens - r.CachedTokens; uncached > grow+2*bs {
				t.Errorf("scale %v turn %d: %d of %d tokens computed, want at most the %d added and 2 blocks",
					scale, r.Turn, uncached, r.PromptTokens, grow)
			}
		}
	}
	for _, scale := range []float64{0.5, 1.5} {
		for k, n := range added[1] {
			if got, want := added[scale][k], float64(n)/scale; float64(got) < want-3 || float64(got) > want+3 {
				t.Errorf("scale %v turn %d: grew %d tokens besides its answer, want about %.0f", scale, k+1, got, want)
			}
		}
	}
}
