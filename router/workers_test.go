package router

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
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

// A worker held out past --max-workers (a peer registered it before
// hearing of the others) is listed by GET /workers, not healthy since it
// is not routed, and DELETE removes it: otherwise a registrar could not
// take it back, and it would be routed once a removal made room.
func TestWorkersAPIListsAndRemovesHeldOutWorkers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	_, admin, r, done := start(t, ctx, func(c *Config) { c.Workers.Policy.MaxWorkers = 1 })
	defer func() { cancel(); <-done }()
	defer http.DefaultClient.CloseIdleConnections()
	ws := r.Workers()
	if _, err := ws.Register("http://10.0.0.1:8000"); err != nil {
		t.Fatal(err)
	}
	held := "http://10.0.0.2:8000"
	ws.Merge([]workers.Op{{URL: held, Stamp: ws.Ops()[0].Stamp + 1, Origin: "peer"}})
	if ws.Has(held) {
		t.Fatal("the add past the cap is routed")
	}
	resp, err := http.Get(admin + "/workers")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Workers []struct {
			URL       string `json:"url"`
			IsHealthy bool   `json:"is_healthy"`
		} `json:"workers"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	_ = resp.Body.Close()
	if err != nil || len(list.Workers) != 2 || list.Workers[1].URL != held || list.Workers[1].IsHealthy {
		t.Fatalf("GET /workers: %+v %v, want both, %s not healthy", list, err, held)
	}
	req, _ := http.NewRequest(http.MethodDelete, admin+"/workers/"+url.QueryEscape(held), nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || !slices.ContainsFunc(ws.Ops(), func(op workers.Op) bool { return op.URL == held && op.Removed }) {
		t.Fatalf("DELETE of the held worker: %d, ops %v", resp.StatusCode, ws.Ops())
	}
}
