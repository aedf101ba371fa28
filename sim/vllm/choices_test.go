package vllm

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// wantError checks a 400 with vLLM's message and param (nil: none).
func wantError(t *testing.T, s *Server, path, body, msg string, param any) {
	t.Helper()
	rec := do(s, http.MethodPost, path, body)
	checkStatus(t, rec, http.StatusBadRequest)
	e := decode[errorBody](t, rec.Body).Error
	var got any
	if e.Param != nil {
		got = *e.Param
	}
	if e.Message != msg || got != param || e.Type != "BadRequestError" {
		t.Errorf("%s: %+v, want message %q and param %v", body, e, msg, param)
	}
}

// streamed reassembles a completion stream's text per choice index and
// counts the chunks that finish each choice.
func streamed(t *testing.T, body string) (text map[int]string, finished map[int]int, usage *usage) {
	t.Helper()
	text, finished = map[int]string{}, map[int]int{}
	ev := sseEvents(t, body)
	if ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("last event %q", ev[len(ev)-1])
	}
	for _, e := range ev[:len(ev)-1] {
		var c completionResponse
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil {
			usage = c.Usage
		}
		for _, ch := range c.Choices {
			text[ch.Index] += ch.Text
			if ch.FinishReason != nil {
				finished[ch.Index]++
			}
		}
		if len(c.Choices) > 1 {
			t.Fatalf("a chunk carries %d choices; vLLM sends one per chunk: %s", len(c.Choices), e)
		}
	}
	return text, finished, usage
}

// TestCompletionEcho: echo puts the prompt's text before the completion,
// streamed in the first chunk; with max_tokens 0 only the prompt comes
// back, and usage counts the one token vLLM still generates. A chat's
// echo repeats a trailing assistant message.
func TestCompletionEcho(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		rec := do(s, http.MethodPost, "/v1/completions", `{"prompt":"hello world","max_tokens":3,"echo":true}`)
		checkStatus(t, rec, http.StatusOK)
		resp := decode[completionResponse](t, rec.Body)
		if got := resp.Choices[0].Text; got != "hello world the and for" || resp.Usage.PromptTokens != 3 || resp.Usage.CompletionTokens != 3 {
			t.Fatalf("echo: text %q, usage %+v", got, resp.Usage)
		}

		rec = do(s, http.MethodPost, "/v1/completions", `{"prompt":"hello world","max_tokens":3,"echo":true,"stream":true}`)
		ev := sseEvents(t, rec.Body.String())
		if !strings.Contains(ev[0], `"text":"hello world the`) {
			t.Fatalf("first chunk %s does not start with the prompt", ev[0])
		}
		if text, _, _ := streamed(t, rec.Body.String()); text[0] != "hello world the and for" {
			t.Fatalf("streamed echo %q", text[0])
		}

		rec = do(s, http.MethodPost, "/v1/completions", `{"prompt":"hello world","max_tokens":0,"echo":true}`)
		checkStatus(t, rec, http.StatusOK)
		resp = decode[completionResponse](t, rec.Body)
		if c := resp.Choices[0]; c.Text != "hello world" || *c.FinishReason != "length" || resp.Usage.CompletionTokens != 1 {
			t.Fatalf("echo, max_tokens 0: %+v usage %+v", c, resp.Usage)
		}

		// Token ids, which the stand-in tokenizer cannot decode, echo as
		// vLLM's placeholders.
		rec = do(s, http.MethodPost, "/v1/completions", `{"prompt":[1,2],"max_tokens":1,"echo":true}`)
		checkStatus(t, rec, http.StatusOK)
		if got := decode[completionResponse](t, rec.Body).Choices[0].Text; got != "token_id:1token_id:2 the" {
			t.Fatalf("echo of token ids: %q", got)
		}

		chat := func(last string) string {
			rec := do(s, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"},`+last+`],"max_tokens":2,"echo":true}`)
			checkStatus(t, rec, http.StatusOK)
			return decode[chatResponse](t, rec.Body).Choices[0].Message.Content
		}
		if got := chat(`{"role":"assistant","content":"Sure:"}`); got != "Sure: the and" {
			t.Fatalf("chat echo of an assistant message: %q", got)
		}
		if got := chat(`{"role":"user","content":"well?"}`); got != " the and" {
			t.Fatalf("chat echo of a user message: %q, want none", got)
		}
	})
}

