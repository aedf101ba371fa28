package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// h1Transport is a lean HTTP/1.1 client for plain-http upstreams, the
// common case behind a router in a cluster. net/http's Transport runs a
// reader and a writer goroutine per connection and hands each request and
// response between them and the caller; at tens of thousands of requests
// per second those handoffs and their allocations were a quarter of the
// router's CPU (docs/bench-proxy.md). Here the caller's goroutine writes the
// request and reads the response on a pooled connection itself.
//
// Anything else (https) goes to the fallback Transport.
type h1Transport struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	fallback    http.RoundTripper
	maxIdle     int           // idle connections kept per host
	idleTimeout time.Duration // an idle connection older than this is not reused
	now         func() time.Time

	mu   sync.Mutex
	idle map[string][]*h1Conn // by host:port, most recently used last
}

type h1Conn struct {
	net.Conn
	host      string // the pool's key
	br        *bufio.Reader
	idleSince time.Time
}

func newH1Transport(cfg Config, fallback http.RoundTripper) *h1Transport {
	d := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	return &h1Transport{
		dial: d.DialContext, fallback: fallback, maxIdle: cfg.MaxIdleConnsPerHost,
		// Below uvicorn's 5 s keep-alive timeout (vLLM, SGLang), so a
		// connection is seldom reused just as the server drops it.
		idleTimeout: 4 * time.Second,
		idle:        map[string][]*h1Conn{},
		now:         time.Now,
	}
}

// writers are large enough that headers and a long prompt usually leave in
// one write; pooled, so idle connections do not each hold one.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// errStale marks a failure on a reused connection before any byte of the
// response: the server had closed it. The request is resent once on a new
// connection, as net/http does for idempotent requests.
var errStale = errors.New("reused connection closed by the server")

func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.Method == http.MethodConnect {
		return t.fallback.RoundTrip(req)
	}
	for {
		c, reused, err := t.get(req.Context(), req.URL.Host)
		if err != nil {
			return nil, err
		}
		resp, err := t.exchange(c, req, reused)
		if err == nil {
			return resp, nil
		}
		c.Close()
		if !errors.Is(err, errStale) || req.GetBody == nil || req.Context().Err() != nil {
			return nil, err
		}
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, err
		}
		r := *req
		r.Body = body
		req = &r
	}
}

// exchange writes req on c and reads the response head. The body stays on
// the connection; the connection returns to the pool when the body has been
// read to its end.
func (t *h1Transport) exchange(c *h1Conn, req *http.Request, reused bool) (*http.Response, error) {
	// A canceled request unblocks any read or write on the connection.
	stop := context.AfterFunc(req.Context(), func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	w := writers.Get().(*bufio.Writer)
	w.Reset(c)
	err := req.Write(w)
	if err == nil {
		err = w.Flush()
	}
	w.Reset(nil)
	writers.Put(w)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(c.br, req)
	}
	if err != nil {
		stop()
		if cerr := req.Context().Err(); cerr != nil {
			return nil, cerr
		}
		if reused && c.br.Buffered() == 0 && isClosedConn(err) {
			return nil, errors.Join(errStale, err)
		}
		return nil, err
	}
	resp.Body = &h1Body{ReadCloser: resp.Body, c: c, t: t, stop: stop, reuse: !resp.Close && !req.Close}
	return resp, nil
}

func isClosedConn(err error) bool {
	var op *net.OpError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &op)
}

// get returns an idle connection to host, or dials one.
func (t *h1Transport) get(ctx context.Context, host string) (*h1Conn, bool, error) {
	now := t.now()
	t.mu.Lock()
	for conns := t.idle[host]; len(conns) > 0; conns = t.idle[host] {
		c := conns[len(conns)-1]
		t.idle[host] = conns[:len(conns)-1]
		if now.Sub(c.idleSince) < t.idleTimeout {
			t.mu.Unlock()
			return c, true, nil
		}
		c.Close() // idle too long: the server may be closing it right now
	}
	t.mu.Unlock()
	conn, err := t.dial(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	return &h1Conn{Conn: conn, host: host, br: bufio.NewReaderSize(conn, 16<<10)}, false, nil
}

func (t *h1Transport) put(c *h1Conn) {
	c.idleSince = t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.idle[c.host]) >= t.maxIdle {
		c.Close()
		return
	}
	t.idle[c.host] = append(t.idle[c.host], c)
}

// idleCount returns how many connections the pool holds.
func (t *h1Transport) idleCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, conns := range t.idle {
		n += len(conns)
	}
	return n
}

// CloseIdleConnections closes every pooled connection.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for host, conns := range t.idle {
		for _, c := range conns {
			c.Close()
		}
		delete(t.idle, host)
	}
	if f, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		f.CloseIdleConnections()
	}
}

// h1Body hands its connection back to the pool once read to the end, or
// closes it when abandoned early.
type h1Body struct {
	io.ReadCloser
	c     *h1Conn
	t     *h1Transport
	stop  func() bool
	reuse bool
	done  bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.finish(true)
	} else if err != nil {
		b.finish(false)
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.finish(false)
	return nil
}

// finish releases the connection: back to the pool after a complete body
// on a keep-alive connection whose cancel hook had not fired, else closed.
func (b *h1Body) finish(complete bool) {
	if b.done {
		return
	}
	b.done = true
	if b.stop() && complete && b.reuse {
		b.t.put(b.c)
		return
	}
	b.c.Close()
}
