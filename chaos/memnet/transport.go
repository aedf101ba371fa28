package memnet

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Transport is one node's memberlist transport on a [Network].
type Transport struct {
	net     *Network
	addr    string
	ip      net.IP
	port    int
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
	shut    atomic.Bool
	mu      sync.Mutex
	conns   []*conn
}

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

// Addr returns the transport's "ip:port".
func (t *Transport) Addr() string { return t.addr }

// FinalAdvertiseAddr advertises the transport's own address.
func (t *Transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) { return t.ip, t.port, nil }

// WriteTo sends a packet; it never blocks and never fails: lost packets are
// lost silently, as on UDP.
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	t.net.send(t.addr, addr, b)
	return time.Now(), nil
}

// WriteToAddress sends a packet to a.Addr.
func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// PacketCh delivers incoming packets.
func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout opens a stream, or fails at once if addr is unreachable
// (after timeout if it is black-holed).
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.net.dial(t.addr, addr, timeout)
}

// DialAddressTimeout dials a.Addr.
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// StreamCh delivers incoming streams.
func (t *Transport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown stops delivery to this transport and breaks its streams.
func (t *Transport) Shutdown() error {
	if t.shut.CompareAndSwap(false, true) {
		close(t.done)
		t.closeConns()
	}
	return nil
}

func (t *Transport) isShut() bool { return t.shut.Load() }

func (t *Transport) track(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	live := t.conns[:0]
	for _, old := range t.conns {
		if !old.closed.Load() {
			live = append(live, old)
		}
	}
	t.conns = append(live, c)
}

func (t *Transport) closeConns() {
	t.mu.Lock()
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// addr is a net.Addr for "ip:port" strings; memberlist replies to
// From.String().
type addr string

func (a addr) Network() string { return "memnet" }
func (a addr) String() string  { return string(a) }

// conn counts the bytes written and remembers closing.
type conn struct {
	net.Conn
	net           *Network
	local, remote addr
	closed        atomic.Bool
}

func (c *conn) Write(b []byte) (int, error) {
	if c.net.silent(string(c.local), string(c.remote)) {
		return len(b), nil // into the void: no reset, no answer
	}
	k, err := c.Conn.Write(b)
	c.net.count(func(s *Stats) { s.StreamBytes += uint64(k) })
	return k, err
}

func (c *conn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }
