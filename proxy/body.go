package proxy

import (
	"bytes"
	"errors"
	"io"
	"math"
	"math/bits"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A request body is read from the client once, into a pooled buffer, and
// then read many times: by the keyer, and by the Transport for each try
// (the first send, a resend on a fresh connection, a retry elsewhere).
// net/http's Transport may still read a request body after RoundTrip has
// returned (an upstream can answer before the body was written), so the
// buffer goes back to the pool only when the handler is done with it AND
// every reader handed out has been closed: a reference count, with reads
// and Close under one lock, so no read can touch a buffer once returned.

// Pooled buffers come in power-of-two classes from 4 KiB to 4 MiB; larger
// bodies are allocated and left to the garbage collector.
const (
	minClass = 12
	maxClass = 22
)

var bufPools [maxClass - minClass + 1]sync.Pool

// bodyBudget bounds the bytes of request body buffers held by all
// requests together (Config.MaxBufferedBodyBytes).
type bodyBudget struct {
	max  int64
	used atomic.Int64
}

// reserve takes n bytes of the budget, or reports that they are not
// there.
func (b *bodyBudget) reserve(n int64) bool {
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *bodyBudget) release(n int64) { b.used.Add(-n) }

// recycled, when set (tests), sees every buffer as it goes back to the
// pool.
var recycled atomic.Pointer[func([]byte)]

func getBuf(n int) []byte {
	c := max(bits.Len(uint(max(n, 1)-1)), minClass)
	if c > maxClass {
		return make([]byte, 0, n)
	}
	if b, ok := bufPools[c-minClass].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 1<<c)
}

func putBuf(b []byte) {
	if cap(b) == 0 {
		return
	}
	c := bits.Len(uint(cap(b)) - 1)
	if cap(b) != 1<<c || c < minClass || c > maxClass {
		return
	}
	if fn := recycled.Load(); fn != nil {
		(*fn)(b[:cap(b)])
	}
	b = b[:0]
	bufPools[c-minClass].Put(&b)
}

// smallBody is the largest body copied out of its pooled buffer: with the
// request head it fits the Transport's 4 KiB write buffer, and as an
// in-memory reader net/http recognizes it goes out in one write with the
// head (a reader of the pooled buffer, which net/http cannot see through,
// makes it flush the head first: one more write per request, measured
// ~6% of the loopback round trip at 2 KiB). Larger bodies stay pooled:
// they need several writes either way, and copying them costs more.
const smallBody = 3 << 10

// body is a request body shared by the handler and the Transport.
type body struct {
	b       []byte
	pooled  bool         // b is a pooled buffer; else a plain slice
	refs    atomic.Int32 // the handler's, plus one per open reader
	getBody func() (io.ReadCloser, error)
	budget  *bodyBudget // given back reserved bytes on the last release
	charged int64
}

// charge makes x hold reserved bytes of budget until its last release: a
// small body, copied out of its buffer, holds only its length.
func (x *body) charge(budget *bodyBudget, reserved int64) {
	if !x.pooled {
		budget.release(reserved - int64(len(x.b)))
		reserved = int64(len(x.b))
	}
	x.budget, x.charged = budget, reserved
}

// liveBodies counts bodies not yet released by all their holders; tests
// check that it returns to zero.
var liveBodies atomic.Int64

func newBody(b []byte) *body {
	x := &body{b: b, pooled: true}
	if len(b) <= smallBody {
		x.b, x.pooled = bytes.Clone(b), false
		putBuf(b)
	}
	x.getBody = func() (io.ReadCloser, error) { return x.reader(), nil }
	x.refs.Store(1)
	liveBodies.Add(1)
	return x
}

// bytes returns the body; valid until the handler's release.
func (x *body) bytes() []byte { return x.b }

func (x *body) release() {
	switch n := x.refs.Add(-1); {
	case n == 0:
		liveBodies.Add(-1)
		if x.budget != nil {
			x.budget.release(x.charged)
		}
		if x.pooled {
			putBuf(x.b)
		}
	case n < 0:
		panic("proxy: request body released twice")
	}
}

// reader returns a new reader of the body. A pooled body's reader holds a
// reference, dropped by its Close; a small body is a plain slice nobody
// writes again, read through the in-memory reader net/http recognizes.
func (x *body) reader() io.ReadCloser {
	if !x.pooled {
		return io.NopCloser(bytes.NewReader(x.b))
	}
	x.refs.Add(1)
	return &bodyReader{x: x}
}

var errBodyClosed = errors.New("proxy: read of a closed request body")

type bodyReader struct {
	mu     sync.Mutex
	x      *body
	off    int
	closed bool
}

func (r *bodyReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, errBodyClosed
	}
	if r.off >= len(r.x.b) {
		return 0, io.EOF
	}
	n := copy(p, r.x.b[r.off:])
	r.off += n
	return n, nil
}

func (r *bodyReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.x.release()
	}
	return nil
}