// TestCompletionLogprobs: logprobs come back in vLLM's completion shape,
// the sampled token first with max(logprobs, 1) entries in each
// top_logprobs; with echo the prompt's tokens lead, the first without a
// logprob. The values are simulated and fixed.
func TestCompletionLogprobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		rec := do(s, http.MethodPost, "/v1/completions", `{"prompt":"hi","max_tokens":3,"logprobs":2}`)
		checkStatus(t, rec, http.StatusOK)
		got := decode[struct {
			Choices []struct {
				Logprobs *completionLogprobs `json:"logprobs"`
			} `json:"choices"`
		}](t, rec.Body).Choices[0].Logprobs
		want := &completionLogprobs{
			TextOffset:    []int{0, 4, 8},
			TokenLogprobs: []*float64{ptr(-0.25), ptr(-0.5), ptr(-0.375)},
			Tokens:        []string{" the", " and", " for"},
			TopLogprobs: []map[string]float64{
				{" the": -0.25, " and": -2.25},
				{" and": -0.5, " for": -2.5},
				{" for": -0.375, " are": -2.375},
			},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("logprobs\n%s\nwant\n%s", js(got), js(want))
		}

		rec = do(s, http.MethodPost, "/v1/completions", `{"prompt":"abcdefgh","max_tokens":1,"logprobs":0,"echo":true}`)
		checkStatus(t, rec, http.StatusOK)
		got = decode[struct {
			Choices []struct {
				Logprobs *completionLogprobs `json:"logprobs"`
			} `json:"choices"`
		}](t, rec.Body).Choices[0].Logprobs
		want = &completionLogprobs{
			TextOffset:    []int{0, 4, 8},
			TokenLogprobs: []*float64{nil, ptr(-0.5), ptr(-0.25)},
			Tokens:        []string{"abcd", "efgh", " the"},
			TopLogprobs:   []map[string]float64{nil, {"efgh": -0.5}, {" the": -0.25}},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("echo logprobs\n%s\nwant\n%s", js(got), js(want))
		}

		// Streamed, each chunk scores its own tokens, offsets running on.
		rec = do(s, http.MethodPost, "/v1/completions", `{"prompt":"hi","max_tokens":3,"logprobs":1,"stream":true}`)
		var tokens []string
		var offsets []int
		for _, e := range sseEvents(t, rec.Body.String()) {
			if e == "[DONE]" {
				break
			}
			c := decode[struct {
				Choices []struct {
					Logprobs *completionLogprobs `json:"logprobs"`
				} `json:"choices"`
			}](t, strings.NewReader(e))
			tokens = append(tokens, c.Choices[0].Logprobs.Tokens...)
			offsets = append(offsets, c.Choices[0].Logprobs.TextOffset...)
		}
		if !reflect.DeepEqual(tokens, []string{" the", " and", " for"}) || !reflect.DeepEqual(offsets, []int{0, 4, 8}) {
			t.Fatalf("streamed tokens %q offsets %v", tokens, offsets)
		}

		// logprobs is an int to vLLM's pydantic model, which reads a JSON
		// boolean as 1 or 0.
		for _, b := range []string{"true", "false"} {
			rec = do(s, http.MethodPost, "/v1/completions", `{"prompt":"hi","max_tokens":1,"logprobs":`+b+`}`)
			checkStatus(t, rec, http.StatusOK)
			got = decode[struct {
				Choices []struct {
					Logprobs *completionLogprobs `json:"logprobs"`
				} `json:"choices"`
			}](t, rec.Body).Choices[0].Logprobs
			if got == nil || !reflect.DeepEqual(got.TopLogprobs, []map[string]float64{{" the": -0.25}}) {
				t.Fatalf("logprobs %s: %s", b, js(got))
			}
		}

		// vLLM's checks (protocol.py check_logprobs, where a completion's
		// logprobs is never negative, -1 included; sampling_params
		// _validate_logprobs with --max-logprobs 20).
		wantError(t, s, "/v1/completions", `{"prompt":"hi","logprobs":21}`, "Requested sample logprobs of 21, which is greater than max allowed: 20", "logprobs")
		wantError(t, s, "/v1/completions", `{"prompt":"hi","logprobs":-1}`, "`logprobs` must be a positive value.", "logprobs")
		wantError(t, s, "/v1/completions", `{"prompt":"hi","logprobs":-2}`, "`logprobs` must be a positive value.", "logprobs")
		wantError(t, s, "/v1/completions", `{"prompt":"hi","logprobs":"2"}`, "`logprobs` must be an integer.", "logprobs")
	})
}

