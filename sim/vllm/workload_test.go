package vllm

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prefixring/prefixring/sim/workload"
)

// TestWorkloadSessionsAgainstTheServer plays a conversation of each API
// through the simulated server, feeding each answer back as a client does:
// the server answers exactly workload.SimAnswer (so the fleet simulator,
// which has no server, builds the same histories), and every later turn
// finds the earlier turns in the prefix cache.
func TestWorkloadSessionsAgainstTheServer(t *testing.T) {
	for _, api := range []workload.API{workload.Chat, workload.Completions} {
		cfg := DefaultConfig()
		s, _ := start(t, cfg)
		w := workload.DefaultMultiTurn(api)
		w.Conversations, w.Turns, w.OutputTokens = 1, 4, 8
		ss, err := w.Sessions()
		if err != nil {
			t.Fatal(err)
		}
		var answers []string
		for k := range ss[0].Turns {
			c := ss[0].Call(k, answers)
			body, err := c.Body(cfg.Model, false)
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, api.Path(), bytes.NewReader(body)))
			checkStatus(t, rec, http.StatusOK)
			var resp struct {
				Choices []struct {
					Text    string                   `json:"text"`
					Message struct{ Content string } `json:"message"`
				} `json:"choices"`
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
					Details      struct {
						Cached int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
			answer := resp.Choices[0].Text + resp.Choices[0].Message.Content
			if answer != workload.SimAnswer(c.MaxTokens) {
				t.Fatalf("%s turn %d: answer %q, want workload.SimAnswer", api, k, answer)
			}
			if k > 0 && resp.Usage.Details.Cached < resp.Usage.PromptTokens/2 {
				t.Fatalf("%s turn %d: %d of %d prompt tokens cached", api, k, resp.Usage.Details.Cached, resp.Usage.PromptTokens)
			}
			answers = append(answers, answer)
		}
	}
}
