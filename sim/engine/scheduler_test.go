package engine

import (
	"math"
	"testing"
	"time"
)

// preemptionRun is TestPreemptionByRecompute's engine of 8 blocks of 4
// tokens with A (8-token prompt, 12 output tokens) and then b added.
func preemptionRun(t *testing.T, b *Request) (*Engine, *Request) {
	t.Helper()
	e, a := newEngine(t, smallConfig(8)), req(1, 4, seq(0, 8), 12)
	add(t, e, a, 0)
	add(t, e, b, 0)
	return e, a
}

func TestPreemptionByRecompute(t *testing.T) {
	// 8 blocks of 4 tokens. A and B each need 5 blocks at the end (8-token
	// prompt + 12 output tokens, the last one without KV): both fit until
	// A's 10th output token, when A needs its 5th block and B, admitted
	// last, is preempted. B's prompt blocks stay cached, so it resumes from
	// them once A finishes and recomputes its 9 generated tokens.
	b := req(2, 4, seq(100, 8), 12)
	e, a := preemptionRun(t, b)
	now, preemptAt := time.Duration(0), 0
	for i := 1; e.Busy(); i++ {
		r := step(t, e, now)
		now = r.End
		if r.Preemptions > 0 {
			if preemptAt != 0 {
				t.Fatalf("second preemption at step %d", i)
			}
			preemptAt = i
			if b.Output != 9 || a.Output != 10 {
				t.Fatalf("at preemption: A has %d tokens, B %d; want 10 and 9", a.Output, b.Output)
			}
		}
		if i == 13 && (b.computed != 17 || b.Output != 10) {
			t.Fatalf("step 13: B computed %d output %d, want 17 and 10", b.computed, b.Output)
		}
		if i > 15 {
			t.Fatal("more than 15 steps")
		}
	}
	if preemptAt != 10 || a.Preemptions != 0 || b.Preemptions != 1 {
		t.Fatalf("preempted at step %d (A %d, B %d), want step 10, B once", preemptAt, a.Preemptions, b.Preemptions)
	}
	if a.PrefillComputed != 8 || b.PrefillComputed != 8+9 {
		t.Fatalf("prefill computed A %d B %d, want 8 and 17", a.PrefillComputed, b.PrefillComputed)
	}
	if a.Output != 12 || b.Output != 12 || e.kv.free != 8 {
		t.Fatalf("outputs %d/%d, free blocks %d; want 12/12 and 8", a.Output, b.Output, e.kv.free)
	}
}

func TestMaxNumSeqs(t *testing.T) {
	cfg := smallConfig(64)
	cfg.MaxNumSeqs = 2
	e := newEngine(t, cfg)
	for i := range 3 {
		add(t, e, req(uint64(i), 4, seq(10*i, 4), 3), 0)
	}
	r := step(t, e, 0)
	if len(r.Admitted) != 2 || e.Running() != 2 || e.Waiting() != 1 {
		t.Fatalf("admitted %d, running %d, waiting %d; want 2, 2, 1", len(r.Admitted), e.Running(), e.Waiting())
	}
}

func TestChunkedPrefill(t *testing.T) {
	cfg := smallConfig(64)
	cfg.MaxNumBatchedTokens = 8
	e := newEngine(t, cfg)
	a := req(1, 4, seq(0, 20), 2)
	b := req(2, 4, seq(100, 6), 2)
	add(t, e, a, 0)
	add(t, e, b, 0)
	want := []struct {
		batch     Batch
		firstToks int
	}{
		{Batch{PrefillTokens: 8, PrefillPairs: 36}, 0},                                                           // A 0..8; B waits: no budget
		{Batch{PrefillTokens: 8, PrefillPairs: 8*8 + 36, PrefillContext: 8}, 0},                                  // A 8..16
		{Batch{PrefillTokens: 8, PrefillPairs: 4*16 + 10 + 10, PrefillContext: 16}, 1},                           // A 16..20 (token 1), B 0..4
		{Batch{PrefillTokens: 2, PrefillPairs: 2*4 + 3, PrefillContext: 4, DecodeSeqs: 1, DecodeContext: 21}, 1}, // A decodes, B 4..6
	}
	now := time.Duration(0)
	for i, w := range want {
		r := step(t, e, now)
		now = r.End
		if r.Batch != w.batch {
			t.Fatalf("step %d: batch %+v, want %+v", i+1, r.Batch, w.batch)
		}
		first := 0
		for _, q := range r.Tokens {
			if q.Output == 1 {
				first++
			}
		}
		if first != w.firstToks {
			t.Fatalf("step %d: %d first tokens, want %d", i+1, first, w.firstToks)
		}
	}
	if a.Output != 2 || !a.Done || b.Output != 1 {
		t.Fatalf("after 4 steps: A %d tokens (done %v), B %d; want 2 (done), 1", a.Output, a.Done, b.Output)
	}
}

