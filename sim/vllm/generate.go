package vllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prefixring/prefixring/sim/engine"
)

// call is one generation request in flight.
type call struct {
	*parsed
	st      *stream
	id      string
	created int64
	model   string
	closeAt int // abort the connection after this many tokens; -1: never
}

func (s *Server) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	// As vLLM with --enable-request-id-headers: the client's request id
	// comes back on the response, so a client can tell its answer is its own.
	if id := r.Header.Get("X-Request-Id"); id != "" {
		w.Header().Set("X-Request-Id", id)
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
	st, err := s.submit(p.tokens, p.maxTokens)
	if errors.Is(err, engine.ErrTooLong) {
		writeError(w, badRequest(fmt.Sprintf("The prompt (%d tokens) plus max_tokens (%d) does not fit in the KV cache.", len(p.tokens), p.maxTokens)))
		return
	} else if err != nil {
		writeError(w, badRequest(err.Error()))
		return
	}
	c := &call{parsed: p, st: st, created: time.Now().Unix(), model: s.cfg.Model, closeAt: -1}
	// vLLM's id is "cmpl-"/"chatcmpl-" + the client's X-Request-Id
	// (OpenAIServing._base_request_id), else a fresh one: ours is the
	// engine's request number.
	c.id = r.Header.Get("X-Request-Id")
	if c.id == "" {
		c.id = fmt.Sprintf("%016x", st.req.ID)
	}
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

// wait blocks until the request has produced more than have tokens (or is
// done). It returns false if the client left or the server stopped; the
// request is then aborted.
func (s *Server) wait(r *http.Request, c *call, have int) bool {
	for !c.st.done.Load() && int(c.st.produced.Load()) <= have {
		select {
		case <-c.st.notify:
		case <-r.Context().Done():
			s.abort(c.st)
			return false
		case <-s.stopped:
			s.abort(c.st)
			return false
		}
	}
	return true
}

// abortConnection ends the response abruptly, as a crashed server would:
// net/http closes the connection without a proper end of body.
func (s *Server) abortConnection(c *call) {
	s.abort(c.st)
	panic(http.ErrAbortHandler)
}

func (s *Server) wholeResponse(w http.ResponseWriter, r *http.Request, c *call) {
	for !c.st.done.Load() {
		if !s.wait(r, c, int(c.st.produced.Load())) {
			return
		}
	}
	if c.closeAt >= 0 {
		s.abortConnection(c)
	}
	n := c.st.req.Output
	text := engine.FillerText(0, n)
	var resp any
	if c.chat {
		resp = chatResponse{ID: c.id, Object: "chat.completion", Created: c.created, Model: c.model,
			Choices: []chatChoice{{Message: &chatMsg{Role: "assistant", Content: text}, FinishReason: ptr("length")}},
			Usage:   c.usage()}
	} else {
		resp = completionResponse{ID: c.id, Object: "text_completion", Created: c.created, Model: c.model,
			Choices: []completionChoice{{Text: text, FinishReason: ptr("length")}}, Usage: c.usage()}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
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
	sent := 0
	for {
		if !s.wait(r, c, sent) {
			return
		}
		done := c.st.done.Load() // before produced: once done, produced is final
		n := int(c.st.produced.Load())
		if c.closeAt >= 0 && n >= c.closeAt {
			n = c.closeAt
		}
		var buf []byte
		if n > sent {
			buf = c.appendChunk(buf, sent, n, done && n == c.st.req.MaxTokens)
			sent = n
		}
		if c.closeAt >= 0 && sent >= c.closeAt {
			w.Write(buf)
			if flusher != nil {
				flusher.Flush()
			}
			s.abortConnection(c)
		}
		if done {
			if c.includeUsage {
				buf = c.appendUsageChunk(buf)
			}
			buf = append(buf, "data: [DONE]\n\n"...)
		}
		if _, err := w.Write(buf); err != nil {
			s.abort(c.st)
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if done {
			return
		}
	}
}

// appendChunk appends one SSE event carrying output tokens [from, to).
func (c *call) appendChunk(buf []byte, from, to int, last bool) []byte {
	text := engine.FillerText(from, to)
	var finish *string
	if last {
		finish = ptr("length")
	}
	var v any
	if c.chat {
		if from == 0 {
			buf = appendEvent(buf, chatResponse{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
				Choices: []chatChoice{{Delta: &chatMsg{Role: "assistant"}}}})
		}
		v = chatResponse{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
			Choices: []chatChoice{{Delta: &chatMsg{Content: text}, FinishReason: finish}}}
	} else {
		v = completionResponse{ID: c.id, Object: "text_completion", Created: c.created, Model: c.model,
			Choices: []completionChoice{{Text: text, FinishReason: finish}}}
	}
	return appendEvent(buf, v)
}

// appendUsageChunk appends the final usage-only event of
// stream_options.include_usage: no choices, just usage.
func (c *call) appendUsageChunk(buf []byte) []byte {
	object := "text_completion"
	if c.chat {
		object = "chat.completion.chunk"
	}
	return appendEvent(buf, usageChunk{ID: c.id, Object: object, Created: c.created, Model: c.model,
		Choices: []struct{}{}, Usage: c.usage()})
}

func appendEvent(buf []byte, v any) []byte {
	b, _ := json.Marshal(v)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	return append(buf, "\n\n"...)
}

func (c *call) usage() *usage {
	r := &c.st.req
	return &usage{PromptTokens: r.Prompt.Len, CompletionTokens: r.Output, TotalTokens: r.Prompt.Len + r.Output,
		PromptTokensDetails: &tokenDetails{CachedTokens: r.CachedTokens}}
}

func ptr[T any](v T) *T { return &v }