// TestChatWithoutGenerationPrompt: add_generation_prompt false renders
// the conversation without the assistant's opening header, so the prompt
// is shorter, and the reply continues the last message's turn: vLLM's
// get_chat_request_role names it by that message's role, and echo repeats
// that message whatever its role. Streamed, the opening delta carries
// the same role.
func TestChatWithoutGenerationPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		chat := func(extra string) chatResponse {
			rec := do(s, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Tell me"}],"max_tokens":2`+extra+`}`)
			checkStatus(t, rec, http.StatusOK)
			return decode[chatResponse](t, rec.Body)
		}
		with, without := chat(""), chat(`,"add_generation_prompt":false`)
		header := len(engine.Tokenize(engine.RenderChat([]engine.Message{{Role: "user", Content: "Tell me"}}, "")))
		bare := len(engine.Tokenize(strings.TrimSuffix(engine.RenderChat([]engine.Message{{Role: "user", Content: "Tell me"}}, ""), engine.GenerationPrompt)))
		if with.Usage.PromptTokens != header || without.Usage.PromptTokens != bare || bare >= header {
			t.Fatalf("prompt tokens %d with the generation prompt, %d without; want %d and %d",
				with.Usage.PromptTokens, without.Usage.PromptTokens, header, bare)
		}
		if m := with.Choices[0].Message; m.Role != "assistant" || m.Content != " the and" {
			t.Fatalf("with the generation prompt: %+v", m)
		}
		if m := without.Choices[0].Message; m.Role != "user" || m.Content != " the and" {
			t.Fatalf("without the generation prompt: %+v", m)
		}
		if m := chat(`,"add_generation_prompt":false,"echo":true`).Choices[0].Message; m.Content != "Tell me the and" {
			t.Fatalf("echo without the generation prompt: %q", m.Content)
		}
		rec := do(s, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Tell me"}],"max_tokens":2,"add_generation_prompt":false,"stream":true}`)
		first := decode[chatResponse](t, strings.NewReader(sseEvents(t, rec.Body.String())[0]))
		if d := first.Choices[0].Delta; d == nil || d.Role != "user" {
			t.Fatalf("streamed opening %+v, want role user", first.Choices[0])
		}
	})
}

// TestPromptLogprobsRefused: the simulator does not score prompts on their
// own, so prompt_logprobs is never silently dropped: values vLLM refuses
// get vLLM's errors (protocol.py check_logprobs, then _validate_logprobs
// with --max-logprobs 20, -1 being the vocabulary), and values it would
// serve get a 400 naming the simulator. null is as absent.
func TestPromptLogprobsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		msgs := `"messages":[{"role":"user","content":"hi"}]`
		for _, c := range []struct{ path, body string }{
			{"/v1/completions", `"prompt":"hi"`},
			{"/v1/chat/completions", msgs},
		} {
			wantError(t, s, c.path, `{`+c.body+`,"prompt_logprobs":"1"}`, "`prompt_logprobs` must be an integer.", "prompt_logprobs")
			wantError(t, s, c.path, `{`+c.body+`,"prompt_logprobs":1,"stream":true}`, "`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
			wantError(t, s, c.path, `{`+c.body+`,"prompt_logprobs":-1,"stream":true}`, "`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
			wantError(t, s, c.path, `{`+c.body+`,"prompt_logprobs":-2}`, "`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs")
			wantError(t, s, c.path, `{`+c.body+`,"prompt_logprobs":21}`, "Requested prompt logprobs of 21, which is greater than max allowed: 20", "prompt_logprobs")
			wantError(t, s, c.path, `{`+c.body+`,"prompt_logprobs":-1}`, "Requested prompt logprobs of 128256, which is greater than max allowed: 20", "prompt_logprobs")
			for _, v := range []string{"0", "5", "true"} {
				wantError(t, s, c.path, `{`+c.body+`,"prompt_logprobs":`+v+`}`, "prompt_logprobs is not supported by the simulator", "prompt_logprobs")
			}
			checkStatus(t, do(s, http.MethodPost, c.path, `{`+c.body+`,"max_tokens":1,"prompt_logprobs":null}`), http.StatusOK)
		}
	})
}

