package eval

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/workload"
)

// Requests that each arrive at an idle engine holding what the ones before
// them computed take exactly their floors: the ideal prices a lone
// prefill as the engine does, chunks of the token budget included.
func TestIdealFloorsAreLoneEngineTTFTs(t *testing.T) {
	cfg := engine.DefaultConfig()
	ids := func(from, n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(from + i)
		}
		return out
	}
	reqs := []workload.Request{
		{Arrival: 0, InputLen: 20000, HashIDs: ids(1, 40)},                            // cold, three chunks
		{Arrival: time.Minute, InputLen: 21000, HashIDs: append(ids(1, 40), 99, 100)}, // 20,000 cached
		{Arrival: 2 * time.Minute, InputLen: 700, HashIDs: ids(1, 2)},                 // cached but its last block
		{Arrival: 3 * time.Minute, InputLen: 300, HashIDs: ids(500, 1)},               // cold, one short step
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	chain := engine.NewChain(cfg.BlockSize)
	var ttfts []float64
	for i, r := range reqs {
		chain.Reset()
		r.AppendTo(chain)
		er := &engine.Request{ID: uint64(i), Prompt: chain.Prompt(), MaxTokens: 1}
		if err := e.Add(er, r.Arrival); err != nil {
			t.Fatal(err)
		}
		for now := r.Arrival; e.Busy(); {
			end, ok := e.Begin(now)
			if !ok {
				t.Fatalf("request %d: the engine scheduled nothing", i)
			}
			e.End(end)
			now = end
		}
		ttfts = append(ttfts, ms(er.TTFT()))
	}
	slices.Sort(ttfts)
	id := IdealOf(reqs, cfg)
	if !slices.Equal(id.FloorsMS, ttfts) {
		t.Fatalf("floors %v, lone engine's TTFTs %v", id.FloorsMS, ttfts)
	}
	if ttfts[3] < 2*ttfts[2] {
		t.Fatalf("a cold 20,000-token prompt (%v ms) should take more than two steps of a cached one (%v ms)", ttfts[3], ttfts[2])
	}
}

// Goal 1 says of a miss whose limit lies below the ideal fleet's figure
// that the ideal fleet misses it too, and of no other; goal 4 counts the
// seeds where its limit is out of the ideal fleet's reach.
func TestGoalsTellLimitsBelowTheIdealFleet(t *testing.T) {
	demo := func(seed uint64, policy string, mean, p50, floorP50 float64) Result {
		return Result{Grid: GridDemo, Policy: policy, Workload: "demo", Routers: 3, RateScale: 1, Seed: seed,
			TTFTMeanMS: mean, TTFTP50MS: p50, TTFTP99MS: 80, TTFTFloorMeanMS: 8, TTFTFloorP50MS: floorP50, TTFTFloorP99MS: 30}
	}
	md := Markdown([]Result{
		demo(1, "chwbl", 20, 14, 13), demo(1, "round-robin", 40, 20, 13), // limit 12 ms, ideal 13: out of reach
		demo(2, "chwbl", 20, 14, 8), demo(2, "round-robin", 40, 20, 8), // limit 12 ms, ideal 8: within reach
	}, "test")
	want := "Missed on seed 1: p50 0.70× (its limit, 12.0 ms, is below the ideal fleet's 13.0); seed 2: p50 0.70×."
	if !strings.Contains(md, want) {
		t.Fatalf("report lacks %q:\n%s", want, md)
	}
	if !strings.Contains(md, "| 8.0 / 8.0–13.0 / 30.0 |") {
		t.Errorf("goal 1's table lacks the ideal fleet's column:\n%s", md)
	}

	trace := func(seed uint64, policy string, mean, floor float64) Result {
		return Result{Grid: GridPolicies, Policy: policy, Workload: "trace:conversation_trace.jsonl", Routers: 3, RateScale: 1, Seed: seed,
			TTFTMeanMS: mean, TTFTP50MS: mean, TTFTP99MS: mean, TTFTFloorMeanMS: floor}
	}
	md = Markdown([]Result{
		trace(1, "chwbl", 900, 850), trace(1, "round-robin", 1000, 850), // limit 800 below 850
		trace(2, "chwbl", 900, 455), trace(2, "round-robin", 1000, 455),
	}, "test")
	if want := "The limit is below the ideal fleet's mean on 1 of 2 seeds (the ideal fleet: 455–850 ms)."; !strings.Contains(md, want) {
		t.Fatalf("report lacks %q:\n%s", want, md)
	}
}

