package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prefixring/prefixring/sim/workload"
)

// Error kinds a [Sample] may carry.
const (
	ErrConnect  = "connect"  // no URL accepted the connection
	ErrTimeout  = "timeout"  // Config.Timeout passed
	ErrNetwork  = "network"  // the connection failed after it was made
	ErrHTTP4xx  = "http_4xx" // the server answered 4xx
	ErrHTTP5xx  = "http_5xx" // the server answered 5xx
	ErrStream   = "stream"   // a stream ended without [DONE], or with an error event
	ErrDecode   = "decode"   // the body is not an OpenAI response
	ErrMismatch = "mismatch" // the response belongs to another request
	ErrCanceled = "canceled" // the run was stopped
)

// Sample is what the client measured of one request; its JSON form is one
// line of what [Report.WriteSamples] writes (durations in nanoseconds).
type Sample struct {
	Session int `json:"session"`
	Turn    int `json:"turn"`
	// URL is the target that answered; Endpoint the router's
	// X-Prefixring-Endpoint, or URL when there is none (a direct engine).
	URL      string `json:"url"`
	Endpoint string `json:"endpoint,omitempty"`
	// Decision is the router's X-Prefixring-Decision (home, spill or
	// fallback), where it sends one.
	Decision string `json:"decision,omitempty"`
	// Start is when the request was sent, from the run's start.
	Start time.Duration `json:"start_ns"`
	// TTFT is the time to the first token (the whole response without
	// streaming), E2E the time to the response's end, ITL the mean gap
	// between tokens after the first.
	TTFT time.Duration `json:"ttft_ns"`
	E2E  time.Duration `json:"e2e_ns"`
	ITL  time.Duration `json:"itl_ns,omitempty"`
	// Usage as the server reported it.
	PromptTokens int `json:"prompt_tokens"`
	CachedTokens int `json:"cached_tokens"`
	OutputTokens int `json:"output_tokens"`
	// Failovers counts URLs that refused the connection before one took it.
	Failovers int `json:"failovers,omitempty"`
	// NewConn: the request went out on a connection opened for it, not one
	// from the client's keep-alive pool.
	NewConn bool `json:"new_conn,omitempty"`
	// Verified: the server echoed the request's X-Request-Id, and it was
	// this request's.
	Verified bool `json:"verified"`
	// Err is the error kind ("" on success) and Detail its message.
	Err    string `json:"error,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// caller sends calls to the URLs in turn.
type caller struct {
	cfg    *Config
	client *http.Client
	next   atomic.Uint64
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	Details          *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *usage) into(s *Sample) {
	s.PromptTokens, s.OutputTokens = u.PromptTokens, u.CompletionTokens
	if u.Details != nil {
		s.CachedTokens = u.Details.CachedTokens
	}
}

// response is the part of a completion (or a stream chunk) the client reads.
type response struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *usage          `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func (r *response) text() string {
	if len(r.Choices) == 0 {
		return ""
	}
	c := r.Choices[0]
	return c.Message.Content + c.Delta.Content + c.Text
}

// do sends c with request id id and returns what it measured and the
// answer's text. t0 is the run's start.
func (cl *caller) do(ctx context.Context, c *workload.Call, id string, t0 time.Time) (Sample, string) {
	s := Sample{Session: c.Session, Turn: c.Turn}
	body, err := c.Body(cl.cfg.Model, cl.cfg.Stream)
	if err != nil {
		s.Err, s.Detail = ErrDecode, err.Error()
		return s, ""
	}
	ctx, cancel := context.WithTimeout(ctx, cl.cfg.Timeout)
	defer cancel()
	start := time.Now()
	s.Start = start.Sub(t0)
	resp, err := cl.send(ctx, c.API.Path(), body, id, &s)
	if err != nil {
		s.Err, s.Detail = classify(ctx, err), err.Error()
		return s, ""
	}
	defer resp.Body.Close()
	s.Endpoint = resp.Header.Get("X-Prefixring-Endpoint")
	s.Decision = resp.Header.Get("X-Prefixring-Decision")
	if s.Endpoint == "" {
		s.Endpoint = strings.TrimPrefix(strings.TrimPrefix(s.URL, "http://"), "https://")
	}
	if echo := resp.Header.Get("X-Request-Id"); echo != "" {
		if echo != id {
			s.Err, s.Detail = ErrMismatch, fmt.Sprintf("X-Request-Id %q answers request %q", echo, id)
			return s, ""
		}
		s.Verified = true
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		s.Err, s.Detail = ErrHTTP4xx, fmt.Sprintf("%d: %s", resp.StatusCode, bytes.TrimSpace(b))
		if resp.StatusCode >= 500 {
			s.Err = ErrHTTP5xx
		}
		return s, ""
	}
	var answer string
	if cl.cfg.Stream {
		answer = cl.readStream(ctx, resp.Body, start, &s)
	} else {
		answer = cl.readBody(ctx, resp.Body, start, &s)
	}
	return s, answer
}

// send posts body to the next URL, moving on while connections are refused.
func (cl *caller) send(ctx context.Context, path string, body []byte, id string, s *Sample) (*http.Response, error) {
	n := len(cl.cfg.URLs)
	first := int(cl.next.Add(1)-1) % n
	var err error
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(c httptrace.GotConnInfo) { s.NewConn = !c.Reused },
	})
	for i := range n {
		s.URL = cl.cfg.URLs[(first+i)%n]
		req, rerr := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+path, bytes.NewReader(body))
		if rerr != nil {
			return nil, rerr
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		var resp *http.Response
		if resp, err = cl.client.Do(req); err == nil {
			return resp, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
		s.Failovers++
	}
	return nil, &refusedError{err}
}

