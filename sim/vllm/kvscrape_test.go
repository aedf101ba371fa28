package vllm

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixring/prefixring/upstream"
)

// A router's endpoint set, scraping real simulated engines over loopback,
// learns each one's KV capacity from its /metrics as soon as it appears.
func TestRouterLearnsSimulatedCapacity(t *testing.T) {
	var urls []string
	want := map[string]int64{}
	for _, blocks := range []int{1000, 2000} {
		cfg := DefaultConfig()
		cfg.Engine.NumBlocks = blocks
		reg := prometheus.NewRegistry()
		s, err := New(cfg, reg, reg)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
		want[srv.URL] = int64(blocks) * 16
	}
	set, err := upstream.NewSet(upstream.DefaultHealthConfig(), upstream.Options{KV: upstream.DefaultKVConfig()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { set.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if err := set.SetSource("static", urls); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		got := map[string]int64{}
		for _, e := range set.Snapshot().Endpoints {
			got[e.ID] = e.KVCapacity
		}
		if got[urls[0]] == want[urls[0]] && got[urls[1]] == want[urls[1]] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("capacities %v, want %v", got, want)
		}
		<-tick.C
	}
}
