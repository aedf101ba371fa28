package vllm

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/workload"
)

// TestWorkloadSessionsAgainstTheServer plays a conversation of each API,
// and an agent loop with tools, through the simulated server, feeding each
// answer back as a client does: the server answers exactly
// workload.SimAnswer and counts exactly the tokens of the call's
// EngineText (so the fleet simulator, which has no server, builds the same
// histories and prefills the same prompts, tools included), and every
// later turn finds the earlier turns in the prefix cache.
func TestWorkloadSessionsAgainstTheServer(t *testing.T) {
	type play struct {
		api      workload.API
		sessions func() ([]workload.Session, error)
	}
	var plays []play
	for _, api := range []workload.API{workload.Chat, workload.Completions} {
		w := workload.DefaultMultiTurn(api)
		w.Conversations, w.Turns, w.OutputTokens = 1, 4, 8
		plays = append(plays, play{api, w.Sessions})
	}
	agent := workload.DefaultAgentic()
	agent.Loops, agent.Steps, agent.OutputTokens = 1, 3, 8
	plays = append(plays, play{workload.Chat, agent.Sessions})
	for _, pl := range plays {
		api := pl.api
		cfg := DefaultConfig()
		s, _ := start(t, cfg)
		ss, err := pl.sessions()
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
			req := httptest.NewRequest(http.MethodPost, api.Path(), bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			s.Handler().ServeHTTP(rec, req)
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
			if want := engine.CountTokens(c.EngineText()); resp.Usage.PromptTokens != want {
				t.Fatalf("%s turn %d: %d prompt tokens, want the %d of EngineText", api, k, resp.Usage.PromptTokens, want)
			}
			if c.Tools != "" && resp.Usage.PromptTokens < engine.CountTokens(c.Tools) {
				t.Fatalf("%s turn %d: %d prompt tokens, fewer than the tools' %d", api, k, resp.Usage.PromptTokens, engine.CountTokens(c.Tools))
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