// readBody reads the client's body into a pooled buffer that grows as
// bytes arrive (never to the declared Content-Length up front: a client
// declaring 32 MiB and sending one byte costs one small buffer), within
// MaxBodyBytes and the budget all buffered bodies share, waiting at most
// ClientBodyTimeout for each read and ClientBodyDeadline in all.
func (rt *Router) readBody(w http.ResponseWriter, r *http.Request) (*body, *apiError) {
	declared, limit := r.ContentLength, rt.cfg.MaxBodyBytes
	if declared > limit {
		return nil, errTooLarge
	}
	if declared == 0 {
		return newBody(nil), nil
	}
	deadline := time.Now().Add(rt.cfg.ClientBodyDeadline)
	rc := http.NewResponseController(w)
	src := http.MaxBytesReader(w, r.Body, limit)
	buf, reserved, e := rt.takeBuf(nil, 0, firstBufSize(declared))
	if e != nil {
		return nil, e
	}
	for declared < 0 || int64(len(buf)) < declared {
		if len(buf) == cap(buf) {
			if buf, reserved, e = rt.takeBuf(buf, reserved, nextBufSize(cap(buf), declared, limit)); e != nil {
				return nil, e
			}
		}
		next := time.Now().Add(rt.cfg.ClientBodyTimeout)
		if next.After(deadline) {
			next = deadline
		}
		_ = rc.SetReadDeadline(next)
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			// The deadline stays: it bounds net/http's read of the rest
			// of the body after the error answer.
			putBuf(buf)
			rt.bodies.release(reserved)
			return nil, bodyError(err)
		}
	}
	// Cleared once the body is read, so no deadline outlives it (net/http
	// clears it too when it starts the background read that watches for
	// the client hanging up during a long stream).
	_ = rc.SetReadDeadline(time.Time{})
	x := newBody(buf)
	x.charge(rt.bodies, reserved)
	return x, nil
}

// firstBufSize is the size of the first buffer for a body of declared
// length (-1: unknown, chunked).
func firstBufSize(declared int64) int {
	if declared > 0 {
		return int(min(declared, 64<<10))
	}
	return 64 << 10
}

// nextBufSize is the size a full buffer of capacity c grows to: twice c,
// but no more than the declared length, nor than one byte past limit
// (room for the read that finds a chunked body's end, or the byte that
// makes it too large).
func nextBufSize(c int, declared, limit int64) int {
	next := int64(2 * c)
	if declared > 0 {
		next = min(next, declared)
	}
	return int(min(next, limit+1))
}

// peakBodyBytes is the most of the body budget that reading one body of
// at most limit bytes reserves at once, on an idle router: takeBuf
// reserves a grown buffer before it gives back the old one (both are in
// memory while the bytes are copied, and the budget counts memory), and
// every buffer is rounded up to its pool class. The worst case is a
// chunked body of exactly a buffer's capacity: its buffers follow the
// largest sizes (firstBufSize(-1), then nextBufSize up to limit+1), and
// it still grows once more to read its end. A body with a Content-Length
// grows through sizes no larger, so it needs no more. Config.Validate
// requires a budget at least this large, so that any body the router
// accepts can be read on an idle router; reserving only the growth, or
// releasing the old buffer first, would admit more than the memory it
// holds.
func peakBodyBytes(limit int64) int64 {
	if limit >= math.MaxInt64/4 {
		return math.MaxInt64 // the doubling below would overflow
	}
	c := int64(bufClass(firstBufSize(-1)))
	peak := c
	for c <= limit { // full at c bytes, with maybe a byte more to come
		next := int64(bufClass(nextBufSize(int(c), -1, limit)))
		peak = max(peak, c+next)
		c = next
	}
	return peak
}

// takeBuf moves buf (holding reserved bytes of the body budget) into a
// buffer of at least n bytes, reserving its capacity first; it returns
// the new buffer and reservation, or 503 when the budget is spent (buf
// and its reservation are given back then).
func (rt *Router) takeBuf(buf []byte, reserved int64, n int) ([]byte, int64, *apiError) {
	size := int64(bufClass(n))
	if !rt.bodies.reserve(size) {
		putBuf(buf)
		rt.bodies.release(reserved)
		return nil, 0, errBodyBudget
	}
	next := append(getBuf(n), buf...)
	putBuf(buf)
	rt.bodies.release(reserved)
	return next, size, nil
}

// bufClass is the capacity getBuf(n) returns.
func bufClass(n int) int {
	c := max(bits.Len(uint(max(n, 1)-1)), minClass)
	if c > maxClass {
		return n
	}
	return 1 << c
}

// refuse answers a request refused before its body was read. net/http
// then reads what is left of the body (up to 256 KiB, to keep the
// connection), with no deadline of its own: the body timeout bounds that
// read, and a client waiting for 100 Continue, which sends no body now,
// is not waited for at all (the connection closes after the answer).
func (rt *Router) refuse(w http.ResponseWriter, r *http.Request, e *apiError) {
	wait := rt.cfg.ClientBodyTimeout
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		wait = 0
	}
	bodyWait(w, r, wait)
	rt.reject(w, e)
}

// bodyWait bounds net/http's read of the body a handler answers without
// reading (net/http reads up to 256 KiB of it before the answer, to keep
// the connection, with no deadline of its own): past wait it stops, and
// the connection closes after the answer.
func bodyWait(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	if r.ContentLength != 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(wait))
	}
}

func bodyError(err error) *apiError {
	var tooBig *http.MaxBytesError
	var timeout interface{ Timeout() bool }
	switch {
	case errors.As(err, &tooBig):
		return errTooLarge
	case errors.As(err, &timeout) && timeout.Timeout():
		return errBodyTimeout
	}
	return errReadBody
}
