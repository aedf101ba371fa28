package router

import (
	"fmt"
	"testing"

	"github.com/prefixring/prefixring/ring"
)

// TestSketchOffLeavesGroupsToTheKey: an unknown group share is a rare
// group's, kept on one engine (ring.Config.GroupSpread), and shares come
// from the sketch. With the sketch off every share stays unknown, so the
// replica turns the group spread off: requests sharing a system prompt
// are placed by their own keys, not stacked on one engine for good.
func TestSketchOffLeavesGroupsToTheKey(t *testing.T) {
	for _, sketch := range []bool{true, false} {
		cfg := DefaultConfig()
		cfg.Sources.Static = []string{"http://127.0.0.1:1"}
		cfg.Sketch.Enabled = sketch
		r, err := New(cfg, Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		eps := make([]ring.Endpoint, 8)
		for i := range eps {
			eps[i] = ring.Endpoint{ID: fmt.Sprintf("http://10.0.0.%d:8000", i+1), Healthy: true}
		}
		if err := r.Balancer().Update(eps); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for k := range uint64(100) {
			l, err := r.Balancer().Acquire(ring.Request{Key: k*0x9e3779b97f4a7c15 + 1, Keyed: true, Group: 42,
				SharedTokens: 2000, Tokens: 2100})
			if err != nil {
				t.Fatal(err)
			}
			l.Release()
			seen[l.Endpoint] = true
		}
		if want := map[bool]int{true: 1, false: 8}[sketch]; len(seen) != want {
			t.Errorf("sketch %v: one group's requests went to %d endpoints, want %d", sketch, len(seen), want)
		}
	}
}
