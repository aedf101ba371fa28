// Package chaos runs prefixring under faults: replica crashes and
// restarts, gossip partitions and lossy links, engines that die, flap,
// slow down, fail or hang, and replicas that disagree on the endpoint set,
// all under steady load, with the invariants that must survive them checked
// (see Invariants). The in-process form runs whole clusters (gossiping
// router replicas, simulated vLLM engines, clients) inside one
// testing/synctest bubble on in-memory networks: chaos/memnet for
// memberlist, [Net] for HTTP.
package chaos

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// Net is an in-memory network for HTTP: listeners by address, dials that
// connect through net.Pipe. A dial to an address nobody listens on, or
// whose listener is closed, is refused at once (ECONNREFUSED), as a dial to
// a dead process's port is; closing a listener also breaks the connections
// it accepted, as a crash does. Inside a synctest bubble every wait on it
// is durably blocking, so virtual time runs.
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

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

// DialContext connects to addr, for http.Transport.DialContext.
func (n *Net) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.ls[addr]
	n.mu.Unlock()
	if l == nil || l.closed() {
		return nil, errRefused
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, errRefused
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

// keepAlive is how long idle HTTP connections on the network live.
const keepAlive = 4 * time.Second
