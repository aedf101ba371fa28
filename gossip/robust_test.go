package gossip

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prefixring/prefixring/chaos/memnet"
	"github.com/prefixring/prefixring/ring"
)

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// realNode starts a node on a real loopback socket.
func realNode(t *testing.T, ctx context.Context, name string, join []string, logs *syncBuffer) (*Node, *prometheus.Registry) {
	t.Helper()
	return realNodeWith(t, ctx, name, join, logs, nil)
}

// realNodeWith is realNode with its config adjusted by tweak (if set).
func realNodeWith(t *testing.T, ctx context.Context, name string, join []string, logs *syncBuffer, tweak func(*Config)) (*Node, *prometheus.Registry) {
	t.Helper()
	bal, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var log *slog.Logger
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	reg := prometheus.NewRegistry()
	cfg := Config{NodeName: name, BindAddr: "127.0.0.1:0", Join: join, Key: []byte("0123456789abcdef"),
		Tune: func(c *memberlist.Config) { c.TCPTimeout = 2 * time.Second }}
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := New(cfg, bal, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n, reg
}

// muteSeed returns, on mem, a seed at 10.0.0.1 that accepts every
// stream and reads none, a transport for the replica under test at
// 10.0.0.2, and its balancer.
func muteSeed(t *testing.T, mem *memnet.Network) (mute, tr *memnet.Transport, bal *ring.Balancer) {
	t.Helper()
	mute, err := mem.Transport("10.0.0.1:7946")
	if err != nil {
		t.Fatal(err)
	}
	if tr, err = mem.Transport("10.0.0.2:7946"); err != nil {
		t.Fatal(err)
	}
	if bal, err = ring.NewBalancer(ring.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	return mute, tr, bal
}

// TestStartBoundsTheJoin: a peer that accepts the connection and never
// answers does not hold up Start beyond its context (memberlist's Join
// takes none and would wait its whole TCP timeout). In a bubble on
// memnet: on loopback the test allowed Start a second against its 300 ms
// context, and a busy machine could take longer than that on its own.
func TestStartBoundsTheJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mute, tr, bal := muteSeed(t, memnet.New(1))
		defer mute.Shutdown()
		const tcpTimeout = time.Minute
		n, err := New(Config{NodeName: "r0", BindAddr: tr.Addr(), Join: []string{mute.Addr()}, Key: []byte("0123456789abcdef"), Transport: tr,
			Tune: func(c *memberlist.Config) { c.TCPTimeout = tcpTimeout }}, bal, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = n.Start(ctx)
		took := time.Since(start)
		defer func() {
			_ = n.Close()
			time.Sleep(tcpTimeout) // the join's stream times out: a bubble must end with no goroutine left
		}()
		if err != nil {
			t.Fatal(err)
		}
		if took != 300*time.Millisecond {
			t.Fatalf("Start took %v with a 300 ms context (TCP timeout %v)", took, tcpTimeout)
		}
	})
}

// TestGarbageOnTheGossipPortIsCountedNotLoggedPerPacket: memberlist logs
// one ERROR line per undecryptable packet; 200 of them make at most a line
// or two, and every one is counted.
func TestGarbageOnTheGossipPortIsCountedNotLoggedPerPacket(t *testing.T) {
	logs := &syncBuffer{}
	n, reg := realNode(t, context.Background(), "r0", nil, logs)
	conn, err := net.Dial("udp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 200 {
		_, _ = conn.Write([]byte(strings.Repeat("garbage!", 1+i%7)))
	}
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(n.met.logLines.WithLabelValues("ERROR")) < 200 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := testutil.ToFloat64(n.met.logLines.WithLabelValues("ERROR")); got < 200 {
		t.Fatalf("counted %v of 200 bad packets", got)
	}
	if lines := strings.Count(logs.String(), "level=ERROR"); lines == 0 || lines > 2 {
		t.Fatalf("%d ERROR lines for 200 bad packets:\n%s", lines, logs.String())
	}
	_ = reg
}
