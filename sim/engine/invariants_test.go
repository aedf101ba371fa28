package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestEngineInvariantsUnderRandomLoad drives small engines with random
// streams of requests that share prefixes, in caches small enough that
// prefix-cache eviction and preemption both happen often, and checks the
// KV cache's bookkeeping after every Begin and every End. The fleet study's
// hit rates and TTFTs are only as good as this bookkeeping: a wrong
// reference count evicts a running request's blocks or leaks blocks
// forever, a stale prefix-cache entry serves a hit on content that is no
// longer there, and a stalled engine leaves requests that never finish.
func TestEngineInvariantsUnderRandomLoad(t *testing.T) {
	const (
		seeds = 40
		steps = 2000 // per seed, then drained; 3000 took ~4 s under -race
	)
	var preemptions, evictions, requests, outputHits int
	for seed := range seeds {
		h := runRandomLoad(t, uint64(seed), steps)
		preemptions += h.preemptions
		evictions += h.evictions
		requests += len(h.submitted)
		outputHits += h.outputHits
	}
	t.Logf("%d seeds: %d requests, %d preemptions, %d evictions of cached blocks, %d admissions hitting generated blocks",
		seeds, requests, preemptions, evictions, outputHits)
	// Without these the test could pass without ever exercising the code
	// paths it exists for.
	if preemptions == 0 || evictions == 0 || outputHits == 0 {
		t.Fatalf("load too light to test anything: %d preemptions, %d evictions, %d generated-block hits over %d seeds",
			preemptions, evictions, outputHits, seeds)
	}
}

// invariantHarness drives one engine and checks it. shadow is the test's
// own record of what each block holds: the hash of the prompt block whose
// KV was last written into it, or nothing (written false) once the block
// is handed out for new data. It is kept from what the scheduler decided
// each step (which blocks it took, which tokens it computed), never from
// the cache's own hash fields, so that it can catch the cache lying.
type invariantHarness struct {
	t    *testing.T
	seed uint64
	step int
	e    *Engine

	shadow  []BlockHash
	written []bool

	holders   []int32          // scratch: running requests holding each block
	owner     []int            // scratch: last request (index+1) seen holding each block
	wasHashed []bool           // each block was findable in the prefix cache before Begin
	prevLen   map[*Request]int // blocks held by each running request before Begin

	submitted   []*Request
	finished    int
	preemptions int
	evictions   int // blocks taken for new data that still held findable content

	output     map[BlockHash]bool // hashes of generated blocks
	outputHits int                // admissions that found a generated block cached
}

