package gossip_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixring/prefixring/gossip"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/upstream"
)

// TestMeasureRebuildStall measures how long the gossip node's lock (which
// its publish loop, its merge loop and memberlist's push/pull LocalState
// take) is held while a new endpoint set's ring is built, at 256 and 512
// endpoints: with the verdict applied on the node's goroutine, as it used
// to be (the default sink, the node's own balancer), and with the endpoint set as the sink,
// which builds the ring on its own goroutine. It is a measurement, not a
// check: GOSSIP_MEASURE=1 go test -run MeasureRebuildStall -v ./gossip
func TestMeasureRebuildStall(t *testing.T) {
	if os.Getenv("GOSSIP_MEASURE") == "" {
		t.Skip("set GOSSIP_MEASURE=1")
	}
	for _, n := range []int{256, 512} {
		for _, mode := range []string{"balancer-sink (before)", "upstream.Set sink"} {
			t.Run(fmt.Sprintf("%d/%s", n, mode), func(t *testing.T) {
				stall, build := measureStall(t, n, mode != "upstream.Set sink")
				t.Logf("%d endpoints, %s: longest wait for the node's lock %v; ring applied after %v", n, mode, stall, build)
			})
		}
	}
}

func measureStall(t *testing.T, n int, sync_ bool) (stall, build time.Duration) {
	bal, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := gossip.Config{NodeName: "r0", BindAddr: "127.0.0.1:0"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var set *upstream.Set
	if !sync_ {
		set, err = upstream.NewSet(upstream.DefaultHealthConfig(), upstream.Options{})
		if err != nil {
			t.Fatal(err)
		}
		set.Subscribe(func(_, cur *upstream.Snapshot) {
			eps := make([]ring.Endpoint, len(cur.Endpoints))
			for i, e := range cur.Endpoints {
				eps[i] = ring.Endpoint{ID: e.ID, Healthy: e.Healthy}
			}
			_ = bal.Update(eps)
		})
		go set.Dispatch(ctx)
		cfg.Sink = set
	}
	node, err := gossip.New(cfg, bal, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set.SetArbiter(node)
	}
	if err := node.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("http://10.1.%d.%d:8000", i/256, i%256)
	}
	var worst atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() { // memberlist's push/pull asks for our state
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			node.Status() // takes the node's lock, as LocalState does
			if d := int64(time.Since(start)); d > worst.Load() {
				worst.Store(d)
			}
			time.Sleep(time.Millisecond)
		}
	})
	start := time.Now()
	if set != nil {
		_ = set.SetSource("static", ids)
	} else {
		node.Vote(1, ids, nil, nil, nil)
	}
	for {
		st, _ := bal.Status()
		if len(st) == n {
			break
		}
		time.Sleep(time.Millisecond)
	}
	build = time.Since(start)
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	return time.Duration(worst.Load()), build
}
