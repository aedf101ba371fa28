package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// errStreamIdle is why a try's context was cancelled when its upstream
// sent nothing for StreamIdleTimeout.
var errStreamIdle = errors.New("upstream sent nothing for the stream idle timeout")

// idleBody cuts a response body whose upstream sends nothing for d: a
// timer runs while a read waits on the upstream (never while the router
// writes to the client), and when it fires it cancels the try, which
// closes the upstream connection; the read then fails with errStreamIdle.
type idleBody struct {
	io.ReadCloser
	d     time.Duration
	timer *time.Timer
	fired atomic.Bool
}

// newIdleBody wraps rc; cancel ends the try it belongs to.
func newIdleBody(rc io.ReadCloser, d time.Duration, cancel func(error)) *idleBody {
	b := &idleBody{ReadCloser: rc, d: d}
	b.timer = time.AfterFunc(d, func() {
		b.fired.Store(true)
		cancel(errStreamIdle)
	})
	b.timer.Stop()
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.d)
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF && b.fired.Load() {
		err = errStreamIdle
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}

// deadlineWriter gives every write to the client (and every flush) a
// deadline of d from its start: a client that stops reading fails the
// write once its socket buffers are full for d, which aborts the response
// and closes the upstream body behind it. The deadline left after the
// last write bounds net/http's final flush; markResponses clears it when
// the connection's next request starts.
//
// It also holds back the flush that ReverseProxy makes right after the
// write whose read met the end of the body (atEnd): net/http then sends
// that last event with the chunked body's end in one write. A client that
// stops reading at "data: [DONE]" and closes the body (as many SSE
// clients do) has the end too, so its connection goes back to its pool
// instead of being closed. Flushed alone, the end followed the event in a
// second write, which such a client often had not read when it closed
// (docs/vs-haproxy.md, "Where the path goes (stop 33)").
type deadlineWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	d     time.Duration
	atEnd *bool // the exchange's: the body copied to the client is at its end
	// hold: the last write was made at the body's end. It is not derivable
	// from atEnd alone: ReverseProxy's header timer flushes from another
	// goroutine, under the lock its writes take but not its body reads,
	// so FlushError reads atEnd only once a write, made after the read
	// that set it, has set hold.
	hold bool
	// http10: the client speaks HTTP/1.0, which has no 1xx (WriteHeader).
	http10 bool
}

func newDeadlineWriter(w http.ResponseWriter, d time.Duration, atEnd *bool) *deadlineWriter {
	return &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: d, atEnd: atEnd}
}

// WriteHeader passes on an informational answer (an upstream's 103, which
// ReverseProxy forwards) only to a client that knows them: an HTTP/1.0
// client would take it for the final answer (RFC 9110 §15.2).
func (w *deadlineWriter) WriteHeader(code int) {
	if w.http10 && code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	w.hold = *w.atEnd
	return w.ResponseWriter.Write(p)
}

// FlushError flushes, except after the write of the body's last bytes
// while the body is still open: the handler is about to return, and
// net/http flushes them with the response's end. That holds both
// ReverseProxy's flush after the write and the one its header timer may
// make late (for an event stream it flushes the head from a timer that
// can fire after the first writes, until the copy ends). ReverseProxy's
// flush for trailers, after it closes the body (it keeps net/http from
// adding a Content-Length), goes through.
func (w *deadlineWriter) FlushError() error {
	if w.hold && *w.atEnd {
		return nil
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the server's writer (Hijack
// for upgrades).
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
