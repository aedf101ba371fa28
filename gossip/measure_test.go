package gossip

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixring/prefixring/chaos/memnet"
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
	for _, c := range []struct {
		replicas, endpoints int
		seed                string
	}{{8, 64, "ip"}, {50, 500, "ip"}, {50, 500, "dns"}, {50, 500, "dns-join-all"}} {
		t.Run(fmt.Sprintf("%dx%d/%s", c.replicas, c.endpoints, c.seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { measureBandwidth(t, c.replicas, c.endpoints, c.seed) })
		})
	}
}

// allReplicas resolves the headless Service name to every replica, as
// Kubernetes DNS does.
type allReplicas []string

func (a allReplicas) LookupHost(context.Context, string) ([]string, error) { return a, nil }

// measureBandwidth: seed "ip" joins through one replica's address; "dns"
// through a name resolving to every replica (the Kubernetes setup), with
// this build's rejoin (only peers not yet members, at most 3); and
// "dns-join-all" adds what the rejoin used to do: every replica joining
// every address the name resolves to, every rejoin interval.
func measureBandwidth(t *testing.T, replicas, endpoints int, seed string) {
	net := memnet.New(1)
	eps := make([]string, endpoints)
	for i := range eps {
		eps[i] = fmt.Sprintf("http://10.%d.%d.%d:8000", i/65536, i/256%256, i%256)
	}
	var nodes []*Node
	var bals []*ring.Balancer
	var ips allReplicas
	for i := range replicas {
		ips = append(ips, fmt.Sprintf("10.0.%d.%d", i/256, i%256+1))
	}
	for i := range replicas {
		addr := ips[i] + ":7946"
		tr, _ := net.Transport(addr)
		bal, _ := ring.NewBalancer(ring.DefaultConfig())
		join := []string{"10.0.0.1:7946"}
		if seed != "ip" {
			join = []string{"prefixring-headless.default.svc"}
		}
		n, err := New(Config{NodeName: fmt.Sprintf("prefixring-%02d", i), BindAddr: addr,
			Join: join, Resolver: ips, Key: []byte("0123456789abcdef"), Transport: tr},
			bal, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		n.voteEndpoints(eps)
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
	stopOld := make(chan struct{})
	if seed == "dns-join-all" {
		var all []string
		for _, ip := range ips {
			all = append(all, ip+":7946")
		}
		for _, n := range nodes {
			go func() {
				t := time.NewTicker(n.cfg.RejoinInterval)
				defer t.Stop()
				for {
					select {
					case <-stopOld:
						return
					case <-t.C:
						_, _ = n.ml.Join(all)
					}
				}
			}()
		}
	}
	churn()
	time.Sleep(2 * time.Second)
	before := net.Stats()
	const window = 30 * time.Second // three rejoin intervals
	iv := DefaultConfig().Interval  // counts change at every tick: the worst case
	for range window / iv {
		churn()
		time.Sleep(iv)
	}
	after := net.Stats()
	pkts := float64(after.PacketBytes-before.PacketBytes) / window.Seconds()
	strm := float64(after.StreamBytes-before.StreamBytes) / window.Seconds()
	close(stopOld)
	t.Logf("%s seed, %d replicas x %d endpoints: UDP %.0f B/s (%.0f pkt/s), TCP %.0f B/s, total %.2f MB/s cluster, %.1f KB/s per replica out; members %d",
		seed, replicas, endpoints, pkts, float64(after.Packets-before.Packets)/window.Seconds(), strm,
		(pkts+strm)/1e6, (pkts+strm)/float64(replicas)/1e3, nodes[0].ml.NumMembers())
	for i, n := range nodes {
		for k := range held[i] {
			held[i][k].Release()
		}
		_ = n.Close()
	}
	time.Sleep(time.Minute)
}
