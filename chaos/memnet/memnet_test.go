package memnet

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1)
		a, _ := n.Transport("10.0.0.1:1")
		b, _ := n.Transport("10.0.0.2:1")
		recv := func() bool {
			select {
			case <-b.PacketCh():
				return true
			default:
				return false
			}
		}
		_, _ = a.WriteTo([]byte("x"), b.Addr())
		if !recv() {
			t.Fatal("packet not delivered")
		}
		n.Crash(b.Addr())
		if _, _ = a.WriteTo([]byte("x"), b.Addr()); recv() {
			t.Fatal("packet reached a crashed node")
		}
		if _, err := a.DialTimeout(b.Addr(), time.Second); err == nil {
			t.Fatal("dial to a crashed node succeeded")
		}
		n.Restore(b.Addr())
		n.Partition([]string{a.Addr()})
		if _, err := a.DialTimeout(b.Addr(), time.Second); err == nil {
			t.Fatal("dial across a partition succeeded")
		}
		n.Heal()
		n.SetLatency(50*time.Millisecond, 0)
		_, _ = a.WriteTo([]byte("x"), b.Addr())
		if recv() {
			t.Fatal("delayed packet arrived at once")
		}
		time.Sleep(60 * time.Millisecond)
		if !recv() {
			t.Fatal("delayed packet never arrived")
		}
		// Sends never block, even when nobody reads.
		for range 5000 {
			_, _ = a.WriteTo([]byte("x"), b.Addr())
		}
		time.Sleep(time.Second)
		if st := n.Stats(); st.Dropped == 0 || st.Packets < 1024 {
			t.Fatalf("stats %+v", st)
		}
		c, err := a.DialTimeout(b.Addr(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		s := <-b.StreamCh()
		go func() { _, _ = c.Write([]byte("hello")) }()
		buf := make([]byte, 5)
		if _, err := s.Read(buf); err != nil || string(buf) != "hello" {
			t.Fatalf("stream read %q %v", buf, err)
		}
		n.Crash(a.Addr())
		if _, err := s.Read(buf); err == nil {
			t.Fatal("stream survived a crash")
		}
		_ = a.Shutdown()
		_ = b.Shutdown()
	})
}

// TestBlackHole: a black-holed address answers nothing and resets nothing,
// as a host that died without closing its sockets: packets vanish, a dial
// hangs for its whole timeout, and an open stream's writes are swallowed
// while its reads wait for the deadline.
func TestBlackHole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1)
		a, _ := n.Transport("10.0.0.1:1")
		b, _ := n.Transport("10.0.0.2:1")
		c, err := a.DialTimeout(b.Addr(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		s := <-b.StreamCh()
		n.BlackHole(b.Addr())
		if _, _ = a.WriteTo([]byte("x"), b.Addr()); len(b.PacketCh()) != 0 {
			t.Fatal("packet reached a black-holed node")
		}
		start := time.Now()
		if _, err := a.DialTimeout(b.Addr(), 3*time.Second); err == nil {
			t.Fatal("dial to a black-holed node succeeded")
		} else if ne, ok := err.(interface{ Timeout() bool }); !ok || !ne.Timeout() {
			t.Fatalf("dial error %v is not a timeout", err)
		}
		if took := time.Since(start); took != 3*time.Second {
			t.Fatalf("dial failed after %v, want its 3s timeout", took)
		}
		if k, err := c.Write([]byte("hello")); err != nil || k != 5 {
			t.Fatalf("write to a black hole: %d %v (want swallowed)", k, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		start = time.Now()
		if _, err := c.Read(make([]byte, 1)); err == nil || time.Since(start) != 2*time.Second {
			t.Fatalf("read from a black hole: %v after %v", err, time.Since(start))
		}
		n.Restore(b.Addr())
		if _, err := a.DialTimeout(b.Addr(), time.Second); err != nil {
			t.Fatalf("dial after restore: %v", err)
		}
		<-b.StreamCh()
		_ = s.Close()
		_ = a.Shutdown()
		_ = b.Shutdown()
	})
}