// TestChatLogprobs: logprobs: true with top_logprobs comes back in vLLM's
// chat shape (content entries with bytes and exactly top_logprobs
// alternatives), streamed chunk by chunk.
func TestChatLogprobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		msgs := `"messages":[{"role":"user","content":"hi"}],"max_tokens":2`
		rec := do(s, http.MethodPost, "/v1/chat/completions", `{`+msgs+`,"logprobs":true,"top_logprobs":2}`)
		checkStatus(t, rec, http.StatusOK)
		got := decode[struct {
			Choices []struct {
				Logprobs *chatLogprobs `json:"logprobs"`
			} `json:"choices"`
		}](t, rec.Body).Choices[0].Logprobs
		the, and, forr := []int{32, 116, 104, 101}, []int{32, 97, 110, 100}, []int{32, 102, 111, 114}
		want := &chatLogprobs{Content: []chatTokenLogprob{
			{Token: " the", Logprob: -0.25, Bytes: the, TopLogprobs: []chatTopLogprob{{" the", -0.25, the}, {" and", -2.25, and}}},
			{Token: " and", Logprob: -0.5, Bytes: and, TopLogprobs: []chatTopLogprob{{" and", -0.5, and}, {" for", -2.5, forr}}},
		}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("logprobs\n%s\nwant\n%s", js(got), js(want))
		}

		// top_logprobs defaults to 0: no alternatives, an empty list.
		rec = do(s, http.MethodPost, "/v1/chat/completions", `{`+msgs+`,"logprobs":true,"stream":true}`)
		var n int
		for _, e := range sseEvents(t, rec.Body.String()) {
			if !strings.Contains(e, `"logprobs":{`) {
				continue
			}
			for _, c := range decode[chatResponse](t, strings.NewReader(e)).Choices {
				lp := c.Logprobs.(map[string]any)["content"].([]any)
				for _, entry := range lp {
					if tl := entry.(map[string]any)["top_logprobs"].([]any); len(tl) != 0 {
						t.Fatalf("top_logprobs %v, want []", tl)
					}
					n++
				}
			}
		}
		if n != 2 {
			t.Fatalf("%d scored tokens streamed, want 2", n)
		}

		wantError(t, s, "/v1/chat/completions", `{`+msgs+`,"top_logprobs":3}`, "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
		wantError(t, s, "/v1/chat/completions", `{`+msgs+`,"logprobs":true,"top_logprobs":-2}`, "`top_logprobs` must be a positive value or -1.", "top_logprobs")
		wantError(t, s, "/v1/chat/completions", `{`+msgs+`,"logprobs":true,"top_logprobs":21}`, "Requested sample logprobs of 21, which is greater than max allowed: 20", "logprobs")
		// logprobs without top_logprobs, and top_logprobs 0, are fine.
		checkStatus(t, do(s, http.MethodPost, "/v1/chat/completions", `{`+msgs+`,"top_logprobs":0}`), http.StatusOK)
	})
}