// Goal 4 is checked on the trace with its ticks spread and, where the
// study ran it, as recorded, each in its own row.
func TestGoalFourShowsBothArrivals(t *testing.T) {
	run := func(grid, name string, seed uint64, policy string, mean float64) Result {
		return Result{Grid: grid, Policy: policy, Workload: name, Routers: 3, RateScale: 1, Seed: seed, Endpoints: 8,
			TTFTMeanMS: mean, TTFTP50MS: mean, TTFTP99MS: mean, TTFTFloorMeanMS: 455}
	}
	var rs []Result
	for seed := uint64(1); seed <= 2; seed++ {
		rs = append(rs,
			run(GridPolicies, "trace:x/conversation_trace.jsonl", seed, "chwbl", 600), run(GridPolicies, "trace:x/conversation_trace.jsonl", seed, "round-robin", 1000),
			run(GridRecorded, "trace-recorded:x/conversation_trace.jsonl", seed, "chwbl", 850+float64(seed)), run(GridRecorded, "trace-recorded:x/conversation_trace.jsonl", seed, "round-robin", 1000),
			run(GridRecorded, "trace-recorded:x/conversation_trace.jsonl", seed, "chwbl-local", 950))
	}
	md := Markdown(rs, "test")
	reportHas(t, md,
		"| spread | ×1 | H100 | 600 | 1000 | 455 | 0.60 | 0.000 | 0.000 | — | met |",
		"| as recorded | ×1 | H100 | 851–852 | 1000 | 455 | 0.85 | 0.000 | 0.000 | — | **missed** (2 of 2 seeds) |",
		"trace ×1, as recorded, H100 fleet: mean 0.85× round-robin's",
		"the best other policy by mean of the 2 run there, chwbl-local, has 950 ms",
	)
	if strings.Contains(md, "trace ×1, spread") {
		t.Errorf("report explains a met point:\n%s", md)
	}
}

// The ideal fleet caches what an engine caches, generated blocks included:
// a conversation's second turn, carrying the first's answer, hits through
// the answer's full blocks in the ideal as on a lone engine.
func TestIdealCountsGeneratedBlocks(t *testing.T) {
	cfg := engine.DefaultConfig()
	first := engine.Tokenize(strings.Repeat(" abc", 100) + "\n\nAssistant:")
	answer := workload.SimAnswer(60)
	joint := engine.Tokenize(strings.Repeat(" abc", 100) + "\n\nAssistant:" + answer)
	second := engine.Tokenize(strings.Repeat(" abc", 100) + "\n\nAssistant:" + answer + "\n\nUser: more\n\nAssistant:")
	reqs := []workload.Request{
		{Arrival: 0, InputLen: len(first), OutputLen: 60, Tokens: first, Joint: joint},
		{Arrival: time.Minute, InputLen: len(second), OutputLen: 1, Tokens: second},
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	chain := engine.NewChain(cfg.BlockSize)
	cached, total := 0, 0
	for i, r := range reqs {
		er := &engine.Request{ID: uint64(i), Prompt: r.EnginePrompt(chain), MaxTokens: r.OutputLen}
		if err := e.Add(er, r.Arrival); err != nil {
			t.Fatal(err)
		}
		for now := r.Arrival; e.Busy(); {
			end, _ := e.Begin(now)
			e.End(end)
			now = end
		}
		cached, total = cached+er.CachedTokens, total+r.InputLen
	}
	// 103 prompt tokens and KV for 59 generated: 10 full blocks.
	if cached != 160 {
		t.Fatalf("the lone engine found %d tokens cached, want 160", cached)
	}
	if got, want := IdealOf(reqs, cfg).HitRate, float64(cached)/float64(total); got != want {
		t.Fatalf("ideal hit rate %v, the lone engine's %v", got, want)
	}
}
