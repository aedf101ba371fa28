package engine

import "time"

// Begin plans the step that starts at now, as vLLM v1's scheduler does:
// running requests first, in order, each given the tokens it still needs
// (one for a decoding request, the rest of its prompt for a prefilling one,
// chunked to the token budget); when the KV cache cannot hold a running
// request's new tokens, the most recently admitted running request is
// preempted (its blocks freed, its progress recomputed later). Then, if
// nothing was preempted, waiting requests are admitted in FIFO order while
// the batch has room, each starting after its longest cached prefix. A
// waiting request that does not fit blocks those behind it.
//
// Begin returns when the step ends on the caller's clock, or ok == false if
// there is nothing to do. The caller must call End at that time (or later)
// before calling Begin again.
func (e *Engine) Begin(now time.Duration) (end time.Duration, ok bool) {
	if e.inStep {
		return 0, false
	}
	e.dropAborted()
	e.res.reset()
	e.batch = e.batch[:0]
	budget := e.cfg.MaxNumBatchedTokens
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(r.numTokens()-r.computed, budget)
		if !e.makeRoom(r, r.computed+n) {
			break // r itself was preempted, and it was the last one
		}
		e.schedule(r, n, now)
		budget -= n
	}
	if e.res.Preemptions == 0 {
		budget = e.admit(budget, now)
	}
	if len(e.batch) == 0 {
		return 0, false
	}
	e.inStep = true
	e.res.Start = now
	e.res.End = now + e.cfg.StepTime(e.res.Batch)
	return e.res.End, true
}

// makeRoom grows r's blocks to hold tokens, preempting from the back of the
// running list until they fit. It reports false if r was the one preempted.
func (e *Engine) makeRoom(r *Request, tokens int) bool {
	for {
		need := e.blocksFor(tokens) - len(r.blocks)
		if need <= e.kv.free {
			for ; need > 0; need-- {
				r.blocks = append(r.blocks, e.kv.take())
			}
			return true
		}
		victim := e.running[len(e.running)-1]
		e.running = e.running[:len(e.running)-1]
		e.preempt(victim)
		if victim == r {
			return false
		}
	}
}

// preempt frees a running request's blocks and puts it back at the front of
// the waiting queue; it will recompute everything not found in the cache.
func (e *Engine) preempt(r *Request) {
	e.kv.release(r.blocks)
	r.blocks, r.computed, r.committed, r.running = r.blocks[:0], 0, 0, false
	r.Preemptions++
	e.res.Preemptions++
	e.waiting = append([]*Request{r}, e.waiting...)
}

// admit moves waiting requests into the batch while it has room.
func (e *Engine) admit(budget int, now time.Duration) int {
	bs := e.cfg.BlockSize
	for len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs && budget > 0 {
		r := e.waiting[0]
		// At least one token must be computed to produce the next one, so a
		// fully cached prompt still recomputes its last block (as in vLLM).
		e.hits = e.hits[:0]
		if !r.SkipPrefixCache {
			e.hits = e.kv.longestHit(r.Prompt.Blocks, (r.numTokens()-1)/bs, e.hits)
		}
		cached := len(e.hits) * bs
		n := min(r.numTokens()-cached, budget)
		need := e.blocksFor(cached+n) - len(e.hits)
		if !e.kv.canTake(e.hits, need) {
			break
		}
		for _, id := range e.hits {
			e.kv.pin(id)
			r.blocks = append(r.blocks, id)
		}
		for ; need > 0; need-- {
			r.blocks = append(r.blocks, e.kv.take())
		}
		r.computed, r.committed, r.running = cached, len(e.hits), true
		// vLLM counts only the lookups it makes, and a resumed request's
		// apart (PrefixCacheStats.record's preempted_*), outside the
		// prefix-cache metrics.
		if !r.SkipPrefixCache && r.Preemptions == 0 {
			e.res.CacheQueries += r.numTokens()
			e.res.CacheHits += cached
		}
		if !r.admitted {
			r.admitted, r.Scheduled, r.CachedTokens = true, now, cached
			e.res.Admitted = append(e.res.Admitted, r)
		}
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		e.running = append(e.running, r)
		e.schedule(r, n, now)
		budget -= n
	}
	return budget
}

// schedule adds n tokens of r to the step and prices them. The prompt
// blocks those tokens fill become findable in the prefix cache at once, as
// vLLM v1's allocate_slots caches a block as soon as it is allocated full:
// a request admitted later in the same step, or while r's prefill is still
// running, starts after them instead of computing them again. (Each layer
// writes the batch's new KV before it attends, so the later request reads
// what r writes in the same forward pass.)
func (e *Engine) schedule(r *Request, n int, now time.Duration) {
	r.scheduled = n
	e.batch = append(e.batch, r)
	for full := min((r.computed+n)/e.cfg.BlockSize, len(r.Prompt.Blocks)); r.committed < full; r.committed++ {
		e.kv.commit(r.blocks[r.committed], r.Prompt.Blocks[r.committed])
	}
	b := &e.res.Batch
	r.prefill = !(n == 1 && r.Output > 0 && r.computed == r.numTokens()-1)
	if !r.prefill {
		b.DecodeSeqs++
		b.DecodeContext += int64(r.computed + 1)
		return
	}
	b.AddPrefill(r.computed, n)
}

func (e *Engine) blocksFor(tokens int) int {
	return (tokens + e.cfg.BlockSize - 1) / e.cfg.BlockSize
}
