package vllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prefixring/prefixring/sim/engine"
)

// call is one generation request in flight: one engine request per
// choice (sts[i] is choice i).
type call struct {
	*parsed
	sts     []*stream
	notify  chan struct{} // shared by sts
	id      string
	created int64
	model   string
	closeAt int // abort the connection after this many tokens a choice; -1: never
}

// jsonOnly is vLLM's refusal of a body not declared JSON: its generation
// routes depend on validate_json_request, whose RequestValidationError
// its handler renders with FastAPI's status phrase as the type.
var jsonOnly = &apiError{Status: http.StatusBadRequest, Type: "Bad Request",
	Message: "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"}

func (s *Server) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	// vLLM compares the media type exactly, lower-cased, parameters cut.
	media, _, _ := strings.Cut(strings.ToLower(r.Header.Get("Content-Type")), ";")
	if media != "application/json" {
		writeError(w, jsonOnly)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		writeError(w, badRequest("could not read the request body: "+err.Error()))
		return
	}
	p, apiErr := s.parse(body, chat)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	f := s.roll()
	if f.Latency > 0 && !s.sleep(r, f.Latency) {
		return
	}
	switch {
	case f.err, f.Poison != "" && bytes.Contains(body, []byte(f.Poison)):
		writeError(w, internalError("injected fault: simulated engine error"))
		return
	case f.hang:
		select {
		case <-r.Context().Done():
		case <-s.stopped:
		}
		return
	}
	// Prompt logprobs cannot come from cached blocks: vLLM skips the
	// prefix cache for a request that wants them (an echo with logprobs).
	sts, err := s.submit(p.tokens, p.joint(), p.maxTokens, p.n, p.pieces != nil)
	if errors.Is(err, engine.ErrTooLong) {
		writeError(w, badRequest(fmt.Sprintf("The prompt (%d tokens) plus max_tokens (%d) does not fit in the KV cache.", len(p.tokens), p.maxTokens)))
		return
	} else if err != nil {
		writeError(w, badRequest(err.Error()))
		return
	}
	c := &call{parsed: p, sts: sts, notify: sts[0].notify, created: time.Now().Unix(), model: s.cfg.Model, closeAt: -1}
	// vLLM's id is "cmpl-"/"chatcmpl-" + the client's X-Request-Id
	// (OpenAIServing._base_request_id), else a fresh one: ours is the one
	// withRequestID put on the response.
	c.id = w.Header().Get("X-Request-Id")
	if chat {
		c.id = "chatcmpl-" + c.id
	} else {
		c.id = "cmpl-" + c.id
	}
	if f.close {
		c.closeAt = f.CloseAfterTokens
	}
	if p.stream {
		s.streamResponse(w, r, c)
	} else {
		s.wholeResponse(w, r, c)
	}
}

// sleep waits d unless the client leaves or the server stops first.
func (s *Server) sleep(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-s.stopped:
	}
	return false
}

// wait blocks until ready reports true. It returns false if the client
// left or the server stopped; the call's requests are then aborted.
func (s *Server) wait(r *http.Request, c *call, ready func() bool) bool {
	for !ready() {
		select {
		case <-c.notify:
		case <-r.Context().Done():
			s.abort(c.sts)
			return false
		case <-s.stopped:
			s.abort(c.sts)
			return false
		}
	}
	return true
}

// abortConnection ends the response abruptly, as a crashed server would:
// net/http closes the connection without a proper end of body.
func (s *Server) abortConnection(c *call) {
	s.abort(c.sts)
	panic(http.ErrAbortHandler)
}

func (c *call) allDone() bool {
	for _, st := range c.sts {
		if !st.done.Load() {
			return false
		}
	}
	return true
}

