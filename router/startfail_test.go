package router

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/prefixring/prefixring/gossip"
)

// A start that fails half-way returns its error and leaves nothing behind:
// no goroutine, no listener it opened or was given, no gossip member.
func TestFailedStartLeavesNothing(t *testing.T) {
	taken := listen(t)
	defer taken.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	for name, tc := range map[string]struct {
		mutate      func(*Config)
		inject, adm bool // inject the API, the admin listener
	}{
		"endpoints file": {func(c *Config) { c.Sources.File = filepath.Join(t.TempDir(), "missing") }, true, true},
		"gossip bind":    {func(c *Config) { c.Gossip.BindAddr = udp.LocalAddr().String() }, true, true},
		"admin listen":   {func(c *Config) { c.AdminListen = taken.Addr().String() }, true, false},
		"api listen":     {func(c *Config) { c.Listen = taken.Addr().String() }, false, true},
	} {
		t.Run(name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			g := gossip.DefaultConfig()
			g.NodeName, g.BindAddr = "r0", "127.0.0.1:0"
			cfg := DefaultConfig()
			cfg.Sources.Static = []string{"http://127.0.0.1:1"} // never answers: no connection to wait out
			cfg.Gossip, cfg.GossipInsecure = &g, true
			cfg.Sketch.Enabled = true
			tc.mutate(&cfg)
			var opts Options
			var given []net.Listener
			if tc.inject {
				opts.Listener = listen(t)
				given = append(given, opts.Listener)
			}
			if tc.adm {
				opts.AdminListener = listen(t)
				given = append(given, opts.AdminListener)
			}
			r, err := New(cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Run(context.Background()); err == nil {
				t.Fatal("Run started")
			}
			for _, ln := range given {
				if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
					t.Errorf("listener %s left open: %v", ln.Addr(), err)
				}
			}
		})
	}
}

// Close during the drain stops the replica as Close always does, as a
// crash would to its peers: the gossip node stops without leaving, so it
// publishes no departure and waits for none to spread.
func TestCloseDuringDrainDoesNotLeave(t *testing.T) {
	g := gossip.DefaultConfig()
	g.NodeName, g.BindAddr = "r0", "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api, _, r, done := start(t, ctx, func(c *Config) {
		c.Gossip, c.GossipInsecure = &g, true
		c.DrainDelay = time.Hour
	})
	cancel()
	for {
		resp, err := http.Get(api + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		time.Sleep(time.Millisecond)
	}
	http.DefaultClient.CloseIdleConnections()
	r.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, e := range r.Node().Status().Entries {
		if e.Node == "r0" && e.Left {
			t.Fatal("Close during the drain left the cluster: peers were told of a departure, as at the end of a drain")
		}
	}
}
