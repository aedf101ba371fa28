// Package vllm serves simulated vLLM engines over HTTP (`prefixring sim`,
// the demo's and the tests' engines). One Server wraps one engine.Engine, driven
// by the wall clock from a single goroutine that sleeps until each step's
// computed end, and speaks vLLM's OpenAI-compatible API:
//
//   - POST /v1/completions and /v1/chat/completions, non-streaming and
//     streaming (SSE "data:" chunks, "[DONE]", stream_options.include_usage),
//     with usage.prompt_tokens_details.cached_tokens; a chat's messages
//     and tools are rendered with a Llama-3-like template
//     (engine.RenderChat) and prefilled as one prompt; with
//     add_generation_prompt false, without the assistant's header, the
//     reply continuing the last message's turn under its role. A body must be
//     declared application/json, or vLLM's 400 refuses it. A model other
//     than Config.Model is vLLM's 404; a missing, null or empty one is
//     Config.Model, as vLLM serves its first served model for it;
//   - n: n engine requests, as vLLM v1 runs n child requests, the later
//     ones finding the first one's prompt blocks in the prefix cache;
//     choices 0..n-1, streamed one choice per chunk. Every choice's text
//     is the same filler (nothing is sampled), and usage's cached_tokens
//     is one child's, as vLLM's is. n > 1 with temperature 0 is refused,
//     as in vLLM;
//   - echo: a completion's prompt text before its output (max_tokens 0:
//     the prompt alone, one token still generated), a chat's last
//     message before its reply when its role is the reply's. A prompt of token ids, which the
//     stand-in tokenizer cannot decode, echoes as vLLM's "token_id:N"
//     placeholders;
//   - logprobs (completions: an integer, or a boolean read as 1 or 0 as
//     vLLM's pydantic model reads it; chat: logprobs true with
//     top_logprobs), in vLLM's shapes, up to --max-logprobs' default of
//     20. The values are simulated: each token is its position's most
//     likely, with a logprob from a fixed cycle, and its alternatives are
//     other words, each 2 lower. With echo the prompt is scored too, and,
//     as vLLM skips the prefix cache for prompt logprobs, computed whole.
//     prompt_logprobs is checked as vLLM checks it, then refused: the
//     simulator does not score prompts on their own;
//   - GET /v1/models, GET /health (HEAD is 405, as FastAPI's routes
//     do not add it to GET);
//   - /metrics with vLLM's own metric names, types and labels, for any
//     method, as vLLM mounts prometheus_client's app there;
//   - GET/PUT /admin/faults: added latency, error rate, hangs and abrupt
//     closes mid-stream, for chaos tests.
//
// Every response carries an X-Request-Id, as with vLLM's
// --enable-request-id-headers: the client's, else a fresh uuid4-shaped one
// drawn from Config.Seed; a generation's response id ("cmpl-"/"chatcmpl-"
// and that id) uses it too, where vLLM would draw a second one.
//
// Errors have vLLM's shape ({"error": {"message", "type", "param", "code"}},
// since vLLM 0.10.2, github.com/vllm-project/vllm/pull/22099) and status.
// Handlers never block the engine goroutine: they are told of new tokens through a one-slot channel and, when they fall
// behind, send the tokens they missed in one chunk, as vLLM's output
// handler merges deltas for a slow client.
package vllm
