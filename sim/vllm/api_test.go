package vllm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestStreamingCompletionWithUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		body := `{"prompt":"` + strings.Repeat("x", 100) + `","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`
		do(s, http.MethodPost, "/v1/completions", body) // warm the cache
		rec := do(s, http.MethodPost, "/v1/completions", body)
		checkStatus(t, rec, http.StatusOK)
		// vLLM's StreamingResponse(media_type="text/event-stream") goes out
		// with the charset Starlette adds to text types.
		if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
			t.Fatalf("content type %q", ct)
		}
		ev := sseEvents(t, rec.Body.String())
		if ev[len(ev)-1] != "[DONE]" {
			t.Fatalf("last event %q, want [DONE]", ev[len(ev)-1])
		}
		var text strings.Builder
		for i, e := range ev[:len(ev)-2] {
			var c completionResponse
			if err := json.Unmarshal([]byte(e), &c); err != nil {
				t.Fatal(err)
			}
			text.WriteString(c.Choices[0].Text)
			last := i == len(ev)-3
			if (c.Choices[0].FinishReason != nil) != last || c.Object != "text_completion" {
				t.Fatalf("chunk %d: %s", i, e)
			}
		}
		if text.String() != " the and for are but" {
			t.Fatalf("text %q", text.String())
		}
		var u usageChunk
		if err := json.Unmarshal([]byte(ev[len(ev)-2]), &u); err != nil {
			t.Fatal(err)
		}
		// 25 prompt tokens: one full 16-token block is cached.
		if u.Usage.PromptTokens != 25 || u.Usage.CompletionTokens != 5 || u.Usage.PromptTokensDetails.CachedTokens != 16 || len(u.Choices) != 0 {
			t.Fatalf("usage chunk %s", ev[len(ev)-2])
		}
	})
}

func TestChatCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		body := `{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":3}`
		rec := do(s, http.MethodPost, "/v1/chat/completions", body)
		checkStatus(t, rec, http.StatusOK)
		resp := decode[chatResponse](t, rec.Body)
		if resp.Object != "chat.completion" || resp.Choices[0].Message.Content != " the and for" || *resp.Choices[0].FinishReason != "length" {
			t.Fatalf("%+v", resp)
		}
		rec = do(s, http.MethodPost, "/v1/chat/completions", strings.Replace(body, `"max_completion_tokens":3`, `"max_tokens":2,"stream":true`, 1))
		ev := sseEvents(t, rec.Body.String())
		if len(ev) != 4 || !strings.Contains(ev[0], `"delta":{"role":"assistant","content":""}`) || ev[3] != "[DONE]" {
			t.Fatalf("events %q", ev)
		}
	})
}

func TestBadRequestsGetVLLMErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		cases := []struct {
			path, body string
			status     int
			typ        string
		}{
			{"/v1/completions", `{"prompt":`, 400, "BadRequestError"},
			{"/v1/completions", `{"model":"gpt-4","prompt":"hi"}`, 404, "NotFoundError"},
			{"/v1/completions", `{"prompt":""}`, 400, "BadRequestError"},
			{"/v1/completions", `{}`, 400, "BadRequestError"},
			{"/v1/completions", `{"prompt":[1,2,999999]}`, 400, "BadRequestError"},
			{"/v1/completions", `{"prompt":["a","b"]}`, 400, "BadRequestError"},
			{"/v1/completions", `{"prompt":"hi","max_tokens":0}`, 400, "BadRequestError"},
			{"/v1/completions", `{"prompt":"hi","max_tokens":131072}`, 400, "BadRequestError"},
			{"/v1/completions", `{"prompt":"hi","stream_options":{"include_usage":true}}`, 400, "BadRequestError"},
			{"/v1/chat/completions", `{"messages":[]}`, 400, "BadRequestError"},
			{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "BadRequestError"},
			{"/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400, "BadRequestError"},
			{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":{"type":"function"}}`, 400, "BadRequestError"},
			{"/v1/nope", `{}`, 404, "NotFoundError"},
		}
		for _, c := range cases {
			rec := do(s, http.MethodPost, c.path, c.body)
			checkStatus(t, rec, c.status)
			e := decode[errorBody](t, rec.Body)
			if e.Error.Type != c.typ || e.Error.Code != c.status || e.Error.Message == "" {
				t.Errorf("%s %s: %+v", c.path, c.body, e)
			}
		}
		// Token-id prompts are taken as they are.
		rec := do(s, http.MethodPost, "/v1/completions", `{"prompt":[1,2,3],"max_tokens":1}`)
		checkStatus(t, rec, http.StatusOK)
		if u := decode[completionResponse](t, rec.Body).Usage; u.PromptTokens != 3 {
			t.Fatalf("usage %+v", u)
		}
	})
}

