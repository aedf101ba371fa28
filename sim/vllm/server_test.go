package vllm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestWarmPromptSkipsCachedPrefill sends the same 8192-token prompt twice.
// The first TTFT is the cold prefill; the second finds 8176 tokens (511
// blocks; the last block is always recomputed) in the prefix cache, so its
// TTFT is one 16-token step: lower by the prefill time of the cached blocks.
// In a synctest bubble the HTTP path adds no time, so both are exact.
func TestWarmPromptSkipsCachedPrefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := start(t, DefaultConfig())
		prompt := strings.Repeat("abcdefgh", 8192/2) // 8192 tokens
		body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":1}`, s.cfg.Model, prompt)
		p := s.cfg.Engine.Profile
		wantCold := p.StepTime(engine.Batch{PrefillTokens: 8192, PrefillPairs: 8192 * 8193 / 2})
		wantWarm := p.StepTime(engine.Batch{PrefillTokens: 16, PrefillPairs: 16*8176 + 16*17/2, PrefillContext: 8176})
		for i, want := range []struct {
			ttft   time.Duration
			cached int
		}{{wantCold, 0}, {wantWarm, 8176}} {
			t0 := time.Now()
			rec := do(s, http.MethodPost, "/v1/completions", body)
			ttft := time.Since(t0)
			checkStatus(t, rec, http.StatusOK)
			resp := decode[completionResponse](t, rec.Body)
			if ttft != want.ttft || resp.Usage.PromptTokensDetails.CachedTokens != want.cached {
				t.Fatalf("request %d: TTFT %v cached %d, want %v and %d", i, ttft, resp.Usage.PromptTokensDetails.CachedTokens, want.ttft, want.cached)
			}
			time.Sleep(time.Second)
		}
		// 252 ms cold, 10.6 ms warm: the 8176 cached tokens saved ~241 ms
		// (measured on an H100: 246 and 10.5 ms, see sim/engine's
		// TestProfileMatchesCalibration).
		if saved := wantCold - wantWarm; saved < 236*time.Millisecond || saved > 246*time.Millisecond {
			t.Fatalf("saved %v", saved)
		}
		const want = `
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 8176
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 16384
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 16384
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
			"vllm:generation_tokens_total", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
			"vllm:prompt_tokens_total", "vllm:num_requests_running"); err != nil {
			t.Fatal(err)
		}
		scrape := do(s, http.MethodGet, "/metrics", "").Body.String()
		for _, line := range []string{
			`vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2`,
			`vllm:request_prefill_kv_computed_tokens_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 8208`,
			`vllm:e2e_request_latency_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2`,
		} {
			if !strings.Contains(scrape, line) {
				t.Errorf("/metrics lacks %s", line)
			}
		}
	})
}

// TestWrongMethodIs405: vLLM's router (FastAPI) answers a known path with
// the wrong method 405, naming the methods it takes in Allow, and its
// default handler's {"detail": ...} body; only unknown paths are 404.
// FastAPI's APIRoute, unlike Starlette's Route, does not add HEAD to a GET
// route, so HEAD is a wrong method too.
func TestWrongMethodIs405(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		for _, c := range []struct{ method, path, allow string }{
			{http.MethodGet, "/v1/completions", "POST"},
			{http.MethodPut, "/v1/chat/completions", "POST"},
			{http.MethodPost, "/v1/models", "GET"},
			{http.MethodHead, "/v1/models", "GET"},
			{http.MethodDelete, "/health", "GET"},
			{http.MethodHead, "/health", "GET"},
		} {
			rec := do(s, c.method, c.path, "")
			checkStatus(t, rec, http.StatusMethodNotAllowed)
			if got := rec.Header().Get("Allow"); got != c.allow {
				t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
			}
			if body := strings.TrimSpace(rec.Body.String()); body != `{"detail":"Method Not Allowed"}` {
				t.Errorf("%s %s: body %s", c.method, c.path, body)
			}
		}
		checkStatus(t, do(s, http.MethodGet, "/v1/nope", ""), http.StatusNotFound)
	})
}

// TestMetricsAnswersEveryMethod: vLLM mounts prometheus_client's ASGI app
// at /metrics (vllm/entrypoints/serve/instrumentator/metrics.py), which
// serves the scrape whatever the method, so /metrics is never 404 or 405.
func TestMetricsAnswersEveryMethod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete} {
			rec := do(s, method, "/metrics", "")
			checkStatus(t, rec, http.StatusOK)
			if method != http.MethodHead && !strings.Contains(rec.Body.String(), "vllm:num_requests_running") {
				t.Errorf("%s /metrics: no scrape in %.200s", method, rec.Body)
			}
		}
	})
}

// TestNextTurnFindsTheAnswerCached plays a conversation's two turns: the
// second carries the first's answer, which vLLM v1 cached as it generated
// it (full blocks of output are hashed like the prompt's), so the second
// turn finds the first prompt and the answer's full blocks, not the first
// prompt alone. Both APIs: a chat's template closes the answer with
// <|eot_id|>, a completion's text goes on right after it.
func TestNextTurnFindsTheAnswerCached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		msgs := []engine.Message{{Role: "system", Content: strings.Repeat(" sys", 100)}, {Role: "user", Content: " hello there"}}
		first := engine.Tokenize(engine.RenderChat(msgs, ""))
		body := func(msgs []engine.Message) string {
			b, _ := json.Marshal(map[string]any{"model": s.cfg.Model, "messages": msgs, "max_tokens": 100})
			return string(b)
		}
		rec := do(s, http.MethodPost, "/v1/chat/completions", body(msgs))
		checkStatus(t, rec, http.StatusOK)
		answer := decode[chatResponse](t, rec.Body).Choices[0].Message.Content
		msgs = append(msgs, engine.Message{Role: "assistant", Content: answer}, engine.Message{Role: "user", Content: " and then"})
		rec = do(s, http.MethodPost, "/v1/chat/completions", body(msgs))
		checkStatus(t, rec, http.StatusOK)
		// The first turn's 100 generated tokens have KV for 99 of them:
		// cached are the full blocks of its prompt and those 99 tokens.
		bs := s.cfg.Engine.BlockSize
		want := (len(first) + 99) / bs * bs
		if got := decode[chatResponse](t, rec.Body).Usage.PromptTokensDetails.CachedTokens; got != want {
			t.Fatalf("chat: second turn found %d tokens cached, want %d (the first prompt's %d tokens and its answer's)", got, want, len(first))
		}

		prompt := strings.Repeat(" sys", 100) + "\n\nUser: hi\n\nAssistant:" // 115 bytes: not whole tokens
		rec = do(s, http.MethodPost, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":40}`, s.cfg.Model, prompt))
		checkStatus(t, rec, http.StatusOK)
		next := prompt + decode[completionResponse](t, rec.Body).Choices[0].Text + "\n\nUser: more\n\nAssistant:"
		rec = do(s, http.MethodPost, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":1}`, s.cfg.Model, next))
		checkStatus(t, rec, http.StatusOK)
		// 29 prompt tokens and KV for 39 of the 40 generated.
		if got, want := decode[completionResponse](t, rec.Body).Usage.PromptTokensDetails.CachedTokens, (engine.CountTokens(prompt)+39)/bs*bs; got != want {
			t.Fatalf("completions: second turn found %d tokens cached, want %d", got, want)
		}
	})
}

