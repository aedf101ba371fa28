// Package vllm serves simulated vLLM engines over HTTP (`prefixring sim`,
// the demo's and the tests' engines). One Server wraps one engine.Engine, driven
// by the wall clock from a single goroutine that sleeps until each step's
// computed end, and speaks vLLM's OpenAI-compatible API:
//
//   - POST /v1/completions and /v1/chat/completions, non-streaming and
//     streaming (SSE "data:" chunks, "[DONE]", stream_options.include_usage),
//     with usage.prompt_tokens_details.cached_tokens; a chat's messages
//     and tools are rendered with a Llama-3-like template
//     (engine.RenderChat) and prefilled as one prompt;
//   - GET /v1/models, GET /health;
//   - GET /metrics with vLLM's own metric names, types and labels;
//   - GET/PUT /admin/faults: added latency, error rate, hangs and abrupt
//     closes mid-stream, for chaos tests.
//
// Errors have vLLM's shape ({"error": {"message", "type", "param", "code"}},
// since vLLM 0.10.2, github.com/vllm-project/vllm/pull/22099) and status.
// Handlers never block the engine goroutine: they are told of new tokens through a one-slot channel and, when they fall
// behind, send the tokens they missed in one chunk, as vLLM's output
// handler merges deltas for a slow client.
package vllm