func runRandomLoad(t *testing.T, seed uint64, steps int) *invariantHarness {
	rng := rand.New(rand.NewPCG(seed, 0))
	cfg := smallConfig(40 + rng.IntN(61)) // 40..100 blocks of 4 tokens
	cfg.MaxNumBatchedTokens = 8 + rng.IntN(41)
	cfg.MaxNumSeqs = 2 + rng.IntN(8)
	e := newEngine(t, cfg)
	n := cfg.Blocks()
	h := &invariantHarness{
		t: t, seed: seed, e: e,
		shadow: make([]BlockHash, n), written: make([]bool, n),
		holders: make([]int32, n), owner: make([]int, n), wasHashed: make([]bool, n),
		prevLen: make(map[*Request]int), output: make(map[BlockHash]bool),
	}

	// A few shared leading prefixes (system prompts) of 1-4 blocks; each
	// request is one of them plus a random tail, or repeats an earlier
	// request's prompt (a retry or a second sample), so that prefix hits,
	// same-step sharing and fully cached prompts all occur.
	bs := cfg.BlockSize
	prefixes := make([][]uint32, 2+rng.IntN(4))
	for i := range prefixes {
		prefixes[i] = randomTokens(rng, bs*(1+rng.IntN(4)))
	}
	// Half the requests carry their output's block hashes (as the fleet
	// simulator's and the HTTP server's do), and some prompts go on from
	// an earlier request's prompt and output (a conversation's next turn),
	// so that generated blocks are cached, hit and evicted too.
	type prompt struct{ toks, joint []uint32 }
	var prompts []prompt
	rate := 0.1 + 0.4*rng.Float64() // chance that requests arrive before a step
	newRequest := func() *Request {
		var p prompt
		fresh := true
		switch k := rng.IntN(8); {
		case len(prompts) > 0 && k < 2:
			p, fresh = prompts[rng.IntN(len(prompts))], false
		case len(prompts) > 0 && k < 4 && prompts[len(prompts)-1].joint != nil:
			last := prompts[len(prompts)-1].joint
			p.toks = append(append([]uint32(nil), last...), randomTokens(rng, rng.IntN(3*bs+1))...)
		default:
			p.toks = append(append([]uint32(nil), prefixes[rng.IntN(len(prefixes))]...), randomTokens(rng, rng.IntN(10*bs+1))...)
		}
		out := 1 + rng.IntN(12)
		if rng.IntN(8) == 0 {
			out = 1 + rng.IntN(40) // a long answer, to grow past the cache
		}
		if p.joint != nil {
			out = len(p.joint) - len(p.toks) // a retry generates what it did
		} else if rng.IntN(2) == 0 {
			p.joint = append(append([]uint32(nil), p.toks...), randomTokens(rng, out)...)
		}
		if fresh {
			prompts = append(prompts, p)
		}
		r := req(uint64(len(h.submitted)), bs, p.toks, out)
		if p.joint != nil {
			r.Prompt = PromptThenOutput(bs, p.toks, p.joint)
			for _, b := range r.Prompt.Blocks[len(p.toks)/bs:] {
				h.output[b] = true
			}
		}
		return r
	}

	now := time.Duration(0)
	for h.step = 1; h.step <= steps || e.Busy(); h.step++ {
		if h.step > 100*steps {
			h.fail("drain", "engine still busy (%d running, %d waiting)", e.Running(), e.Waiting())
		}
		if h.step <= steps && rng.Float64() < rate && e.Waiting() < 4*cfg.MaxNumSeqs {
			for range 1 + rng.IntN(3) {
				r := newRequest()
				add(t, e, r, now)
				h.submitted = append(h.submitted, r)
			}
		}
		h.beforeBegin()
		end, ok := e.Begin(now)
		if !ok {
			// Invariant 4: a busy engine that schedules nothing would stop
			// the simulated clock for its requests, whose TTFTs would
			// then never be recorded.
			if e.Busy() {
				h.fail("Begin", "busy engine (%d running, %d waiting) scheduled nothing", e.Running(), e.Waiting())
			}
			now += time.Millisecond
			continue
		}
		h.afterBegin()
		h.checkCache("after Begin", true)
		h.checkContent("after Begin")
		res := e.End(end)
		now = end
		h.preemptions += res.Preemptions
		for _, r := range res.Finished {
			if !r.Done || r.Output != r.MaxTokens || r.blocks != nil {
				h.fail("after End", "request %d finished with done=%v, %d of %d tokens, %d blocks", r.ID, r.Done, r.Output, r.MaxTokens, len(r.blocks))
			}
			h.finished++
		}
		h.checkCache("after End", false)
		h.checkContent("after End")
		h.checkOwnership()
	}

	// Invariant 4, the end: every request submitted came out, once.
	if h.finished != len(h.submitted) {
		h.fail("drained", "%d requests finished of %d submitted", h.finished, len(h.submitted))
	}
	for _, r := range h.submitted {
		if !r.Done || r.Output != r.MaxTokens {
			h.fail("drained", "request %d done=%v with %d of %d tokens", r.ID, r.Done, r.Output, r.MaxTokens)
		}
	}
	if e.kv.free != n {
		h.fail("drained", "%d of %d blocks free on an idle engine", e.kv.free, n)
	}
	return h
}

func randomTokens(rng *rand.Rand, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = rng.Uint32N(VocabSize)
	}
	return out
}

