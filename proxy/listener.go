package proxy

import (
	"net"
	"sync"
	"sync/atomic"
)

// listener is the public listener: at most max connections open at once
// (0: no cap; beyond it Accept waits, and new connections queue in the
// kernel, as with HAProxy's maxconn), each wrapped in a cannedConn.
type listener struct {
	net.Listener
	sem       chan struct{} // one slot per open connection; nil: no cap
	done      chan struct{}
	closeOnce sync.Once
}

func newListener(ln net.Listener, max int) *listener {
	l := &listener{Listener: ln, done: make(chan struct{})}
	if max > 0 {
		l.sem = make(chan struct{}, max)
	}
	return l
}

func (l *listener) Accept() (net.Conn, error) {
	if l.sem != nil {
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.release()
		return nil, err
	}
	return &cannedConn{Conn: c, l: l}, nil
}

func (l *listener) release() {
	if l.sem != nil {
		<-l.sem
	}
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// cannedConn is a client connection: it frees its slot when closed, and
// rewrites net/http's canned error responses (see canned.go).
type cannedConn struct {
	net.Conn
	l          *listener
	closeOnce  sync.Once
	inResponse atomic.Bool // a handler runs, or its response is unfinished
	head       headScan    // the request head being read (framing.go)
	ambiguous  atomic.Bool // the last head had Content-Length and Transfer-Encoding
}

func (c *cannedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.inResponse.Load() && !c.head.finished {
		c.head.feed(p[:n])
		if c.head.ambiguous() {
			c.ambiguous.Store(true)
		}
	}
	return n, err
}

func (c *cannedConn) Write(p []byte) (int, error) {
	if !c.inResponse.Load() {
		if e, ok := parseCanned(p); ok {
			if _, err := c.Conn.Write(cannedJSON(e)); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	return c.Conn.Write(p)
}

func (c *cannedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(c.l.release)
	return err
}

// CloseWrite lets net/http half-close the connection (a FIN) before it
// closes a connection with unread request bytes, so the client reads the
// answer before the reset.
func (c *cannedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
