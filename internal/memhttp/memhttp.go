// Package memhttp is an in-memory network for HTTP servers and clients
// in tests: listeners by address, dials through net.Pipe. Inside a
// testing/synctest bubble every wait on it is durably blocking, so the
// bubble's virtual clock runs, and a connection's deadlines run on it; a
// real socket in a bubble stops that clock. The chaos package runs whole
// clusters on it, and proxy's tests their servers.
package memhttp

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
)

// Net is an in-memory network for HTTP: listeners by address, dials that
// connect through net.Pipe. A dial to an address nobody listens on, or
// whose listener is closed, is refused at once (ECONNREFUSED), as a dial to
// a dead process's port is; [Listener.Crash] also breaks the connections
// it accepted, as a crash does.
type Net struct {
	mu sync.Mutex
	ls map[string]*Listener
}

// NewNet returns an empty network.
func NewNet() *Net { return &Net{ls: map[string]*Listener{}} }

// Listener is an address on a [Net].
type Listener struct {
	net   *Net
	addr  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once

	mu       sync.Mutex
	accepted []net.Conn
}

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

// Listen opens addr ("host:port"), replacing a closed listener there.
func (n *Net) Listen(addr string) (*Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.ls[addr]; l != nil && !l.closed() {
		return nil, &net.OpError{Op: "listen", Net: "mem", Err: syscall.EADDRINUSE}
	}
	l := &Listener{net: n, addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
	n.ls[addr] = l
	return l, nil
}

// ErrRefused is a dial refused by the network (ECONNREFUSED), as a dead
// process's port refuses it.
var ErrRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

// DialContext connects to addr, for http.Transport.DialContext.
func (n *Net) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.ls[addr]
	n.mu.Unlock()
	if l == nil || l.closed() {
		return nil, ErrRefused
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, ErrRefused
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *Listener) closed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		l.mu.Lock()
		l.accepted = append(l.accepted, c)
		l.mu.Unlock()
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: new dials are refused.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Crash closes the listener and every connection it accepted: requests in
// flight there break, as on a killed process.
func (l *Listener) Crash() {
	_ = l.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.accepted {
		_ = c.Close()
	}
	l.accepted = nil
}

// Addr implements net.Listener.
func (l *Listener) Addr() net.Addr { return memAddr(l.addr) }

// IsRefused reports a dial refused by the network.
func IsRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