func (h *invariantHarness) fail(phase, format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("seed %d step %d (%s): %s", h.seed, h.step, phase, fmt.Sprintf(format, args...))
}

// beforeBegin records what the step starts from: which blocks each running
// request holds and which blocks are findable in the prefix cache.
func (h *invariantHarness) beforeBegin() {
	clear(h.prevLen)
	for _, r := range h.e.running {
		h.prevLen[r] = len(r.blocks)
	}
	for id := range h.e.kv.blocks {
		h.wasHashed[id] = h.e.kv.blocks[id].hashed
	}
}

// afterBegin updates the shadow from the step just planned, in batch order
// (the order in which the scheduler took blocks): blocks a request took for
// new data lose their old content, and the prompt blocks its scheduled
// tokens complete get their new content. The content counts as written
// when the step is planned because a request admitted later in the same
// step reads what this step writes (see schedule).
func (h *invariantHarness) afterBegin() {
	e, bs := h.e, h.e.cfg.BlockSize
	for _, r := range e.batch {
		if want := e.blocksFor(r.computed + r.scheduled); len(r.blocks) != want {
			h.fail("after Begin", "request %d holds %d blocks for %d+%d tokens, want %d", r.ID, len(r.blocks), r.computed, r.scheduled, want)
		}
		fresh, wasRunning := h.prevLen[r]
		if !wasRunning {
			// Admitted in this step: its leading blocks, up to what it
			// counts as computed, are prefix-cache hits (checkContent
			// checks them); the rest were taken for new data.
			if r.computed%bs != 0 {
				h.fail("after Begin", "request %d admitted with %d tokens computed, not whole blocks", r.ID, r.computed)
			}
			fresh = r.computed / bs
			if slices.ContainsFunc(r.Prompt.Blocks[:fresh], func(b BlockHash) bool { return h.output[b] }) {
				h.outputHits++
			}
		}
		for _, id := range r.blocks[fresh:] {
			if h.wasHashed[id] {
				h.evictions++
			}
			h.written[id] = false
		}
		for i := r.computed / bs; i < min((r.computed+r.scheduled)/bs, len(r.Prompt.Blocks)); i++ {
			id := r.blocks[i]
			h.shadow[id], h.written[id] = r.Prompt.Blocks[i], true
		}
	}
}