// TestNextTurnFindsTheAnswerCached where the stand-in tokenizer cuts the
// first prompt's last token short (its text is not whole 4-byte tokens)
// and that token ends a full block: the next turn carries it cut with the
// answer's first bytes, as every request that goes on from this prompt's
// text does (the filler always starts alike). A real tokenizer keeps a
// chat's tokens at its template's boundary, so the next turn finds the
// whole first prompt and its answer cached, not the prompt less its last
// block and no answer.
func TestNextTurnFindsTheAnswerAfterACutBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		bs := s.cfg.Engine.BlockSize
		user := " hello"
		msgs := func(user string) []engine.Message {
			return []engine.Message{{Role: "system", Content: strings.Repeat(" sys", 100)}, {Role: "user", Content: user}}
		}
		for text := engine.RenderChat(msgs(user), ""); len(text)%engine.CharsPerToken == 0 || engine.CountTokens(text)%bs != 0; text = engine.RenderChat(msgs(user), "") {
			user += "x"
		}
		first := engine.CountTokens(engine.RenderChat(msgs(user), ""))
		body := func(msgs []engine.Message) string {
			b, _ := json.Marshal(map[string]any{"model": s.cfg.Model, "messages": msgs, "max_tokens": 100})
			return string(b)
		}
		rec := do(s, http.MethodPost, "/v1/chat/completions", body(msgs(user)))
		checkStatus(t, rec, http.StatusOK)
		answer := decode[chatResponse](t, rec.Body).Choices[0].Message.Content
		next := append(msgs(user), engine.Message{Role: "assistant", Content: answer}, engine.Message{Role: "user", Content: " and then"})
		rec = do(s, http.MethodPost, "/v1/chat/completions", body(next))
		checkStatus(t, rec, http.StatusOK)
		if got, want := decode[chatResponse](t, rec.Body).Usage.PromptTokensDetails.CachedTokens, (first+99)/bs*bs; got != want {
			t.Fatalf("second turn found %d tokens cached, want %d (the first prompt's %d tokens and its answer's)", got, want, first)
		}
	})
}
