package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prefixring/prefixring/ring"
)

// timedBody records time to first byte and total upstream time, settles
// the try's lease at the first byte (the prefill is over: for a stream the
// first token came; see ring.SignalTokens), and reports a body cut by the
// upstream (not by the client leaving) as a failure of the endpoint.
type timedBody struct {
	io.ReadCloser
	start    time.Time
	first    time.Duration
	sawBody  bool
	done     bool
	endpoint string
	lease    ring.Lease
	rt       *Router
	ctx      context.Context
	// answer: a 200, whose timing the lease's pace is told (an error
	// says nothing of how fast the engine answers); stream: the answer is
	// server-sent events, so its first byte is its first token, else the
	// first byte comes with the whole answer.
	answer, stream bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.sawBody {
		now := time.Now()
		b.sawBody, b.first = true, now.Sub(b.start)
		b.lease.Settle()
		switch {
		case !b.answer:
		case b.stream:
			b.lease.FirstToken(b.first, now)
		default:
			b.lease.WholeAnswer(b.first, now)
		}
	}
	if err != nil {
		if err != io.EOF && b.ctx.Err() == nil && !b.done {
			b.rt.observeFailure(b.endpoint, err)
		}
		b.finish()
	}
	return n, err
}

func (b *timedBody) Close() error {
	b.finish()
	return b.ReadCloser.Close()
}

func (b *timedBody) finish() {
	if !b.done {
		b.done = true
		b.rt.metrics.upstream(b.endpoint, b.first, time.Since(b.start), b.sawBody)
	}
}

// endBody tells the exchange when the body is at its end: from the read
// that returns io.EOF until Close. It wraps only the response that
// ReverseProxy copies to the client (a retried try's body, drained before
// the next try, never reaches it), and it is read and closed on the
// handler's goroutine, where atEnd is read (deadlineWriter).
type endBody struct {
	io.ReadCloser
	atEnd *bool
}

func (b *endBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		*b.atEnd = true
	}
	return n, err
}

// Close ends the hold: ReverseProxy flushes once more after closing the
// body when the response has trailers, and that flush must go out.
func (b *endBody) Close() error {
	*b.atEnd = false
	return b.ReadCloser.Close()
}

func isEventStream(h http.Header) bool { return mediaType(h) == "text/event-stream" }

// mediaType is the Content-Type's type/subtype, lower case; without
// mime.ParseMediaType's parameter parsing and map, on every response.
func mediaType(h http.Header) string {
	ct, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	ct = strings.TrimSpace(ct)
	for i := range len(ct) {
		if c := ct[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(ct)
		}
	}
	return ct
}

// sseBody ends an event stream that its upstream cut (connection reset,
// EOF in the middle of a chunked body) with an OpenAI-style error event, so
// a client's SSE parser reports an error instead of a silent truncation or
// an aborted transfer. The response then ends normally: the client
// connection stays in step.
//
// An upstream that died in the middle of an event leaves that event
// incomplete; a blank line ends it before the error event (the client
// sees a malformed event, then the error), rather than the router
// holding back every partial event on the happy path.
type sseBody struct {
	io.ReadCloser
	ctx      context.Context
	onCut    func(error)
	tail     [4]byte // the last bytes passed on, to tell an event's end
	passed   bool
	pending  []byte // the error event, while it is being read out
	finished bool
}

func (s *sseBody) Read(p []byte) (int, error) {
	if s.pending != nil {
		n := copy(p, s.pending)
		s.pending = s.pending[n:]
		if len(s.pending) == 0 {
			return n, io.EOF
		}
		return n, nil
	}
	if s.finished {
		return 0, io.EOF
	}
	n, err := s.ReadCloser.Read(p)
	s.remember(p[:n])
	// ctx is the try's: an idle timeout cancels it too.
	if err == nil || err == io.EOF || s.ctx.Err() != nil && !errors.Is(err, errStreamIdle) {
		return n, err
	}
	// The upstream cut the stream, or went quiet for too long. The
	// client is still there.
	s.finished = true
	s.onCut(err)
	e := errStreamCut
	if errors.Is(err, errStreamIdle) {
		e = errStreamIdleTimeout
	}
	ev := errorEvent(e)
	if !s.atBoundary() {
		ev = append([]byte("\n\n"), ev...)
	}
	s.pending = ev
	return n, nil
}

func (s *sseBody) remember(b []byte) {
	if len(b) == 0 {
		return
	}
	s.passed = true
	if len(b) > len(s.tail) {
		b = b[len(b)-len(s.tail):]
	}
	copy(s.tail[:], s.tail[len(b):])
	copy(s.tail[len(s.tail)-len(b):], b)
}

// atBoundary reports whether the bytes passed so far end an event (or
// there were none).
func (s *sseBody) atBoundary() bool {
	t := string(s.tail[:])
	return !s.passed || t[2:] == "\n\n" || t == "\r\n\r\n"
}

// errorEvent is e as a server-sent event: data, then a blank line.
func errorEvent(e *apiError) []byte {
	j := e.json() // ends with a newline: the data line's
	return append(append([]byte("data: "), j...), '\n')
}
