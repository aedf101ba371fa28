package router

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prefixring/prefixring/workers"
)

// The workers policy from the config reaches the set, and the ops it
// drops from peers are counted on /metrics.
func TestWorkersPolicyIsWired(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, _, r, done := start(t, ctx, func(c *Config) {
		c.Workers.Policy.MaxWorkers = 1
		c.Workers.Policy.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	})
	ws := r.Workers()
	if _, err := ws.Register("http://192.168.0.1:8000"); !errors.Is(err, workers.ErrInvalidURL) {
		t.Fatalf("outside the allowlist: %v", err)
	}
	if _, err := ws.Register("http://10.0.0.1:8000"); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Register("http://10.0.0.2:8000"); !errors.Is(err, workers.ErrTooManyWorkers) {
		t.Fatalf("past the cap: %v", err)
	}
	st := ws.Ops()[0].Stamp
	ws.Merge([]workers.Op{{URL: "http://169.254.169.254", Stamp: st, Origin: "peer"}, {URL: "http://10.0.0.3:8000", Stamp: st, Origin: "peer"}})
	want := `
# HELP prefixring_workers_dropped_ops_total Workers-set ops heard from peers and not applied, by reason: invalid (the URL policy refused it, or its record did not decode), over_cap (an add past --max-workers: held, not routed, until a removal makes room) or future (stamped more than an hour past this replica's clock).
# TYPE prefixring_workers_dropped_ops_total counter
prefixring_workers_dropped_ops_total{reason="future"} 0
prefixring_workers_dropped_ops_total{reason="invalid"} 1
prefixring_workers_dropped_ops_total{reason="over_cap"} 1
`
	if err := testutil.GatherAndCompare(r.Registry(), strings.NewReader(want), "prefixring_workers_dropped_ops_total"); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWorkersPolicyValidated(t *testing.T) {
	c := DefaultConfig()
	c.Sources.Static = []string{"http://127.0.0.1:1"}
	if c.Workers.Policy.MaxWorkers != workers.DefaultMaxWorkers || c.Workers.Policy.MaxURLBytes != workers.DefaultMaxURLBytes {
		t.Fatalf("default policy %+v", c.Workers.Policy)
	}
	c.Workers.Policy.MaxWorkers = 0
	if c.Validate() == nil {
		t.Fatal("max workers 0 accepted")
	}
	c.Workers.Mode = WorkersOff
	if err := c.Validate(); err != nil {
		t.Fatalf("the policy of an API that is off: %v", err)
	}
}
