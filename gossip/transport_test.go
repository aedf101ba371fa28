package gossip

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"
)

// gatedDialer is a transport whose every dial waits for a token on gate,
// then opens a pipe and hands its far end to far. It counts Shutdowns.
type gatedDialer struct {
	memberlist.NodeAwareTransport // nil: stoppable calls only what is below
	gate                          chan struct{}
	far                           chan net.Conn
	shutdowns                     atomic.Int32
}

func (d *gatedDialer) DialAddressTimeout(memberlist.Address, time.Duration) (net.Conn, error) {
	<-d.gate
	near, far := net.Pipe()
	d.far <- far
	return near, nil
}

func (d *gatedDialer) Shutdown() error {
	d.shutdowns.Add(1)
	return nil
}

// closedFar reports whether the near end of pipe far was closed: a read
// ends at once with EOF, rather than at its deadline.
func closedFar(far net.Conn) bool {
	_ = far.SetReadDeadline(time.Now().Add(time.Second))
	_, err := far.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

// TestStoppableShutdownEndsDialsAndStreams: Shutdown fails a dial in
// flight at once, closes the stream dialed before it, and the one the
// abandoned dial opens after it; later dials fail without dialing;
// closing a stream after Shutdown and a second Shutdown are harmless, and
// the wrapped transport is shut down once.
func TestStoppableShutdownEndsDialsAndStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &gatedDialer{gate: make(chan struct{}, 1), far: make(chan net.Conn, 2)}
		s := newStoppable(d)
		d.gate <- struct{}{}
		open, err := s.DialTimeout("10.0.0.2:7946", time.Second) // memberlist's DialTimeout: the same path
		if err != nil {
			t.Fatal(err)
		}
		openFar := <-d.far
		pending := make(chan error, 1)
		go func() {
			_, err := s.DialAddressTimeout(memberlist.Address{Addr: "10.0.0.3:7946"}, time.Second)
			pending <- err
		}()
		synctest.Wait() // the second dial waits at the gate
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case err := <-pending:
			if !errors.Is(err, errStopped) {
				t.Fatalf("the dial in flight at Shutdown returned %v, want errStopped", err)
			}
		default:
			t.Fatal("the dial in flight still waits after Shutdown")
		}
		if !closedFar(openFar) {
			t.Fatal("the stream dialed before Shutdown is still open")
		}
		_ = open.Close()     // after Shutdown: nothing left to forget it from
		d.gate <- struct{}{} // the abandoned dial connects now
		if !closedFar(<-d.far) {
			t.Fatal("the stream the abandoned dial opened after Shutdown is open")
		}
		if _, err := s.DialTimeout("10.0.0.2:7946", time.Second); !errors.Is(err, errStopped) {
			t.Fatalf("a dial after Shutdown returned %v, want errStopped", err)
		}
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
		if n := d.shutdowns.Load(); n != 1 {
			t.Fatalf("the wrapped transport was shut down %d times, want 1", n)
		}
	})
}

// handingTransport hands streams over an unbuffered channel, as
// memberlist's NetTransport does, and one more at Shutdown, as its
// listener may while Shutdown waits for it: a stream accepted just
// before.
type handingTransport struct {
	memberlist.NodeAwareTransport // nil: stoppable calls only what is below
	streams                       chan net.Conn
	lateFar                       net.Conn // the far end of the stream handed at Shutdown
}

func (h *handingTransport) StreamCh() <-chan net.Conn { return h.streams }

func (h *handingTransport) Shutdown() error {
	near, far := net.Pipe()
	h.lateFar = far
	h.streams <- near
	return nil
}

// TestStoppableShutdownEndsAcceptedStreams: a stream a peer opened,
// handed to memberlist, is closed at Shutdown, as the ones dialed are;
// the wrapped transport may still hand one over while it shuts down, and
// that one is taken and closed rather than left to block its Shutdown.
func TestStoppableShutdownEndsAcceptedStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &handingTransport{streams: make(chan net.Conn)}
		s := newStoppable(h)
		near, far := net.Pipe()
		go func() { h.streams <- near }()
		accepted := <-s.StreamCh() // memberlist's handler would read it until its TCPTimeout
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
		if !closedFar(far) {
			t.Fatal("the stream a peer opened before Shutdown is still open")
		}
		if !closedFar(h.lateFar) {
			t.Fatal("the stream handed over during Shutdown is open")
		}
		_ = accepted.Close() // memberlist's handler ends: harmless after Shutdown
		synctest.Wait()      // and nothing of the wrapper is left running
	})
}
