package gossip

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/prefixring/prefixring/ring"
)

// eventually polls cond every few milliseconds until it holds, and fails
// the test with what after limit: on real sockets delivery is not
// scheduled by the test.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
	}
}

func hasEntry(n *Node, node string) bool {
	return slices.ContainsFunc(n.Status().Entries, func(e EntryStatus) bool { return e.Node == node })
}

// TestLoopbackReplicasJoinGossipEncryptedAndLeave runs the production
// transport (memberlist's UDP and TCP, which the node builds itself and
// wraps, transport.go) on real loopback sockets, port 0 chosen by the
// kernel (one replica advertises port 0 too, which means that port):
// three replicas with a key join through the first one's advertised
// address and receive each other's entries; a fourth with
// another key is refused by all; one that leaves is dropped by the others,
// who hold its tombstone, and its port is free again when Leave returns.
func TestLoopbackReplicasJoinGossipEncryptedAndLeave(t *testing.T) {
	ctx := context.Background()
	r0, _ := realNode(t, ctx, "r0", nil, nil)
	if _, port, _ := splitHostPort(r0.addr); port == 0 {
		t.Fatalf("r0 advertises %s: the port the kernel chose was not written back", r0.addr)
	}
	// r1 advertises its address with port 0, as memberlist takes it: the
	// port the kernel chose.
	r1, _ := realNodeWith(t, ctx, "r1", []string{r0.addr}, nil, func(c *Config) { c.AdvertiseAddr = "127.0.0.1:0" })
	if _, port, _ := splitHostPort(r1.addr); port == 0 {
		t.Fatalf("r1 advertises %s", r1.addr)
	}
	r2, _ := realNode(t, ctx, "r2", []string{r0.addr}, nil)
	nodes := []*Node{r0, r1, r2}
	eventually(t, 20*time.Second, "every replica a member of every other and holding its entry", func() bool {
		for _, n := range nodes {
			for _, m := range nodes {
				if _, ok := n.Members()[m.Name()]; !ok || !hasEntry(n, m.Name()) {
					return false
				}
			}
		}
		return true
	})

	intruder, _ := realNodeWith(t, ctx, "r3", []string{r0.addr}, nil, func(c *Config) { c.Key = []byte("fedcba9876543210") })
	// Start waited for the first join, which the key refused.
	if m := intruder.ml.NumMembers(); m != 1 {
		t.Fatalf("the replica with another key sees %d members", m)
	}
	for _, n := range nodes {
		if _, ok := n.Members()["r3"]; ok {
			t.Fatalf("%s took in the replica with another key", n.Name())
		}
	}

	addr := r2.addr
	start := time.Now()
	if err := r2.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("Leave took %v", time.Since(start))
	// Each port is bound afresh, UDP and TCP: the transport let go of both.
	udp, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("UDP %s still held after Leave: %v", addr, err)
	}
	_ = udp.Close()
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("TCP %s still held after Leave: %v", addr, err)
	}
	_ = tcp.Close()
	// The others drop it, and by its leave, not by their failure
	// detector: they hold its tombstone, which only a leave publishes. (A
	// wall-clock limit short of the failure detector's would tell the two
	// apart too, but not on a busy machine.)
	eventually(t, 10*time.Second, "r0 and r1 drop r2 and hold its tombstone", func() bool {
		for _, n := range nodes[:2] {
			if _, ok := n.Members()["r2"]; ok || !slices.ContainsFunc(n.Status().Entries, func(e EntryStatus) bool { return e.Node == "r2" && e.Left }) {
				return false
			}
		}
		return true
	})
}

// TestStartFailingAfterBindLeavesNothing: memberlist.Create can fail after
// the node bound its transport (here on an advertise address that is a
// name, not an IP, which Validate lets through and memberlist refuses).
// Start then shuts the transport down: no listener goroutine left, the
// port free.
func TestStartFailingAfterBindLeavesNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	bal, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{NodeName: "r0", BindAddr: "127.0.0.1:0", AdvertiseAddr: "replica.example:7946"}, bal, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "advertise address") {
		t.Fatalf("Start with a name to advertise: %v, want memberlist's refusal", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAnAdvertisedPortIsKeptWhenTheBindPortIsChosen: AdvertiseAddr is
// where the others reach this replica (a port forwarded to it, say), so
// its port stands when the bind port is left to the kernel; memberlist's
// own transport setup replaced it with the port bound.
func TestAnAdvertisedPortIsKeptWhenTheBindPortIsChosen(t *testing.T) {
	n, _ := realNodeWith(t, context.Background(), "r0", nil, nil, func(c *Config) { c.AdvertiseAddr = "127.0.0.1:17946" })
	if n.addr != "127.0.0.1:17946" {
		t.Fatalf("advertises %s, want the configured 127.0.0.1:17946", n.addr)
	}
}

// TestCloseEndsAStreamAPeerOpened: a peer opens a TCP stream to the
// replica and then writes nothing (a hung process, or a host black-holed
// once connected). memberlist's handler reads it until its TCPTimeout;
// Close must end it, as it ends the streams the replica dialed, rather
// than leave a goroutine reading a socket of a stopped node.
func TestCloseEndsAStreamAPeerOpened(t *testing.T) {
	before := goleak.IgnoreCurrent()
	const tcpTimeout = time.Minute
	bal, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{} // memberlist logs each stream it takes, at debug
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n, err := New(Config{NodeName: "r0", BindAddr: "127.0.0.1:0", Tune: func(c *memberlist.Config) { c.TCPTimeout = tcpTimeout }},
		bal, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	peer, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	eventually(t, 10*time.Second, "memberlist handling the peer's stream", func() bool {
		return strings.Contains(logs.String(), "Stream connection from="+peer.LocalAddr().String())
	})
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// With the peer's end still open: nothing of the node reads on.
	if err := goleak.Find(before); err != nil {
		t.Fatalf("after Close, with the peer's stream open (TCP timeout %v): %v", tcpTimeout, err)
	}
	// The replica's end is closed: the peer reads EOF, not a timeout.
	_ = peer.SetReadDeadline(time.Now().Add(tcpTimeout / 2))
	if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the peer's stream after Close: read %v, want EOF (TCP timeout %v)", err, tcpTimeout)
	}
}
