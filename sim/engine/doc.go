// Package engine is a pure model of one vLLM (v1) inference server: a
// deterministic stand-in tokenizer, a paged KV cache with automatic prefix
// caching, a continuous-batching scheduler with chunked prefill and
// preemption by recompute, and a roofline step-cost model.
//
// The package does no I/O, starts no goroutines and reads no clock: time is a
// time.Duration on the caller's clock, passed in. Two drivers share it: the
// wall-clock HTTP server in package sim/vllm and the discrete-event fleet
// simulator in package sim/fleet. A driver repeatedly calls Begin (plan one step and
// learn how long it takes) and, once that much time has passed on its clock,
// End (apply the step: tokens computed, first tokens, finished requests).
//
// Prompts reach the engine as a Prompt: a token count and the chained hashes
// of its full blocks, and where the driver knows the answer's text, of the
// blocks the answer will fill, which the engine caches as it generates them
// (PromptThenOutput), as vLLM does. Text, token ids and Mooncake-style
// hash_id traces all feed the same Chain, so a prefix shared in tokens is
// shared in the cache.
package engine
