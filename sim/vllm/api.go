package vllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/prefixring/prefixring/sim/engine"
)

// apiRequest holds the fields of /v1/completions and /v1/chat/completions
// that matter to the simulation; other sampling parameters are accepted
// and ignored (the filler's text does not depend on them).
type apiRequest struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"`
	Messages []chatMessage   `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
	// AddGenerationPrompt (vLLM's default true) ends the rendered chat
	// with the assistant's header; without it the reply continues the
	// last message's turn.
	AddGenerationPrompt *bool    `json:"add_generation_prompt"`
	MaxTokens           *int     `json:"max_tokens"`
	MaxCompletionTokens *int     `json:"max_completion_tokens"`
	N                   *int     `json:"n"`
	Temperature         *float64 `json:"temperature"`
	Echo                bool     `json:"echo"`
	// Logprobs is an integer for completions (how many alternatives) and
	// a boolean for chat, which counts them in TopLogprobs.
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs *int            `json:"top_logprobs"`
	// PromptLogprobs is checked as vLLM checks it, then refused.
	PromptLogprobs json.RawMessage `json:"prompt_logprobs"`
	Stream         bool            `json:"stream"`
	StreamOptions  *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// vLLM's limits: --max-logprobs' default, and VLLM_MAX_N_SEQUENCES'.
const (
	maxLogprobs = 20
	maxN        = 16384
)

// parsed is a validated request.
type parsed struct {
	chat         bool
	stream       bool
	includeUsage bool
	role         string // a chat reply's: vLLM's get_chat_request_role
	tokens       []uint32
	// text is the prompt's text as the engine tokenizes it, the chat
	// template applied; "" for a prompt of token ids.
	text      string
	maxTokens int // the engine's; 1 for an echo with max_tokens 0
	n         int // choices: engine requests sharing the prompt
	// echo is the text put before each choice's output: a completion's
	// prompt, or a chat's trailing assistant message.
	echo string
	// pieces are the echoed prompt's tokens as text, for its logprobs.
	pieces []string
	// hideOutput: echo with max_tokens 0 returns the prompt alone.
	hideOutput bool
	// logprobs is how many alternatives to list per token; -1: no logprobs.
	logprobs int
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
	p := &parsed{chat: chat, stream: req.Stream, n: 1, logprobs: -1}
	if err := p.sampling(&req); err != nil {
		return nil, err
	}
	p.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	if req.StreamOptions != nil && !req.Stream {
		return nil, badRequest("Stream options can only be defined when `stream=True`.")
	}
	var err *apiError
	if chat {
		addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		p.text, err = chatText(req.Messages, req.Tools, addGen)
		if err == nil {
			p.tokens = engine.Tokenize(p.text)
			p.role = "assistant"
			if !addGen {
				p.role = req.Messages[len(req.Messages)-1].Role
			}
			if req.Echo {
				p.echo = chatEcho(req.Messages, p.role)
			}
		}
	} else {
		var pieces []string
		p.text, p.tokens, pieces, err = promptTokens(req.Prompt)
		if req.Echo {
			p.echo = strings.Join(pieces, "")
			if p.logprobs >= 0 {
				p.pieces = pieces
			}
		}
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
	if *max == 0 && req.Echo && !chat {
		// vLLM generates one token and shows only the prompt
		// (CompletionRequest.to_sampling_params).
		p.maxTokens, p.hideOutput = 1, true
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

// joint is the prompt and the answer the engine will generate, tokenized
// as one text: what a follow-up request carrying both will be. The engine
// caches the answer's full blocks under their hashes
// (engine.PromptThenOutput), as vLLM v1 caches generated blocks. After
// token ids the answer's tokens are the ones generated.
func (p *parsed) joint() []uint32 {
	answer := engine.FillerText(0, p.maxTokens)
	if p.text == "" {
		return append(slices.Clip(p.tokens), engine.Tokenize(answer)...)
	}
	return engine.Tokenize(p.text + answer)
}

// promptTokens accepts a string, a list of token ids, or a one-element list
// of either; vLLM also takes batches, which the simulator does not. text is
// the string ("" for token ids); pieces are the tokens' text: the stand-in
// tokenizer's chunks of a string, and for token ids, which it cannot
// decode, vLLM's placeholder "token_id:N".
func promptTokens(raw json.RawMessage) (text string, tokens []uint32, pieces []string, err *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil, badRequest("prompt is required")
	}
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return "", nil, nil, badRequest("Prompt cannot be empty")
		}
		for i := 0; i < len(text); i += engine.CharsPerToken {
			pieces = append(pieces, text[i:min(i+engine.CharsPerToken, len(text))])
		}
		return text, engine.Tokenize(text), pieces, nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		tokens, err = tokenIDs(ids)
		for _, id := range tokens {
			pieces = append(pieces, fmt.Sprintf("token_id:%d", id))
		}
		return "", tokens, pieces, err
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil && len(list) == 1 {
		return promptTokens(list[0])
	}
	return "", nil, nil, badRequest("prompt must be a string, a list of token ids, or a one-element list of either")
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

// chatText renders messages and tools with the stand-in chat template,
// with the generation prompt if addGen. tools, when present and not null,
// must be a JSON array; it is rendered compacted, as a template
// re-serializes it, so its whitespace in the body does not change the
// prompt's tokens.
func chatText(msgs []chatMessage, tools json.RawMessage, addGen bool) (string, *apiError) {
	if len(msgs) == 0 {
		return "", badRequest("messages must not be empty")
	}
	conv := make([]engine.Message, len(msgs))
	for i, m := range msgs {
		text, err := contentText(m.Content)
		if err != nil {
			return "", err
		}
		if m.Role == "" {
			return "", badRequest(fmt.Sprintf("messages[%d].role is required", i))
		}
		conv[i] = engine.Message{Role: m.Role, Content: text}
	}
	rendered, err := toolsText(tools)
	if err != nil {
		return "", err
	}
	text := engine.RenderChat(conv, rendered)
	if !addGen {
		text = strings.TrimSuffix(text, engine.GenerationPrompt)
	}
	return text, nil
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

// sampling checks n and logprobs as vLLM does (protocol.py's
// check_logprobs, SamplingParams._verify_args and _validate_logprobs).
func (p *parsed) sampling(req *apiRequest) *apiError {
	if req.N != nil {
		p.n = *req.N
	}
	switch {
	case p.n < 1:
		return badRequest(fmt.Sprintf("n must be at least 1, got %d.", p.n))
	case p.n > maxN:
		return badRequest(fmt.Sprintf("n must be at most %d, got %d. To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable.", maxN, p.n))
	case p.n > 1 && req.Temperature != nil && *req.Temperature < 1e-5:
		return badRequest(fmt.Sprintf("n must be 1 when using greedy sampling, got %d.", p.n))
	}
	// k is how many alternatives to list per token (-1: no logprobs); -1
	// in the request asks for the whole vocabulary.
	k := -1
	all := func(v int) int {
		if v == -1 {
			return engine.VocabSize
		}
		return v
	}
	// prompt_logprobs: vLLM's protocol checks come first (check_logprobs).
	promptK, err := intOrBool(req.PromptLogprobs, "prompt_logprobs")
	switch {
	case err != nil:
		return err
	case promptK == nil:
	case req.Stream && (*promptK > 0 || *promptK == -1):
		return param(badRequest("`prompt_logprobs` are not available when `stream=True`."), "prompt_logprobs")
	case *promptK < -1:
		return param(badRequest("`prompt_logprobs` must be a positive value or -1."), "prompt_logprobs")
	}
	if p.chat {
		var on bool
		if len(req.Logprobs) > 0 && json.Unmarshal(req.Logprobs, &on) != nil {
			return param(badRequest("`logprobs` must be a boolean."), "logprobs")
		}
		top := 0
		if req.TopLogprobs != nil {
			top = *req.TopLogprobs
		}
		switch {
		case top < -1:
			return param(badRequest("`top_logprobs` must be a positive value or -1."), "top_logprobs")
		case top != 0 && !on:
			return param(badRequest("when using `top_logprobs`, `logprobs` must be set to true."), "top_logprobs")
		case on:
			k = all(top)
		}
	} else {
		// Unlike top_logprobs, never -1.
		v, err := intOrBool(req.Logprobs, "logprobs")
		switch {
		case err != nil:
			return err
		case v == nil:
		case *v < 0:
			return param(badRequest("`logprobs` must be a positive value."), "logprobs")
		default:
			k = *v
		}
	}
	if k > maxLogprobs {
		return param(badRequest(fmt.Sprintf("Requested sample logprobs of %d, which is greater than max allowed: %d", k, maxLogprobs)), "logprobs")
	}
	if promptK != nil {
		if n := all(*promptK); n > maxLogprobs {
			return param(badRequest(fmt.Sprintf("Requested prompt logprobs of %d, which is greater than max allowed: %d", n, maxLogprobs)), "prompt_logprobs")
		}
		// A value vLLM would serve: the simulator scores a prompt only
		// for an echo with logprobs, so it refuses rather than ignore it.
		return param(badRequest("prompt_logprobs is not supported by the simulator"), "prompt_logprobs")
	}
	p.logprobs = k
	return nil
}

// intOrBool reads an optional integer field of vLLM's request models:
// nil when absent or null; a boolean is 1 or 0, as pydantic reads it.
func intOrBool(raw json.RawMessage, name string) (*int, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var v int
	var b bool
	switch {
	case json.Unmarshal(raw, &b) == nil:
		if b {
			v = 1
		}
	case json.Unmarshal(raw, &v) != nil:
		return nil, param(badRequest("`"+name+"` must be an integer."), name)
	}
	return &v, nil
}

// chatEcho is what a chat's echo repeats: the last message, if its role
// is the reply's, whose turn the reply continues (vLLM compares them).
func chatEcho(msgs []chatMessage, role string) string {
	last := msgs[len(msgs)-1]
	if last.Role != role {
		return ""
	}
	text, _ := contentText(last.Content)
	return text
}

func param(e *apiError, name string) *apiError {
	e.Param = name
	return e
}