// TestNChoices: n > 1 runs n engine requests, as vLLM v1 fans one out into
// n child requests: n choices indexed 0..n-1, each its own generation
// (the engine counts n × max_tokens generated tokens), the later ones
// finding the first one's prompt blocks in the prefix cache. Usage counts
// the prompt once and every choice's tokens.
func TestNChoices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := start(t, DefaultConfig())
		prompt := strings.Repeat("abcd", 64) // 64 tokens, 4 blocks
		rec := do(s, http.MethodPost, "/v1/completions", `{"prompt":"`+prompt+`","max_tokens":4,"n":3}`)
		checkStatus(t, rec, http.StatusOK)
		resp := decode[completionResponse](t, rec.Body)
		if len(resp.Choices) != 3 {
			t.Fatalf("%d choices, want 3", len(resp.Choices))
		}
		for i, c := range resp.Choices {
			if c.Index != i || c.Text != " the and for are" || *c.FinishReason != "length" {
				t.Errorf("choice %d: %+v", i, c)
			}
		}
		// The last of three finds 3 of the 4 blocks (the last block is
		// always recomputed); vLLM reports the last finisher's count.
		if u := resp.Usage; u.PromptTokens != 64 || u.CompletionTokens != 12 || u.TotalTokens != 76 || u.PromptTokensDetails.CachedTokens != 48 {
			t.Fatalf("usage %+v %+v", u, u.PromptTokensDetails)
		}
		const want = `
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 96
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "vllm:generation_tokens_total", "vllm:prefix_cache_hits_total"); err != nil {
			t.Fatal(err)
		}

		rec = do(s, http.MethodPost, "/v1/completions", `{"prompt":"hi","max_tokens":4,"n":2,"stream":true,"stream_options":{"include_usage":true}}`)
		checkStatus(t, rec, http.StatusOK)
		text, finished, u := streamed(t, rec.Body.String())
		if len(text) != 2 || text[0] != " the and for are" || text[1] != " the and for are" || finished[0] != 1 || finished[1] != 1 {
			t.Fatalf("streamed choices %v, finished %v", text, finished)
		}
		if u == nil || u.PromptTokens != 1 || u.CompletionTokens != 8 {
			t.Fatalf("usage %+v", u)
		}

		// A chat stream opens every choice with its role.
		rec = do(s, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"n":2,"stream":true}`)
		ev := sseEvents(t, rec.Body.String())
		for i := range 2 {
			c := decode[chatResponse](t, strings.NewReader(ev[i]))
			if c.Choices[0].Index != i || c.Choices[0].Delta.Role != "assistant" {
				t.Fatalf("event %d: %s", i, ev[i])
			}
		}
		if len(ev) != 5 { // two roles, two tokens, [DONE]
			t.Fatalf("events %q", ev)
		}

		// vLLM's checks (sampling_params._verify_args, VLLM_MAX_N_SEQUENCES
		// 16384, and greedy sampling draws one sequence).
		wantError(t, s, "/v1/completions", `{"prompt":"hi","n":0}`, "n must be at least 1, got 0.", nil)
		wantError(t, s, "/v1/completions", `{"prompt":"hi","n":16385}`, "n must be at most 16384, got 16385. To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable.", nil)
		wantError(t, s, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":2,"temperature":0}`, "n must be 1 when using greedy sampling, got 2.", nil)
	})
}

// TestEchoLogprobsSkipsPrefixCache: prompt logprobs (echo with logprobs)
// must be computed, so vLLM skips the prefix cache for such a request
// (skip_reading_prefix_cache): a warm prompt reports no cached tokens.
func TestEchoLogprobsSkipsPrefixCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		prompt := strings.Repeat("abcd", 64)
		cached := func(extra string) int {
			t.Helper()
			rec := do(s, http.MethodPost, "/v1/completions", `{"prompt":"`+prompt+`","max_tokens":1`+extra+`}`)
			checkStatus(t, rec, http.StatusOK)
			return decode[completionResponse](t, rec.Body).Usage.PromptTokensDetails.CachedTokens
		}
		cached("")
		if got := cached(`,"echo":true,"logprobs":1`); got != 0 {
			t.Fatalf("echo with logprobs: %d cached tokens, want 0", got)
		}
		if got := cached(`,"echo":true`); got != 48 {
			t.Fatalf("echo alone: %d cached tokens, want 48", got)
		}
	})
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
