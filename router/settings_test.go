package router

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prefixring/prefixring/gossip"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/upstream"
)

// readyz returns /readyz's status and body.
func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSettingsMismatchFailsReadyzOnlyWhenStrict: two replicas, one on
// --load-signal tokens and one on requests, refuse each other's counts and
// say so; /readyz fails only on the replica started with
// --gossip-strict-settings, and the other stays ready, degraded. Each
// used to read the other's counts in its own unit, and nothing noticed.
func TestSettingsMismatchFailsReadyzOnlyWhenStrict(t *testing.T) {
	key := []byte("0123456789abcdef")
	ctx, cancel := context.WithCancel(context.Background())
	var dones []chan error
	defer func() {
		cancel()
		for _, d := range dones {
			<-d
		}
	}()
	ga := gossip.DefaultConfig()
	ga.NodeName, ga.BindAddr, ga.Key = "strict", "127.0.0.1:0", key
	apiA, adminA, a, done := start(t, ctx, func(c *Config) { c.Gossip, c.GossipStrictSettings = &ga, true })
	dones = append(dones, done)
	gb := gossip.DefaultConfig()
	gb.NodeName, gb.BindAddr, gb.Key = "lenient", "127.0.0.1:0", key
	gb.Join = []string{a.Node().Members()["strict"]}
	apiB, _, b, done := start(t, ctx, func(c *Config) {
		c.Gossip = &gb
		c.Ring.Signal, c.Ring.MinBound = ring.SignalRequests, ring.DefaultMinRequests
	})
	dones = append(dones, done)

	deadline := time.Now().Add(10 * time.Second)
	for len(a.Node().SettingsMismatch()) == 0 || len(b.Node().SettingsMismatch()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no mismatch reported: strict %+v, lenient %+v", a.Node().Status(), b.Node().Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := readyz(t, apiA); code != http.StatusServiceUnavailable || !strings.Contains(body, "settings") {
		t.Errorf("strict replica's /readyz: %d %s", code, body)
	}
	if code, body := readyz(t, apiB); code != http.StatusOK || !strings.Contains(body, "degraded") || !strings.Contains(body, "settings") {
		t.Errorf("lenient replica's /readyz: %d %s", code, body)
	}
	resp, err := http.Get(adminA + "/debug/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v gossip.ClusterStatus
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(v.Settings, "load-signal=tokens") || len(v.SettingsMismatch) != 1 ||
		!strings.Contains(v.SettingsMismatch[0].Settings, "load-signal=requests") {
		t.Errorf("/debug/cluster: settings %q, mismatch %+v", v.Settings, v.SettingsMismatch)
	}
}

// TestSettingsSummaryNamesWhatMustMatch: every setting that changes what a
// count means or where a key goes changes the summary; one that does not
// (a timeout) leaves it alone.
func TestSettingsSummaryNamesWhatMustMatch(t *testing.T) {
	base := DefaultConfig()
	sum := SettingsSummary(base)
	for name, mutate := range map[string]func(*Config){
		"load signal":   func(c *Config) { c.Ring.Signal = ring.SignalRequests },
		"load factor":   func(c *Config) { c.Ring.LoadFactor = 2 },
		"min bound":     func(c *Config) { c.Ring.MinBound = 4 },
		"placement":     func(c *Config) { c.Ring.Placement.Partitions++ },
		"group spread":  func(c *Config) { c.Ring.GroupSpread = 2 },
		"group memory":  func(c *Config) { c.Ring.GroupMemory = 0.5 },
		"kv average":    func(c *Config) { c.Ring.KVAverage = !c.Ring.KVAverage },
		"kv min bound":  func(c *Config) { c.Ring.KVMinBound = 9 },
		"kv scrape":     func(c *Config) { c.KV.Scrape = !c.KV.Scrape },
		"prefix chars":  func(c *Config) { c.Key.MaxChars++ },
		"prompt chars":  func(c *Config) { c.Key.PromptChars++ },
		"shared chars":  func(c *Config) { c.Key.SharedChars++ },
		"sketch":        func(c *Config) { c.Sketch.Enabled = false },
		"sketch fanout": func(c *Config) { c.Sketch.Fanout++ },
		"policy":        func(c *Config) { c.Policy = "random" },
		"session":       func(c *Config) { c.Proxy.SessionHeader = "X-Other" },
		"kv capacity":   func(c *Config) { c.KV.Capacity, _ = upstream.ParseKVCapacities([]string{"http://10.0.0.1:8000=4096"}) },
	} {
		c := base
		mutate(&c)
		if SettingsSummary(c) == sum {
			t.Errorf("%s: the summary did not change: %s", name, sum)
		}
	}
	c := base
	c.Proxy.UpstreamTimeout++
	if SettingsSummary(c) != sum {
		t.Error("a timeout changed the summary")
	}
}

// deploy/kubernetes_test.go (a module of its own, which does not import
// this one) counts the gossip leave in the router's grace period as 5 s.
func TestLeaveTimeoutIsTheDeploymentsFigure(t *testing.T) {
	if LeaveTimeout != 5*time.Second {
		t.Fatalf("LeaveTimeout is %v: change routerLeaveTimeout in deploy/kubernetes_test.go, and the grace period if it no longer covers it", LeaveTimeout)
	}
}
