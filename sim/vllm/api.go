package vllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/prefixring/prefixring/sim/engine"
)

// apiRequest holds the fields of /v1/completions and /v1/chat/completions
// that matter to the simulation; sampling parameters are accepted and
// ignored.
type apiRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// parsed is a validated request.
type parsed struct {
	chat         bool
	stream       bool
	includeUsage bool
	tokens       []uint32
	maxTokens    int
}

func (s *Server) parse(body []byte, chat bool) (*parsed, *apiError) {
	var req apiRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return nil, badRequest("invalid JSON body: " + err.Error())
	}
	if req.Model != "" && req.Model != s.cfg.Model {
		return nil, notFound(fmt.Sprintf("The model `%s` does not exist.", req.Model))
	}
	if req.N != nil && *req.N != 1 {
		return nil, badRequest("n other than 1 is not supported by the simulator")
	}
	p := &parsed{chat: chat, stream: req.Stream}
	p.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	if req.StreamOptions != nil && !req.Stream {
		return nil, badRequest("Stream options can only be defined when `stream=True`.")
	}
	var err *apiError
	if chat {
		p.tokens, err = chatTokens(req.Messages, req.Tools)
	} else {
		p.tokens, err = promptTokens(req.Prompt)
	}
	if err != nil {
		return nil, err
	}
	max := req.MaxTokens
	if chat && req.MaxCompletionTokens != nil {
		max = req.MaxCompletionTokens
	}
	limit := s.cfg.Engine.MaxModelLen
	// vLLM's wording and param (serving_engine._validate_input): clients
	// parse these messages to shrink the prompt or max_tokens and retry.
	// It needs room for at least one output token, whatever max_tokens.
	if len(p.tokens) >= limit {
		e := badRequest(fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.",
			limit, len(p.tokens)))
		e.Param = "input_tokens"
		return nil, e
	}
	if max == nil {
		// vLLM lets an unset max_tokens fill the rest of the context; only
		// a max_tokens the client sent is checked against it. The filler
		// has no end of sequence, so output stops at DefaultMaxTokens.
		p.maxTokens = min(s.cfg.DefaultMaxTokens, limit-len(p.tokens))
		return p, nil
	}
	if *max < 1 {
		return nil, badRequest(fmt.Sprintf("max_tokens must be at least 1, got %d.", *max))
	}
	p.maxTokens = *max
	if n := len(p.tokens); n+p.maxTokens > limit {
		e := badRequest(fmt.Sprintf("'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).",
			p.maxTokens, limit, n, p.maxTokens, limit, n))
		e.Param = "max_tokens"
		return nil, e
	}
	return p, nil
}

// promptTokens accepts a string, a list of token ids, or a one-element list
// of either; vLLM also takes batches, which the simulator does not.
func promptTokens(raw json.RawMessage) ([]uint32, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return nil, badRequest("Prompt cannot be empty")
		}
		return engine.Tokenize(text), nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		return tokenIDs(ids)
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil && len(list) == 1 {
		return promptTokens(list[0])
	}
	return nil, badRequest("prompt must be a string, a list of token ids, or a one-element list of either")
}

func tokenIDs(ids []int64) ([]uint32, *apiError) {
	if len(ids) == 0 {
		return nil, badRequest("Prompt cannot be empty")
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= engine.VocabSize {
			return nil, badRequest(fmt.Sprintf("Token id %d is out of vocabulary", id))
		}
		out[i] = uint32(id)
	}
	return out, nil
}

// chatTokens renders messages and tools with the stand-in chat template.
// tools, when present and not null, must be a JSON array; it is rendered
// compacted, as a template re-serializes it, so its whitespace in the
// body does not change the prompt's tokens.
func chatTokens(msgs []chatMessage, tools json.RawMessage) ([]uint32, *apiError) {
	if len(msgs) == 0 {
		return nil, badRequest("messages must not be empty")
	}
	conv := make([]engine.Message, len(msgs))
	for i, m := range msgs {
		text, err := contentText(m.Content)
		if err != nil {
			return nil, err
		}
		if m.Role == "" {
			return nil, badRequest(fmt.Sprintf("messages[%d].role is required", i))
		}
		conv[i] = engine.Message{Role: m.Role, Content: text}
	}
	rendered, err := toolsText(tools)
	if err != nil {
		return nil, err
	}
	return engine.Tokenize(engine.RenderChat(conv, rendered)), nil
}

// toolsText is the text a chat's tools render to: "" when absent or
// null, else the array compacted (engine.RenderChat renders an empty one
// as none). The body's decoder has already checked the JSON.
func toolsText(raw json.RawMessage) (string, *apiError) {
	var b bytes.Buffer
	if len(raw) == 0 || json.Compact(&b, raw) != nil || b.String() == "null" {
		return "", nil
	}
	if b.Bytes()[0] != '[' {
		return "", badRequest("tools must be an array of tool definitions")
	}
	return b.String(), nil
}

// contentText flattens a message's content: a string or a list of parts,
// of which only text parts are accepted.
func contentText(raw json.RawMessage) (string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest("message content must be a string or a list of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", badRequest(fmt.Sprintf("content part type %q is not supported by the simulator", p.Type))
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}