// checkCache checks the cache's bookkeeping against the requests and,
// withMap, the prefix-cache map against the blocks and the shadow.
func (h *invariantHarness) checkCache(phase string, withMap bool) {
	e, c := h.e, h.e.kv
	clear(h.holders)
	clear(h.owner)
	for i, r := range e.running {
		if !r.running || r.Done {
			h.fail(phase, "request %d in the running list with running=%v done=%v", r.ID, r.running, r.Done)
		}
		for _, id := range r.blocks {
			if h.owner[id] == i+1 {
				h.fail(phase, "request %d holds block %d twice", r.ID, id)
			}
			h.owner[id] = i + 1
			h.holders[id]++
		}
	}
	for _, r := range e.waiting {
		if r.running || len(r.blocks) != 0 {
			h.fail(phase, "waiting request %d has running=%v and %d blocks", r.ID, r.running, len(r.blocks))
		}
	}

	// Invariant 1: a block's reference count is the number of running
	// requests holding it. One too low and the block is evicted, and its
	// content overwritten, under a request still using it; one too high
	// and it is never freed, shrinking the cache for the rest of the run.
	// Invariant 2: a block is in the free queue exactly when nobody holds
	// it, and free counts the queue. Otherwise admission and preemption
	// decide on a wrong free count, and eviction takes pinned blocks or
	// never finds free ones.
	queued := 0
	for id := range c.blocks {
		b := &c.blocks[id]
		if b.ref != h.holders[id] {
			h.fail(phase, "block %d has ref %d but %d running requests hold it", id, b.ref, h.holders[id])
		}
		if b.queued != (b.ref == 0) {
			h.fail(phase, "block %d has ref %d and queued=%v", id, b.ref, b.queued)
		}
		if b.queued {
			queued++
		}
	}
	n, prev := 0, int32(-1)
	for id := c.head; id >= 0; id = c.blocks[id].next {
		if n++; n > len(c.blocks) {
			h.fail(phase, "free queue has a cycle")
		}
		if !c.blocks[id].queued || c.blocks[id].prev != prev {
			h.fail(phase, "free queue broken at block %d (queued=%v, prev %d, want %d)", id, c.blocks[id].queued, c.blocks[id].prev, prev)
		}
		prev = id
	}
	if prev != c.tail || n != queued || n != c.free {
		h.fail(phase, "free queue holds %d blocks (tail %d, want %d), %d are marked queued, free = %d", n, c.tail, prev, queued, c.free)
	}

	// Invariant 3: every prefix-cache entry points at a block holding that
	// hash, both in the cache's own fields and in the shadow of what was
	// written there; a stale entry would count a hit, and a short TTFT,
	// for KV that is gone. Only Begin changes entries, so End skips this
	// (map lookups dominate the test's time under -race). Checking that
	// each block claiming a hash is that hash's entry, and that the map has
	// no other entries, checks every entry without ranging over the map.
	if !withMap {
		return
	}
	hashed := 0
	for id := range c.blocks {
		b := &c.blocks[id]
		if !b.hashed {
			continue
		}
		hashed++
		if got, ok := c.cached[b.hash]; !ok || got != int32(id) {
			h.fail(phase, "block %d has hash %#x but the prefix cache maps it to %d (present=%v)", id, uint64(b.hash), got, ok)
		}
		if !h.written[id] || h.shadow[id] != b.hash {
			h.fail(phase, "block %d is findable by hash %#x, but its content is %#x (written=%v)", id, uint64(b.hash), uint64(h.shadow[id]), h.written[id])
		}
	}
	if hashed != len(c.cached) {
		h.fail(phase, "prefix cache has %d entries for %d hashed blocks: some entry points at a block without that hash", len(c.cached), hashed)
	}
}

// checkContent checks invariant 5: every full prompt block a running
// request counts as computed (prefix-cache hits included) holds that
// request's content at that position. If not, the request would be
// charged for less prefill than it needs: its TTFT and the study's hit
// rate would credit a cache that did not have its prefix.
func (h *invariantHarness) checkContent(phase string) {
	bs := h.e.cfg.BlockSize
	for _, r := range h.e.running {
		if len(r.blocks) < h.e.blocksFor(r.computed) {
			h.fail(phase, "request %d counts %d tokens computed in %d blocks", r.ID, r.computed, len(r.blocks))
		}
		for i := range min(r.computed/bs, len(r.Prompt.Blocks)) {
			id := r.blocks[i]
			if !h.written[id] || h.shadow[id] != r.Prompt.Blocks[i] {
				h.fail(phase, "request %d counts block %d (id %d) as computed with hash %#x, but it holds %#x (written=%v)",
					r.ID, i, id, uint64(r.Prompt.Blocks[i]), uint64(h.shadow[id]), h.written[id])
			}
		}
	}
}

// checkOwnership, after End, checks that each running request holds just
// the blocks its computed tokens need, and that a block it may still write
// (past its computed full prompt blocks) is its alone: writing a block
// another request reads as cached would corrupt that request's prefix.
func (h *invariantHarness) checkOwnership() {
	bs := h.e.cfg.BlockSize
	for _, r := range h.e.running {
		if want := h.e.blocksFor(r.computed); len(r.blocks) != want {
			h.fail("after End", "request %d holds %d blocks for %d computed tokens, want %d", r.ID, len(r.blocks), r.computed, want)
		}
		for i := min(r.computed/bs, len(r.Prompt.Blocks)); i < len(r.blocks); i++ {
			if id := r.blocks[i]; h.holders[id] != 1 {
				h.fail("after End", "request %d may still write block %d (id %d), which %d running requests hold", r.ID, i, id, h.holders[id])
			}
		}
	}
}
