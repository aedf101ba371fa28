package engine

import "time"

// Request is one generation request. The caller sets ID, Prompt and
// MaxTokens; the engine fills the rest, which the caller may read between
// steps (after End), never during one.
type Request struct {
	ID        uint64
	Prompt    Prompt
	MaxTokens int // tokens to generate (the filler never stops early)
	// SkipPrefixCache computes the whole prompt, looking nothing up in the
	// prefix cache (its blocks are still cached for others): vLLM's
	// skip_reading_prefix_cache, set for requests that want prompt
	// logprobs, which cached blocks cannot give.
	SkipPrefixCache bool

	Arrival    time.Duration // when Add was called
	Scheduled  time.Duration // first time the scheduler admitted it
	FirstToken time.Duration // end of the step that produced token 1
	Finished   time.Duration // end of the step that produced the last token

	// CachedTokens were found in the prefix cache when it was first admitted:
	// usage.prompt_tokens_details.cached_tokens in vLLM's response.
	CachedTokens int
	// PrefillComputed counts the tokens computed by prefill (not decode)
	// steps: the uncached prompt and, after a preemption, everything
	// recomputed, generated tokens included.
	PrefillComputed int
	Output          int // tokens generated so far
	Preemptions     int
	Done            bool

	computed  int     // tokens whose KV is in the cache
	scheduled int     // tokens being computed in the current step
	prefill   bool    // the scheduled tokens are a prefill chunk
	admitted  bool    // has been scheduled at least once
	running   bool    // in the running list (else waiting, or done)
	aborted   bool    // Abort was called
	committed int     // leading blocks registered in the prefix cache
	blocks    []int32 // KV blocks held, in token order
}

// numTokens is every token known: the prompt and the tokens generated so far.
// The newest generated token has no KV yet: computing it yields the next.
func (r *Request) numTokens() int { return r.Prompt.Len + r.Output }

// QueueDelay is the time from arrival to first admission.
func (r *Request) QueueDelay() time.Duration { return r.Scheduled - r.Arrival }

// TTFT is the time from arrival to the first token.
func (r *Request) TTFT() time.Duration { return r.FirstToken - r.Arrival }

// E2E is the time from arrival to the last token.
func (r *Request) E2E() time.Duration { return r.Finished - r.Arrival }

// StepResult tells a driver what one step did. Its slices are reused by the
// next step: copy what must outlive it.
type StepResult struct {
	Start, End time.Duration
	Batch      Batch

	// Tokens lists the requests that produced one token at End; a request
	// whose Output is 1 produced its first token.
	Tokens []*Request
	// Finished lists the requests that produced their last token at End.
	Finished []*Request
	// Admitted lists the requests scheduled for the first time in this step.
	Admitted []*Request

	PromptTokens     int // prompt tokens of the requests whose prefill ended
	GenerationTokens int
	CacheQueries     int // tokens looked up in the prefix cache by new (not resumed) requests
	CacheHits        int // of those, tokens found (vllm:prefix_cache_queries and _hits)
	Preemptions      int
}

func (s *StepResult) reset() {
	*s = StepResult{Tokens: s.Tokens[:0], Finished: s.Finished[:0], Admitted: s.Admitted[:0]}
}
