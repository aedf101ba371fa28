package gossip

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixring/prefixring/gossip/memnet"
	"github.com/prefixring/prefixring/ring"
)

// TestMeasureBandwidth measures what the protocol costs on the wire
// (memberlist's own probes and gossip included, encryption on) with every
// replica's counts changing every interval, the worst case. It is a
// measurement, not a check: GOSSIP_MEASURE=1 go test -run MeasureBandwidth -v ./gossip
func TestMeasureBandwidth(t *testing.T) {
	if os.Getenv("GOSSIP_MEASURE") == "" {
		t.Skip("set GOSSIP_MEASURE=1")
	}
	for _, c := range []struct{ replicas, endpoints int }{{8, 64}, {50, 500}} {
		t.Run(fmt.Sprintf("%dx%d", c.replicas, c.endpoints), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { measureBandwidth(t, c.replicas, c.endpoints) })
		})
	}
}

func measureBandwidth(t *testing.T, replicas, endpoints int) {
	net := memnet.New(1)
	eps := make([]string, endpoints)
	for i := range eps {
		eps[i] = fmt.Sprintf("http://10.%d.%d.%d:8000", i/65536, i/256%256, i%256)
	}
	var nodes []*Node
	var bals []*ring.Balancer
	for i := range replicas {
		addr := fmt.Sprintf("10.0.%d.%d:7946", i/256, i%256+1)
		tr, _ := net.Transport(addr)
		bal, _ := ring.NewBalancer(ring.DefaultConfig())
		n, err := New(Config{NodeName: fmt.Sprintf("prefixring-%02d", i), BindAddr: addr,
			Join: []string{"10.0.0.1:7946"}, Key: []byte("0123456789abcdef"), Transport: tr},
			bal, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		n.ObserveEndpoints(eps)
		if err := n.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		nodes, bals = append(nodes, n), append(bals, bal)
	}
	time.Sleep(10 * time.Second)
	// Churn: every replica changes ~10% of its leases every interval, with
	// a mean of 10 in flight per endpoint cluster-wide.
	r := rand.New(rand.NewPCG(1, 2))
	held := make([][]ring.Lease, replicas)
	perReplica := 10 * endpoints / replicas
	churn := func() {
		for i, b := range bals {
			for len(held[i]) < perReplica {
				l, _ := b.Acquire(ring.Request{Key: r.Uint64(), Keyed: true})
				held[i] = append(held[i], l)
			}
			for range max(1, perReplica/10) {
				k := r.IntN(len(held[i]))
				held[i][k].Release()
				held[i][k], _ = b.Acquire(ring.Request{Key: r.Uint64(), Keyed: true})
			}
		}
	}
	churn()
	time.Sleep(2 * time.Second)
	before := net.Stats()
	const window = 10 * time.Second
	for range window / (100 * time.Millisecond) {
		churn()
		time.Sleep(100 * time.Millisecond)
	}
	after := net.Stats()
	pkts := float64(after.PacketBytes-before.PacketBytes) / window.Seconds()
	strm := float64(after.StreamBytes-before.StreamBytes) / window.Seconds()
	t.Logf("%d replicas x %d endpoints: UDP %.0f B/s (%.0f pkt/s), TCP %.0f B/s, total %.2f MB/s cluster, %.1f KB/s per replica out; members %d",
		replicas, endpoints, pkts, float64(after.Packets-before.Packets)/window.Seconds(), strm,
		(pkts+strm)/1e6, (pkts+strm)/float64(replicas)/1e3, nodes[0].ml.NumMembers())
	for i, n := range nodes {
		for k := range held[i] {
			held[i][k].Release()
		}
		_ = n.Close()
	}
	time.Sleep(time.Minute)
}