func (s *Server) wholeResponse(w http.ResponseWriter, r *http.Request, c *call) {
	if !s.wait(r, c, c.allDone) {
		return
	}
	if c.closeAt >= 0 {
		s.abortConnection(c)
	}
	var resp any
	if c.chat {
		choices := make([]chatChoice, len(c.sts))
		for i, st := range c.sts {
			choices[i] = chatChoice{Index: i, Message: &chatMsg{Role: c.role, Content: c.echo + c.outputText(0, st.req.Output)},
				FinishReason: ptr("length")}
			if c.logprobs >= 0 {
				choices[i].Logprobs = chatLogprobsOf(c.choiceTokens(0, st.req.Output), c.logprobs)
			}
		}
		resp = chatResponse{ID: c.id, Object: "chat.completion", Created: c.created, Model: c.model, Choices: choices, Usage: c.usage(false)}
	} else {
		choices := make([]completionChoice, len(c.sts))
		for i, st := range c.sts {
			choices[i] = completionChoice{Index: i, Text: c.echo + c.outputText(0, st.req.Output), FinishReason: ptr("length")}
			if c.logprobs >= 0 {
				choices[i].Logprobs = completionLogprobsOf(c.choiceTokens(0, st.req.Output), 0)
			}
		}
		resp = completionResponse{ID: c.id, Object: "text_completion", Created: c.created, Model: c.model, Choices: choices, Usage: c.usage(false)}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// outputText is a choice's output tokens [from, to), or nothing when an
// echo with max_tokens 0 shows the prompt alone.
func (c *call) outputText(from, to int) string {
	if c.hideOutput {
		return ""
	}
	return engine.FillerText(from, to)
}

func (s *Server) streamResponse(w http.ResponseWriter, r *http.Request, c *call) {
	flusher, _ := w.(http.Flusher)
	h := w.Header()
	// As vLLM's: Starlette adds the charset to StreamingResponse's
	// media_type (vLLM's own log_response compares the whole value).
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	// sent[i] tokens of choice i have gone out; finished[i] once its
	// finish_reason has.
	sent := make([]int, len(c.sts))
	finished := make([]bool, len(c.sts))
	produced := func(i int) int {
		n := int(c.sts[i].produced.Load())
		if c.closeAt >= 0 {
			n = min(n, c.closeAt)
		}
		return n
	}
	moved := func() bool {
		for i, st := range c.sts {
			if !finished[i] && (st.done.Load() || produced(i) > sent[i]) {
				return true
			}
		}
		return false
	}
	opened := false
	for {
		if !s.wait(r, c, moved) {
			return
		}
		var buf []byte
		if c.chat && !opened {
			// vLLM opens every choice with its role (and echo) when the
			// engine's first output arrives.
			buf = c.appendOpening(buf)
			opened = true
		}
		closing, allDone := c.closeAt >= 0, true
		for i, st := range c.sts {
			done := st.done.Load() // before produced: once done, produced is final
			n := produced(i)
			last := done && n == st.req.MaxTokens
			if n > sent[i] || (last && !finished[i]) {
				buf = c.appendChunk(buf, i, sent[i], n, last)
				sent[i], finished[i] = n, last
			}
			closing = closing && sent[i] >= c.closeAt
			allDone = allDone && done
		}
		if closing {
			w.Write(buf)
			if flusher != nil {
				flusher.Flush()
			}
			s.abortConnection(c)
		}
		if allDone {
			if c.includeUsage {
				buf = c.appendUsageChunk(buf)
			}
			buf = append(buf, "data: [DONE]\n\n"...)
		}
		if _, err := w.Write(buf); err != nil {
			s.abort(c.sts)
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if allDone {
			return
		}
	}
}

// appendOpening appends a chat stream's first events: each choice's role,
// then each choice's echo, if any.
func (c *call) appendOpening(buf []byte) []byte {
	for i := range c.sts {
		buf = appendEvent(buf, chatResponse{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
			Choices: []chatChoice{{Index: i, Delta: &chatMsg{Role: c.role}}}})
	}
	for i := range c.sts {
		if c.echo != "" {
			buf = appendEvent(buf, chatResponse{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
				Choices: []chatChoice{{Index: i, Delta: &chatMsg{Content: c.echo}}}})
		}
	}
	return buf
}

// appendChunk appends one SSE event carrying choice i's output tokens
// [from, to); a completion's first also carries its echo.
func (c *call) appendChunk(buf []byte, i, from, to int, last bool) []byte {
	text := c.outputText(from, to)
	var finish *string
	if last {
		finish = ptr("length")
	}
	var lp any
	if c.chat {
		if c.logprobs >= 0 {
			lp = chatLogprobsOf(c.choiceTokens(from, to), c.logprobs)
		}
		return appendEvent(buf, chatResponse{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
			Choices: []chatChoice{{Index: i, Delta: &chatMsg{Content: text}, Logprobs: lp, FinishReason: finish}}})
	}
	// Offsets run on through the choice's text: the echo, then output.
	offset := utf8.RuneCountInString(c.echo) + utf8.RuneCountInString(c.outputText(0, from))
	if from == 0 {
		text, offset = c.echo+text, 0
	}
	if c.logprobs >= 0 {
		lp = completionLogprobsOf(c.choiceTokens(from, to), offset)
	}
	return appendEvent(buf, completionResponse{ID: c.id, Object: "text_completion", Created: c.created, Model: c.model,
		Choices: []completionChoice{{Index: i, Text: text, Logprobs: lp, FinishReason: finish}}})
}

// appendUsageChunk appends the final usage-only event of
// stream_options.include_usage: no choices, just usage.
func (c *call) appendUsageChunk(buf []byte) []byte {
	object := "text_completion"
	if c.chat {
		object = "chat.completion.chunk"
	}
	return appendEvent(buf, usageChunk{ID: c.id, Object: object, Created: c.created, Model: c.model,
		Choices: []struct{}{}, Usage: c.usage(true)})
}

func appendEvent(buf []byte, v any) []byte {
	b, _ := json.Marshal(v)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	return append(buf, "\n\n"...)
}

// usage counts the prompt once and every choice's tokens, as vLLM does.
// Its cached tokens are one child request's: the first output's when
// streaming, the last to finish's otherwise (vLLM's RequestOutput for n > 1
// carries the num_cached_tokens of the child that produced it).
func (c *call) usage(streaming bool) *usage {
	u := &usage{PromptTokens: c.sts[0].req.Prompt.Len}
	for _, st := range c.sts {
		u.CompletionTokens += st.req.Output
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	cached := c.sts[len(c.sts)-1].req.CachedTokens
	if streaming {
		cached = c.sts[0].req.CachedTokens
	}
	u.PromptTokensDetails = &tokenDetails{CachedTokens: cached}
	return u
}

func ptr[T any](v T) *T { return &v }