// TestMissingOrNullModelIsTheServedModel: vLLM's request models declare
// model Optional[str] = None, and a missing, null or empty model passes
// its model check (OpenAIServing._is_model_supported: "if not
// model_name: return True") and is served by the first served model,
// whose name the response carries. A model that is not a string fails
// pydantic's validation: 400.
func TestMissingOrNullModelIsTheServedModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		for _, model := range []string{``, `"model":null,`, `"model":"",`} {
			rec := do(s, http.MethodPost, "/v1/completions", `{`+model+`"prompt":"hi","max_tokens":1}`)
			checkStatus(t, rec, http.StatusOK)
			if got := decode[completionResponse](t, rec.Body).Model; got != s.cfg.Model {
				t.Errorf("completion with %q served by model %q, want %q", model, got, s.cfg.Model)
			}
			rec = do(s, http.MethodPost, "/v1/chat/completions", `{`+model+`"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`)
			checkStatus(t, rec, http.StatusOK)
			if got := decode[chatResponse](t, rec.Body).Model; got != s.cfg.Model {
				t.Errorf("chat with %q served by model %q, want %q", model, got, s.cfg.Model)
			}
		}
		for _, model := range []string{`7`, `{}`, `["m"]`, `true`} {
			rec := do(s, http.MethodPost, "/v1/completions", `{"model":`+model+`,"prompt":"hi","max_tokens":1}`)
			checkStatus(t, rec, http.StatusBadRequest)
			if e := decode[errorBody](t, rec.Body); e.Error.Type != "BadRequestError" {
				t.Errorf("model %s: %+v", model, e)
			}
		}
	})
}

// TestChatToolsArePrompt: a chat's tools are prefilled with its messages,
// as a real template renders them; their layout in the body does not
// change the prompt, and null or an empty list are no tools.
func TestChatToolsArePrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		prompt := func(tools string) int {
			t.Helper()
			body := `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":1` + tools + `}`
			rec := do(s, http.MethodPost, "/v1/chat/completions", body)
			checkStatus(t, rec, http.StatusOK)
			return decode[chatResponse](t, rec.Body).Usage.PromptTokens
		}
		tools := `[{"type":"function","function":{"name":"lookup","description":"` + strings.Repeat("word ", 200) + `"}}]`
		none := prompt("")
		with := prompt(`,"tools":` + tools)
		if with < none+len(tools)/4 {
			t.Fatalf("%d prompt tokens with %d bytes of tools, %d without", with, len(tools), none)
		}
		spaced := strings.ReplaceAll(strings.ReplaceAll(tools, `":`, `": `), `,"`, `, "`)
		if got := prompt(`,"tools": ` + spaced); got != with {
			t.Fatalf("spaced tools: %d prompt tokens, compact %d", got, with)
		}
		for _, empty := range []string{`,"tools":null`, `,"tools":[]`} {
			if got := prompt(empty); got != none {
				t.Fatalf("%s: %d prompt tokens, want %d", empty, got, none)
			}
		}
	})
}

func TestModelsAndHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		checkStatus(t, do(s, http.MethodGet, "/health", ""), http.StatusOK)
		rec := do(s, http.MethodGet, "/v1/models", "")
		m := decode[modelList](t, rec.Body)
		if len(m.Data) != 1 || m.Data[0].ID != s.cfg.Model || m.Data[0].MaxModelLen != 131072 {
			t.Fatalf("%+v", m)
		}
	})
}

func TestFaultKnobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		rec := do(s, http.MethodPut, "/admin/faults", `{"error_rate":1}`)
		checkStatus(t, rec, http.StatusOK)
		rec = do(s, http.MethodPost, "/v1/completions", `{"prompt":"hi"}`)
		checkStatus(t, rec, http.StatusInternalServerError)
		if e := decode[errorBody](t, rec.Body); e.Error.Type != "InternalServerError" {
			t.Fatalf("%+v", e)
		}
		checkStatus(t, do(s, http.MethodPut, "/admin/faults", `{"error_rate":2}`), http.StatusBadRequest)
		checkStatus(t, do(s, http.MethodPut, "/admin/faults", `{"latency":"fast"}`), http.StatusBadRequest)

		// Added latency shifts the response by exactly that much.
		checkStatus(t, do(s, http.MethodPut, "/admin/faults", `{"latency":"250ms"}`), http.StatusOK)
		if got := decode[faultsWire](t, do(s, http.MethodGet, "/admin/faults", "").Body); got.Latency != "250ms" || got.ErrorRate != 0 {
			t.Fatalf("faults %+v", got)
		}
		t0 := time.Now()
		checkStatus(t, do(s, http.MethodPost, "/v1/completions", `{"prompt":"hi","max_tokens":1}`), http.StatusOK)
		// 250 ms, then a one-token prefill step of ~7.2 ms.
		if d := time.Since(t0); d < 257*time.Millisecond || d > 258*time.Millisecond {
			t.Fatalf("latency %v", d)
		}

		// A hung request answers nothing until its client leaves.
		if err := s.SetFaults(Faults{HangRate: 1}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/completions", strings.NewReader(`{"prompt":"hi"}`))
		req.Header.Set("Content-Type", "application/json")
		rec = httptest.NewRecorder()
		t0 = time.Now()
		s.Handler().ServeHTTP(rec, req)
		if d := time.Since(t0); d != time.Minute || rec.Body.Len() != 0 {
			t.Fatalf("hang returned after %v with %q", d, rec.Body)
		}
	})
}

// TestUnsetMaxTokensFitsContext: vLLM lets a request without max_tokens use
// the rest of the context (get_max_tokens: max_model_len - prompt length),
// so any prompt shorter than the context is served. The simulator, which
// has no end of sequence, still caps such output at DefaultMaxTokens.
func TestUnsetMaxTokensFitsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Engine.MaxModelLen = 256
		s, _ := start(t, cfg)
		ids := strings.TrimSuffix(strings.Repeat("7,", 200), ",")
		rec := do(s, http.MethodPost, "/v1/completions", `{"prompt":[`+ids+`]}`)
		checkStatus(t, rec, http.StatusOK)
		if u := decode[completionResponse](t, rec.Body).Usage; u.PromptTokens != 200 || u.CompletionTokens != 56 {
			t.Fatalf("usage %+v, want 200 prompt and 56 (256-200) completion tokens", u)
		}
		// A short prompt still gets the simulator's default output length.
		rec = do(s, http.MethodPost, "/v1/completions", `{"prompt":[1,2,3]}`)
		checkStatus(t, rec, http.StatusOK)
		if u := decode[completionResponse](t, rec.Body).Usage; u.CompletionTokens != cfg.DefaultMaxTokens {
			t.Fatalf("usage %+v, want %d completion tokens", u, cfg.DefaultMaxTokens)
		}
	})
}

// TestContextLengthErrors: vLLM's own wording and param (>= 0.10.2,
// serving_engine._validate_input), which clients parse to shrink
// max_tokens or the prompt and retry.
func TestContextLengthErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Engine.MaxModelLen = 256
		s, _ := start(t, cfg)
		ids := func(n int) string { return strings.TrimSuffix(strings.Repeat("7,", n), ",") }
		for _, c := range []struct{ body, msg, param string }{
			{`{"prompt":[1,2,3],"max_tokens":254}`,
				"'max_tokens' or 'max_completion_tokens' is too large: 254. This model's maximum context length is 256 tokens and your request has 3 input tokens (254 > 256 - 3).",
				"max_tokens"},
			{`{"prompt":[` + ids(256) + `]}`,
				"This model's maximum context length is 256 tokens. However, your request has 256 input tokens. Please reduce the length of the input messages.",
				"input_tokens"},
			// The prompt is checked first, as in vLLM.
			{`{"prompt":[` + ids(300) + `],"max_tokens":1}`,
				"This model's maximum context length is 256 tokens. However, your request has 300 input tokens. Please reduce the length of the input messages.",
				"input_tokens"},
		} {
			rec := do(s, http.MethodPost, "/v1/completions", c.body)
			checkStatus(t, rec, http.StatusBadRequest)
			e := decode[errorBody](t, rec.Body).Error
			if e.Message != c.msg || e.Param == nil || *e.Param != c.param {
				t.Errorf("%.40s: message %q, param %v; want %q, %q", c.body, e.Message, e.Param, c.msg, c.param)
			}
		}
		// The boundary: 3 + 253 = 256 fits.
		checkStatus(t, do(s, http.MethodPost, "/v1/completions", `{"prompt":[1,2,3],"max_tokens":253}`), http.StatusOK)
	})
}