type refusedError struct{ err error }

func (e *refusedError) Error() string { return "every URL refused the connection: " + e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

func classify(ctx context.Context, err error) string {
	var refused *refusedError
	switch {
	case errors.As(err, &refused):
		return ErrConnect
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ErrTimeout
	case ctx.Err() != nil:
		return ErrCanceled
	}
	return ErrNetwork
}

func (cl *caller) readBody(ctx context.Context, rd io.Reader, start time.Time, s *Sample) string {
	b, err := io.ReadAll(rd)
	s.E2E = time.Since(start)
	s.TTFT = s.E2E
	if err != nil {
		s.Err, s.Detail = classify(ctx, err), err.Error()
		return ""
	}
	var r response
	if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) == 0 {
		s.Err, s.Detail = ErrDecode, fmt.Sprintf("not a completion: %.200s", b)
		return ""
	}
	if r.Usage != nil {
		r.Usage.into(s)
	}
	return r.text()
}

// drainAfterDone reads what follows a stream's [DONE], up to the body's
// end, as OpenAI's Python client does: Go's client keeps a connection for
// the next request only if its body was read to the end, and a server or
// proxy may send the end in a write of its own after [DONE]. Stopping at
// [DONE] made the next turn's connection, and so its TTFT, depend on how
// the system under test groups its last writes. It reads at most 64 KiB
// and waits at most a second (a server that never ends its body), after
// the sample's times were taken.
func drainAfterDone(rd io.Reader) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(io.Discard, io.LimitReader(rd, 64<<10))
	}()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C: // the caller's Close ends the copy
	}
}

// readStream reads an SSE stream to its [DONE]: the first token's time,
// the gaps after it, the usage of the last chunk.
func (cl *caller) readStream(ctx context.Context, rd io.Reader, start time.Time, s *Sample) string {
	var (
		text   strings.Builder
		first  time.Time
		last   time.Time
		chunks int
		done   bool
	)
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for !done && sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			done = true
			break
		}
		var r response
		if err := json.Unmarshal(data, &r); err != nil {
			s.Err, s.Detail = ErrDecode, fmt.Sprintf("stream chunk: %.200s", data)
			return ""
		}
		if len(r.Error) > 0 && string(r.Error) != "null" {
			s.Err, s.Detail = ErrStream, fmt.Sprintf("error event: %.200s", r.Error)
			return ""
		}
		if r.Usage != nil {
			r.Usage.into(s)
		}
		if t := r.text(); t != "" {
			now := time.Now()
			if chunks == 0 {
				first = now
			}
			last = now
			chunks++
			text.WriteString(t)
		}
	}
	s.E2E = time.Since(start)
	if done {
		drainAfterDone(rd)
	}
	if !done {
		s.Err, s.Detail = ErrStream, "the stream ended without [DONE]"
		if err := sc.Err(); err != nil {
			s.Detail += ": " + err.Error()
			if ctx.Err() != nil {
				s.Err = classify(ctx, err)
			}
		}
		return ""
	}
	if chunks == 0 {
		s.TTFT = s.E2E
		return ""
	}
	s.TTFT = first.Sub(start)
	if chunks > 1 {
		s.ITL = last.Sub(first) / time.Duration(chunks-1)
	}
	if s.OutputTokens == 0 {
		s.OutputTokens = chunks
	}
	return text.String()
}
