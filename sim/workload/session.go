package workload

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/prefixring/prefixring/sim/engine"
)

// API is the OpenAI route a session's requests go to.
type API uint8

const (
	// Chat is /v1/chat/completions: a system message, then alternating user
	// and assistant messages.
	Chat API = iota
	// Completions is /v1/completions: one prompt string that grows turn by
	// turn.
	Completions
)

// Path returns the route's path.
func (a API) Path() string {
	if a == Completions {
		return "/v1/completions"
	}
	return "/v1/chat/completions"
}

func (a API) String() string {
	if a == Completions {
		return "completions"
	}
	return "chat"
}

// Session is one client's run of requests: a single request, a
// conversation or an agent's tool loop. Its first turn arrives at Start
// (open loop); each later turn is sent Think after the answer to the
// previous one has arrived (closed loop), and carries the whole history, the
// previous answers included, as a real client does. A driver (the fleet
// simulator in virtual time, `prefixring load` in real time) plays it.
type Session struct {
	// ID is the session's index in its workload.
	ID int
	// Start is the arrival time of the first turn, from the workload's start.
	Start time.Duration
	// API is the route every turn goes to.
	API API
	// System is the preamble every turn starts with: a chat system message,
	// or the head of a completions prompt. It may be empty.
	System string
	// Tools is a JSON array of tool definitions sent with every chat turn
	// (agentic sessions), or empty.
	Tools string
	// Turns are the session's requests in order.
	Turns []Turn
	// Group is the shared-prompt group the session belongs to (its System
	// or Tools), or -1.
	Group int
	// Trace marks a session replayed from a trace: its single turn's prompt
	// is Blocks, not text.
	Trace bool
	// Stream marks a session whose requests are streamed: the router
	// settles a request's prefill weight at its first byte, which for a
	// request not streamed comes with the whole answer.
	Stream bool
	// TokenScale is the router's token estimate (body bytes / 4) over the
	// engine's tokens for this session's text (0: 1, the stand-in
	// tokenizer's four bytes a token): a real tokenizer counts code, JSON
	// and other scripts differently from English prose. The fleet
	// simulator tokenizes the session's text at 4·TokenScale bytes a
	// token. Trace sessions ignore it (their lengths are the trace's).
	TokenScale float64
}

// Turn is one request of a session.
type Turn struct {
	// User is the text this turn adds: a user message (chat), or text
	// appended to the prompt (completions).
	User string
	// Role of the added message in chat: "user" (default) or "tool" (the
	// result of the previous turn's tool call, in agentic sessions).
	Role string
	// Think is the pause between the previous turn's answer and this turn.
	Think time.Duration
	// MaxTokens is the output length asked for.
	MaxTokens int
	// Blocks are, for a trace turn, the prompt's 512-token blocks (Mooncake
	// hash_ids) and InputLen its length in tokens; the text is rendered
	// from them by [BlockText].
	Blocks   []uint64
	InputLen int
}

// Call is one rendered request: what a client sends for turn Turn of
// session Session, given the answers to the earlier turns.
type Call struct {
	Session, Turn int
	API           API
	// Messages (chat) or Prompt (completions) carry the whole history.
	Messages  []engine.Message
	Tools     string
	Prompt    string
	MaxTokens int
}

// Call renders turn k of s. answers[i] is the text the server answered to
// turn i < k; a driver without a server (the fleet simulator) passes what
// the simulated engine would have answered (see [SimAnswer]).
func (s *Session) Call(k int, answers []string) Call {
	c := Call{Session: s.ID, Turn: k, API: s.API, Tools: s.Tools, MaxTokens: s.Turns[k].MaxTokens}
	if s.Trace {
		c.Prompt = BlockText(s.Turns[k].Blocks, s.Turns[k].InputLen)
		return c
	}
	if s.API == Completions {
		var b strings.Builder
		b.WriteString(s.System)
		for i := 0; i <= k; i++ {
			b.WriteString("\n\nUser: ")
			b.WriteString(s.Turns[i].User)
			b.WriteString("\n\nAssistant:")
			if i < k {
				b.WriteString(answers[i]) // generated text goes on right after the cue
			}
		}
		c.Prompt = b.String()
		return c
	}
	if s.System != "" {
		c.Messages = append(c.Messages, engine.Message{Role: "system", Content: s.System})
	}
	for i := 0; i <= k; i++ {
		role := s.Turns[i].Role
		if role == "" {
			role = "user"
		}
		c.Messages = append(c.Messages, engine.Message{Role: role, Content: s.Turns[i].User})
		if i < k {
			c.Messages = append(c.Messages, engine.Message{Role: "assistant", Content: answers[i]})
		}
	}
	return c
}

// SimAnswer is what the simulated engine answers to a request for n
// tokens: `prefixring sim` streams exactly this text, so a session played
// against it and one played in the fleet simulator carry the same history
// (at TokenScale 1; see [SimAnswerScaled]).
func SimAnswer(n int) string { return engine.FillerText(0, n) }

// SimAnswerScaled is the answer of n tokens in a session whose text the
// engine cuts at 4·scale bytes a token (Session.TokenScale; 0 is 1): the
// filler cut to round(4·scale·n) bytes. A real tokenizer cuts a model's
// output text back into about the tokens it was generated as, so the next
// turn carries the answer as the n tokens the engine generated (and
// cached), whatever the session's text kind; at scale 1 it is SimAnswer.
func SimAnswerScaled(n int, scale float64) string {
	if scale == 0 || scale == 1 {
		return SimAnswer(n)
	}
	size := int(math.Round(float64(n) * engine.CharsPerToken * scale))
	return engine.FillerText(0, (size+engine.CharsPerToken-1)/engine.CharsPerToken)[:size]
}

// EngineText is the text the engine tokenizes: the chat template applied to
// the messages and tools, or the prompt. (sim/vllm renders a chat request
// the same way.)
func (c *Call) EngineText() string {
	if c.API == Completions {
		return c.Prompt
	}
	return engine.RenderChat(c.Messages, c.Tools)
}

// Body is the JSON body of the call for model; stream asks for a stream
// with usage in its last event. It fails only if Tools is not valid JSON.
func (c *Call) Body(model string, stream bool) ([]byte, error) {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	body := map[string]any{"model": model, "max_tokens": c.MaxTokens}
	if stream {
		body["stream"] = true
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	if c.API == Completions {
		body["prompt"] = c.Prompt
	} else {
		msgs := make([]msg, len(c.Messages))
		for i, m := range c.Messages {
			msgs[i] = msg(m)
		}
		body["messages"] = msgs
		if c.Tools != "" {
			body["tools"] = json.RawMessage(c.Tools)
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("workload: session %d turn %d: %w", c.Session, c.Turn, err)
	}
	return b, nil
}
