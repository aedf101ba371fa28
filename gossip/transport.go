package gossip

import (
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// errStopped is what a dial answers once the node stopped.
var errStopped = errors.New("gossip: node stopped")

// stoppable is the node's memberlist transport, wrapped so that shutting
// it down ends the node's streams in flight. memberlist's calls that open
// a stream (Join's push/pull, SendReliable) take no context: each dial,
// and each read or write on the stream, waits up to memberlist's
// TCPTimeout (10 s) for a peer that drops packets without resetting, and
// Join contacts its seeds one after the other. The join loop and the send
// queues make those calls, and Close waits for them: a replica whose
// peers were black-holed took up to three seeds × 10 s to stop
// (TestCloseDoesNotWaitForAJoinIntoABlackHole). A stream a peer opens is
// read by a memberlist goroutine until the same timeout, which nothing
// waits for but which outlived the node (TestCloseEndsAStreamAPeerOpened).
// memberlist's Shutdown shuts the transport down first; from then on
// every dial in flight fails at once, and every stream, dialed or
// accepted, is closed, which fails its reads and writes.
type stoppable struct {
	memberlist.NodeAwareTransport
	stop chan struct{} // closed at Shutdown
	done chan struct{} // closed when the wrapped transport has shut down

	accept  sync.Once     // starts forward, at memberlist's first StreamCh
	streams chan net.Conn // the streams peers open, tracked, for memberlist

	mu      sync.Mutex
	stopped bool
	conns   map[*stoppableConn]struct{} // open streams, dialed or accepted
}

func newStoppable(t memberlist.NodeAwareTransport) *stoppable {
	return &stoppable{NodeAwareTransport: t, stop: make(chan struct{}), done: make(chan struct{}),
		streams: make(chan net.Conn), conns: map[*stoppableConn]struct{}{}}
}

// StreamCh hands memberlist the streams peers open, tracked as the ones
// we dial are, so that Shutdown closes them: the wrapped transport's
// Shutdown closes its listeners only.
func (s *stoppable) StreamCh() <-chan net.Conn {
	s.accept.Do(func() { go s.forward() })
	return s.streams
}

// forward passes the wrapped transport's streams on to memberlist until
// the wrapped transport has shut down. It receives until then, stopped or
// not: memberlist's NetTransport waits at Shutdown for its listener,
// which may be handing over a stream; one that comes once stopped is
// closed.
func (s *stoppable) forward() {
	in := s.NodeAwareTransport.StreamCh()
	for {
		select {
		case c := <-in:
			tc, err := s.track(c)
			if err != nil {
				continue
			}
			select {
			case s.streams <- tc:
			case <-s.stop:
				_ = tc.Close()
			}
		case <-s.done:
			return
		}
	}
}

// DialTimeout is DialAddressTimeout without a node name.
func (s *stoppable) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return s.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout dials as the wrapped transport does, but gives up
// when the transport shuts down. The wrapped dial cannot be cancelled
// (memberlist's own dials with a timeout alone), so it runs on until its
// timeout, and a stream it opens after the shutdown is closed at once.
func (s *stoppable) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	select {
	case <-s.stop:
		return nil, errStopped
	default:
	}
	type dialed struct {
		c   net.Conn
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		c, err := s.NodeAwareTransport.DialAddressTimeout(a, timeout)
		if err != nil {
			done <- dialed{nil, err}
			return
		}
		tc, err := s.track(c)
		done <- dialed{tc, err}
	}()
	select {
	case d := <-done:
		return d.c, d.err
	case <-s.stop:
		return nil, errStopped // a stream tracked meanwhile was closed by Shutdown
	}
}

// track records stream c as open, or closes it if the transport stopped.
func (s *stoppable) track(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		_ = c.Close()
		return nil, errStopped
	}
	tc := &stoppableConn{Conn: c, s: s}
	s.conns[tc] = struct{}{}
	return tc, nil
}

// Shutdown fails the dials in flight, closes the open streams, dialed or
// accepted, then shuts the wrapped transport down (its listeners). Only
// the first call does anything.
func (s *stoppable) Shutdown() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	close(s.stop)
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
	defer close(s.done)
	return s.NodeAwareTransport.Shutdown()
}

// stoppableConn is an open stream; closing it forgets it.
type stoppableConn struct {
	net.Conn
	s *stoppable
}

func (c *stoppableConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// nodeTransport returns the transport the node runs on, stoppable: the
// configured one (tests), or memberlist's own UDP and TCP transport made
// here, as memberlist.Create makes it when given none. A bind port of 0
// is chosen now, and written into mc; so is the advertise port when it is
// 0 too, but not a port configured to advertise (memberlist.Create
// replaces that one as well).
func nodeTransport(mc *memberlist.Config) (*stoppable, error) {
	if mc.Transport != nil {
		t, ok := mc.Transport.(memberlist.NodeAwareTransport)
		if !ok {
			return nil, errors.New("the configured transport is not a memberlist.NodeAwareTransport")
		}
		return newStoppable(t), nil
	}
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger, MetricLabels: mc.MetricLabels}
	// A port the kernel chose for TCP may be taken for UDP: try others.
	tries := 1
	if mc.BindPort == 0 {
		tries = 10
	}
	var err error
	for range tries {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(nc); err == nil {
			if mc.BindPort == 0 {
				mc.BindPort = nt.GetAutoBindPort()
				if mc.AdvertisePort == 0 {
					mc.AdvertisePort = mc.BindPort
				}
			}
			return newStoppable(nt), nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}