func TestStepTime(t *testing.T) {
	p := Llama31_8B_H100()
	cases := []struct {
		name string
		b    Batch
		want time.Duration
	}{
		// Memory-bound: 16.06 GB weights + 1000 x 128 KiB KV over
		// 0.72 x 3.35 TB/s, + 0.5 ms.
		{"decode 1 seq, 1000 ctx", Batch{DecodeSeqs: 1, DecodeContext: 1000}, 7212716 * time.Nanosecond},
		// Compute-bound: 2 x 8.03e9 x 1024 + 4 x 4096 x 32 x 1024*1025/2
		// FLOPs over 0.6 x 989 TFLOP/s, + 0.5 ms.
		{"prefill 1024 cold", Batch{PrefillTokens: 1024, PrefillPairs: 1024 * 1025 / 2}, 28677597 * time.Nanosecond},
		{"prefill 8192 cold", Batch{PrefillTokens: 8192, PrefillPairs: 8192 * 8193 / 2}, 251861397 * time.Nanosecond},
		// Memory-bound: the weights at 0.72, plus 8,176 cached tokens' KV
		// read at 0.093 of 3.35 TB/s (3.44 ms), + 0.5 ms.
		{"16 over 8176 cached", Batch{PrefillTokens: 16, PrefillPairs: 16*8176 + 16*17/2, PrefillContext: 8176}, 10598094 * time.Nanosecond},
		{"idle", Batch{}, 0},
	}
	for _, c := range cases {
		if got := p.StepTime(c.b); got != c.want {
			t.Errorf("%s: %v (%d ns), want %v", c.name, got, int64(got), c.want)
		}
	}
}

func TestEngineRejectsBadInput(t *testing.T) {
	e := newEngine(t, smallConfig(8))
	if err := e.Add(&Request{Prompt: Prompt{}, MaxTokens: 1}, 0); err == nil {
		t.Error("empty prompt accepted")
	}
	if err := e.Add(&Request{Prompt: Prompt{Len: 8}, MaxTokens: 1}, 0); err == nil {
		t.Error("prompt without its block hashes accepted")
	}
	bad := DefaultConfig()
	bad.MaxNumSeqs = 0
	if _, err := New(bad); err == nil {
		t.Error("MaxNumSeqs 0 accepted")
	}
}

func TestAbortReleasesBlocks(t *testing.T) {
	e := newEngine(t, smallConfig(8))
	a := req(1, 4, seq(0, 8), 5)
	add(t, e, a, 0)
	r := step(t, e, 0)
	if e.KVUsage() != 2.0/8 { // the 8 prompt tokens; the next slot comes with the next step
		t.Fatalf("usage %v, want 2/8", e.KVUsage())
	}
	e.Abort(a)
	if _, ok := e.Begin(r.End); ok || e.Busy() || e.KVUsage() != 0 {
		t.Fatalf("aborted request still scheduled or holding blocks (usage %v)", e.KVUsage())
	}
}

func TestSameStepRequestsSharePrefix(t *testing.T) {
	// A and B share 8 of their 12 prompt tokens and arrive together. vLLM v1
	// caches a block when it is allocated full, so B, admitted after A in
	// the same step, starts after A's 2 shared blocks: the step computes
	// 12 + 4 tokens, not 24.
	e := newEngine(t, smallConfig(64))
	a := req(1, 4, append(seq(0, 8), seq(100, 4)...), 2)
	b := req(2, 4, append(seq(0, 8), seq(200, 4)...), 2)
	add(t, e, a, 0)
	add(t, e, b, 0)
	r := step(t, e, 0)
	if a.CachedTokens != 0 || b.CachedTokens != 8 || r.Batch.PrefillTokens != 16 || r.CacheHits != 8 {
		t.Fatalf("A cached %d, B cached %d, step prefilled %d with %d hits; want 0, 8, 16, 8",
			a.CachedTokens, b.CachedTokens, r.Batch.PrefillTokens, r.CacheHits)
	}
	if len(r.Tokens) != 2 {
		t.Fatalf("%d first tokens after one step, want both", len(r.Tokens))
	}
}

func TestArrivalDuringChunkedPrefillSharesScheduledBlocks(t *testing.T) {
	// A's 20-token prompt takes two chunks of a 12-token budget. B, with A's
	// first 16 tokens and 4 of its own, arrives after the first. In the
	// second step A's chunk 12..20 is scheduled first, so B finds 16 shared
	// tokens, block 3 among them though A computes it in that very step
	// (committing at the step's end found 12), and its own 4 fit the
	// budget A left: both answer after two steps.
	cfg := smallConfig(64)
	cfg.MaxNumBatchedTokens = 12
	e := newEngine(t, cfg)
	a := req(1, 4, seq(0, 20), 2)
	add(t, e, a, 0)
	r := step(t, e, 0)
	b := req(2, 4, append(seq(0, 16), seq(500, 4)...), 2)
	add(t, e, b, r.End)
	r = step(t, e, r.End)
	if b.CachedTokens != 16 || r.Batch.PrefillTokens != 12 || a.Output != 1 || b.Output != 1 {
		t.Fatalf("B cached %d, step 2 prefilled %d, outputs A %d B %d; want 16, 12, 1, 1",
			b.CachedTokens, r.Batch.PrefillTokens, a.Output, b.Output)
	}
}

// vLLM counts a resumed request's cache lookup apart from new requests'
// (vllm/v1/metrics/stats.py, PrefixCacheStats.record: preempted_queries
// and preempted_hits), and vllm:prefix_cache_queries and _hits export only
// the new requests'. In TestPreemptionByRecompute's run B is preempted and
// resumes: only A's and B's first lookups, 8 tokens each, are counted.
func TestResumedLookupsAreNotCountedAsNewQueries(t *testing.T) {
	b := req(2, 4, seq(100, 8), 12)
	e, _ := preemptionRun(t, b)
	queries, hits, now := 0, 0, time.Duration(0)
	for e.Busy() {
		r := step(t, e, now)
		now = r.End
		queries += r.CacheQueries
		hits += r.CacheHits
	}
	if b.Preemptions != 1 {
		t.Fatalf("B preempted %d times, want 1", b.Preemptions)
	}
	if queries != 16 || hits != 0 {
		t.Fatalf("counted %d queries and %d hits, want 16 and 0 (the resumed lookup is not a new request's)", queries, hits)
	}
}

// A preempted request that resumes finds the blocks of its own output that
// were still cached, as in vLLM (its lookup covers num_tokens, outputs
// included): TestPreemptionByRecompute's run with B's output hashed. At
// the preemption B's 16 tokens with KV fill its 4 blocks, freed last
// first; A takes the last (tokens 12-15), so B resumes after its prompt
// and its first 4 generated tokens, 12 tokens, and computes 5 where it
// computed 9 with its output unhashed.
func TestResumedRequestFindsItsOwnOutput(t *testing.T) {
	prompt := seq(100, 8)
	b := &Request{ID: 2, Prompt: PromptThenOutput(4, prompt, append(append([]uint32(nil), prompt...), seq(300, 12)...)), MaxTokens: 12}
	e, _ := preemptionRun(t, b)
	drain(t, e, 0)
	if b.Preemptions != 1 || b.Output != 12 {
		t.Fatalf("B preempted %d times, %d tokens; want once and 12", b.Preemptions, b.Output)
	}
	if b.PrefillComputed != 8+5 {
		t.Fatalf("B's prefill computed %d tokens, want 13 (its prompt, then 5 after its cached output)", b.PrefillComputed)
	}
}

// TestSlowdownStretchesSteps: an engine with Slowdown 10 does the same
// work in the same steps, each ten times as long, so its requests' TTFT
// and end-to-end times are ten times the normal engine's; a slowdown
// below 1 (or not a number) is refused.
func TestSlowdownStretchesSteps(t *testing.T) {
	run := func(slowdown float64) (time.Duration, int, []*Request) {
		cfg := smallConfig(64)
		cfg.Slowdown = slowdown
		e := newEngine(t, cfg)
		rs := []*Request{req(1, 4, seq(0, 20), 5), req(2, 4, seq(100, 9), 3)}
		for _, r := range rs {
			add(t, e, r, 0)
		}
		end, steps := drain(t, e, 0)
		return end, steps, rs
	}
	end1, steps1, normal := run(0)
	end10, steps10, slow := run(10)
	if steps10 != steps1 || end10 != 10*end1 {
		t.Fatalf("slowdown 10: %d steps ending at %v; normal: %d steps ending at %v, want the same steps ending 10x later", steps10, end10, steps1, end1)
	}
	for i := range normal {
		if slow[i].TTFT() != 10*normal[i].TTFT() || slow[i].E2E() != 10*normal[i].E2E() {
			t.Errorf("request %d: TTFT %v E2E %v, want 10x %v and %v", i, slow[i].TTFT(), slow[i].E2E(), normal[i].TTFT(), normal[i].E2E())
		}
	}
	if end, _, _ := run(1); end != end1 {
		t.Errorf("slowdown 1 ended at %v, want %v (the profile's)", end, end1)
	}
	for _, bad := range []float64{0.5, -1, math.NaN(), math.Inf(1)} {
		cfg := DefaultConfig()
		cfg.Slowdown = bad
		if _, err := New(cfg); err == nil {
			t.Errorf("slowdown %v accepted", bad)
		}
	}
}
