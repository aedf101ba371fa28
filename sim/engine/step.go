package engine

import "time"

// End applies the step begun by Begin; now is its end on the caller's clock
// (the time Begin returned, or later if the driver fell behind). Every
// request whose KV caught up with its tokens samples one new token (its full
// prompt blocks became findable when they were scheduled); requests that reached
// MaxTokens finish and release their blocks.
func (e *Engine) End(now time.Duration) *StepResult {
	if !e.inStep {
		e.res.reset()
		return &e.res
	}
	e.inStep = false
	e.res.End = now
	finished := false
	for _, r := range e.batch {
		if r.aborted || !r.running {
			continue
		}
		if r.prefill {
			r.PrefillComputed += r.scheduled
		}
		r.computed += r.scheduled
		r.scheduled = 0
		if r.computed < r.numTokens() {
			continue // a prefill chunk that does not end the prompt
		}
		r.Output++
		e.res.GenerationTokens++
		e.res.Tokens = append(e.res.Tokens, r)
		if r.Output == 1 {
			r.FirstToken = now
			e.res.PromptTokens += r.Prompt.Len
		}
		if r.Output >= r.MaxTokens {
			e.kv.release(r.blocks)
			r.blocks, r.running, r.Done, r.Finished = nil, false, true, now
			e.res.Finished = append(e.res.Finished, r)
			finished = true
		}
	}
	if finished {
		e.compactRunning()
	}
	return &e.res
}

func (e *Engine) compactRunning() {
	out := e.running[:0]
	for _, r := range e.running {
		if r.running {
			out = append(out, r)
		}
	}
	clear(e.running[len(out):])
	e.running = out
}
