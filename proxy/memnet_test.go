package proxy

import (
	"context"
	"net"
	"sync"
	"syscall"
)

// memNet is an in-memory network for tests that run servers and clients
// in a synctest bubble: listeners by address, dials through net.Pipe. A
// real socket in a bubble stops its virtual clock (a goroutine waiting on
// the network is not durably blocked); on memNet every wait is durable,
// and a connection's deadlines run on the bubble's clock, so a timeout of
// 100 ms is 100 ms however slow the machine is.
type memNet struct {
	mu sync.Mutex
	ls map[string]*memListener
}

func newMemNet() *memNet { return &memNet{ls: map[string]*memListener{}} }

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

// memListener is an address on a memNet.
type memListener struct {
	addr  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// listen opens addr ("host:port").
func (n *memNet) listen(addr string) *memListener {
	l := &memListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
	n.mu.Lock()
	n.ls[addr] = l
	n.mu.Unlock()
	return l
}

var errMemRefused = &net.OpError{Op: "dial", Net: "mem", Err: syscall.ECONNREFUSED}

// DialContext connects to addr, for http.Transport.DialContext.
func (n *memNet) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.ls[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, errMemRefused
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, errMemRefused
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr(l.addr) }