// TestResponseIDFromRequestIDHeader: vLLM names a response "cmpl-" or
// "chatcmpl-" + the client's X-Request-Id (OpenAIServing._base_request_id),
// so a client can match the id in the body with the one it sent; without
// the header the id is the one the server generates for X-Request-Id.
func TestResponseIDFromRequestIDHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := start(t, DefaultConfig())
		h := map[string]string{"X-Request-Id": "abc123"}
		rec := doH(s, http.MethodPost, "/v1/completions", `{"prompt":"hi","max_tokens":1}`, h)
		checkStatus(t, rec, http.StatusOK)
		if id := decode[completionResponse](t, rec.Body).ID; id != "cmpl-abc123" {
			t.Errorf("completion id %q, want cmpl-abc123", id)
		}
		rec = doH(s, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true}`, h)
		checkStatus(t, rec, http.StatusOK)
		ev := sseEvents(t, rec.Body.String())
		for _, e := range ev[:len(ev)-1] {
			if c := decode[chatResponse](t, strings.NewReader(e)); c.ID != "chatcmpl-abc123" {
				t.Errorf("chat chunk id %q, want chatcmpl-abc123", c.ID)
			}
		}
		rec = do(s, http.MethodPost, "/v1/completions", `{"prompt":"hi","max_tokens":1}`)
		if id, h := decode[completionResponse](t, rec.Body).ID, rec.Header().Get("X-Request-Id"); h == "" || id != "cmpl-"+h {
			t.Errorf("completion id without the header %q, want cmpl- and the generated X-Request-Id %q", id, h)
		}
	})
}

// TestBodyMustBeDeclaredJSON: vLLM's generation routes depend on
// validate_json_request, which refuses a body whose Content-Type is not
// application/json (missing included) with a FastAPI validation error
// before reading it; parameters after a ';' are fine, case is ignored.
func TestBodyMustBeDeclaredJSON(t *testing.T) {
	s, _ := start(t, DefaultConfig())
	url := serve(t, s)
	post := func(path, ct string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(`{"prompt":"hi","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`))
		if err != nil {
			t.Fatal(err)
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const refusal = `{"error":{"message":"1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed","type":"Bad Request","param":null,"code":400}}`
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/jsonl"} {
			if code, body := post(path, ct); code != http.StatusBadRequest || strings.TrimSpace(body) != refusal {
				t.Errorf("%s with Content-Type %q: %d %s", path, ct, code, body)
			}
		}
		for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON"} {
			if code, body := post(path, ct); code != http.StatusOK {
				t.Errorf("%s with Content-Type %q: %d %s", path, ct, code, body)
			}
		}
	}
}

// TestRequestIDGenerated: like vLLM with --enable-request-id-headers, every
// response carries an X-Request-Id: the client's, else a fresh one shaped
// as vLLM's (uuid4().hex), here drawn from the server's seed. A
// generation names its response by it.
func TestRequestIDGenerated(t *testing.T) {
	uuid4hex := regexp.MustCompile(`^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$`)
	first := func() string {
		s, _ := start(t, DefaultConfig())
		url := serve(t, s)
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":1}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		id := resp.Header.Get("X-Request-Id")
		if !uuid4hex.MatchString(id) {
			t.Fatalf("X-Request-Id %q is not a uuid4 hex", id)
		}
		if got := decode[completionResponse](t, resp.Body).ID; got != "cmpl-"+id {
			t.Fatalf("response id %q, want cmpl-%s", got, id)
		}
		seen := map[string]bool{id: true}
		for _, path := range []string{"/health", "/v1/models", "/v1/nope"} {
			resp, err := http.Get(url + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			other := resp.Header.Get("X-Request-Id")
			if !uuid4hex.MatchString(other) || seen[other] {
				t.Fatalf("%s: X-Request-Id %q (seen %v)", path, other, seen)
			}
			seen[other] = true
		}
		return id
	}
	if a, b := first(), first(); a != b {
		t.Fatalf("two servers with one seed drew %s and %s", a, b)
	}
}
