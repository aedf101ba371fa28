package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/gossip/core"
	"github.com/prefixring/prefixring/router"
)

// runServeFlags parses serve's flags (gossip's included) from args and
// returns routerConfig's answer.
func runServeFlags(t *testing.T, args ...string) (cfg router.Config, warnings []string, err error) {
	t.Helper()
	app := &cli.App{Flags: append(serveFlags(), gossipFlags()...), Action: func(c *cli.Context) error {
		cfg, warnings, err = routerConfig(c)
		return nil
	}}
	if rerr := app.Run(append([]string{"prefixring", "--endpoints", "http://127.0.0.1:1"}, args...)); rerr != nil {
		t.Fatal(rerr)
	}
	return cfg, warnings, err
}

// Flags that cannot act are said at start, not silently ignored: the gossip
// flags without --gossip-bind (refused where they would change who routes
// where, warned about otherwise), --group-spread with the sketch off,
// --group-memory with no group spread to cap; and
// gossip without a key refuses to start unless --gossip-insecure.
func TestServeFlagsSayWhatCannotAct(t *testing.T) {
	if _, w, err := runServeFlags(t); err != nil || len(w) != 0 {
		t.Fatalf("defaults: %v %v", w, err)
	}
	kinds := map[string]cli.Flag{}
	for _, fl := range gossipFlags() {
		kinds[fl.Names()[0]] = fl
	}
	for _, f := range gossipWarned {
		arg := "--" + f + "=2s"
		switch kinds[f].(type) {
		case *cli.BoolFlag:
			arg = "--" + f
		case *cli.StringFlag:
			arg = "--" + f + "=x"
		case *cli.Float64Flag:
			arg = "--" + f + "=500"
		}
		_, w, err := runServeFlags(t, arg)
		if err != nil || !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "--"+f) }) {
			t.Errorf("%s without --gossip-bind: warnings %v, err %v", arg, w, err)
		}
	}
	for _, f := range []string{"--join=x:1", "--gossip-view=exact", "--gossip-insecure"} {
		if _, _, err := runServeFlags(t, f); err == nil || !strings.Contains(err.Error(), "needs --gossip-bind") {
			t.Errorf("%s without --gossip-bind: %v", f, err)
		}
	}
	if _, w, _ := runServeFlags(t, "--sketch=false", "--group-spread=4"); len(w) != 1 || !strings.Contains(w[0], "--group-spread") {
		t.Errorf("--group-spread with the sketch off: %v", w)
	}
	if _, w, _ := runServeFlags(t, "--group-spread=0", "--group-memory=0.5"); len(w) != 1 || !strings.Contains(w[0], "--group-memory") {
		t.Errorf("--group-memory with the group spread off: %v", w)
	}
	if cfg, w, err := runServeFlags(t, "--group-memory=0.5"); err != nil || len(w) != 0 || cfg.Ring.GroupMemory != 0.5 {
		t.Errorf("--group-memory=0.5: %v %v %v", cfg.Ring.GroupMemory, w, err)
	}
	if _, _, err := runServeFlags(t, "--group-memory=-1"); err == nil || !strings.Contains(err.Error(), "group memory") {
		t.Errorf("--group-memory=-1: %v", err)
	}
	if _, _, err := runServeFlags(t, "--gossip-bind=127.0.0.1:0"); !errors.Is(err, router.ErrGossipKeyMissing) {
		t.Errorf("gossip without a key: %v", err)
	}
	cfg, _, err := runServeFlags(t, "--gossip-bind=127.0.0.1:0", "--gossip-insecure")
	if err != nil || !cfg.GossipInsecure || cfg.Gossip == nil || cfg.Gossip.Key != nil {
		t.Errorf("--gossip-insecure: %+v %v", cfg.Gossip, err)
	}
	cfg, w, err := runServeFlags(t, "--gossip-bind=127.0.0.1:0", "--gossip-insecure", "--gossip-view=aligned", "--gossip-apply-lag=120ms")
	if err != nil || len(w) != 0 || cfg.Gossip.View != core.ViewAligned || cfg.Gossip.ApplyLag != 120*time.Millisecond {
		t.Errorf("--gossip-view aligned --gossip-apply-lag 120ms: %v %v %v", cfg.Gossip, w, err)
	}
	if _, _, err := runServeFlags(t, "--gossip-bind=127.0.0.1:0", "--gossip-insecure", "--gossip-view=aligned", "--gossip-apply-lag=5s"); err == nil {
		t.Error("an apply lag of --gossip-stale-after accepted")
	}
	if _, w, err := runServeFlags(t, "--gossip-bind=127.0.0.1:0", "--gossip-insecure", "--gossip-apply-lag=120ms"); err != nil || len(w) != 1 || !strings.Contains(w[0], "--gossip-view aligned") {
		t.Errorf("--gossip-apply-lag in the default view: warnings %v, err %v", w, err)
	}
	// The heartbeat and the time to forget a silent replica follow the
	// flags that must stay within them. Until stop 40 they were fixed at
	// 1 s and 1 min, so --gossip-interval above 1s and
	// --gossip-stale-after above 1m were refused with errors that named
	// neither flag.
	if cfg, _, err := runServeFlags(t, "--gossip-bind=127.0.0.1:0", "--gossip-insecure", "--gossip-stale-after=2m"); err != nil ||
		cfg.Gossip.StaleAfter != 2*time.Minute || cfg.Gossip.ForgetAfter < 2*time.Minute {
		t.Errorf("--gossip-stale-after 2m: %+v, %v", cfg.Gossip, err)
	}
	if cfg, _, err := runServeFlags(t, "--gossip-bind=127.0.0.1:0", "--gossip-insecure", "--gossip-interval=2s"); err != nil ||
		cfg.Gossip.Interval != 2*time.Second || cfg.Gossip.Heartbeat < 2*time.Second {
		t.Errorf("--gossip-interval 2s: %+v, %v", cfg.Gossip, err)
	}
	if _, _, err := runServeFlags(t, "--gossip-bind=127.0.0.1:0", "--gossip-insecure", "--gossip-interval=5s"); err == nil ||
		!strings.Contains(err.Error(), "--gossip-stale-after") || !strings.Contains(err.Error(), "--gossip-interval") {
		t.Errorf("--gossip-interval 5s (the default --gossip-stale-after): %v, want an error naming both flags", err)
	}
	// With the sketch on, the key's windows end on chunk boundaries; the
	// error names the flag (until stop 40 it named prefix.Config's fields,
	// after serve had started to build the router).
	for _, f := range []string{"--prefix-chars=300", "--prompt-chars=300"} {
		if _, _, err := runServeFlags(t, f); err == nil || !strings.Contains(err.Error(), strings.SplitN(f, "=", 2)[0]) {
			t.Errorf("%s: %v, want an error naming the flag", f, err)
		}
	}
	if _, _, err := runServeFlags(t, "--prefix-chars=300", "--sketch=false"); err != nil {
		t.Errorf("--prefix-chars 300 without the sketch: %v", err)
	}
	if _, _, err := runServeFlags(t, "--load-factor=1e18"); err == nil {
		t.Error("--load-factor 1e18 accepted")
	}
	if cfg, _, err := runServeFlags(t, "--kv-capacity-factor=0.9"); err != nil || cfg.Ring.KVCapacityFactor != 0.9 {
		t.Errorf("--kv-capacity-factor 0.9: %v %v", cfg.Ring.KVCapacityFactor, err)
	}
	if _, _, err := runServeFlags(t, "--kv-capacity-factor=-1"); err == nil {
		t.Error("--kv-capacity-factor -1 accepted")
	}
	if cfg, _, err := runServeFlags(t, "--kv-load-factor=1.2"); err != nil || cfg.Ring.KVLoadFactor != 1.2 {
		t.Errorf("--kv-load-factor 1.2: %v %v", cfg.Ring.KVLoadFactor, err)
	}
	if _, _, err := runServeFlags(t, "--kv-load-factor=0.5"); err == nil {
		t.Error("--kv-load-factor 0.5 accepted")
	}
}

// --completion-history sizes the router's memory of completion prompts;
// 0 turns it off and a negative size is refused.
func TestServeCompletionHistoryFlag(t *testing.T) {
	for arg, want := range map[string]int{"": 65536, "--completion-history=0": 0, "--completion-history=8": 8} {
		var args []string
		if arg != "" {
			args = append(args, arg)
		}
		if cfg, _, err := runServeFlags(t, args...); err != nil || cfg.Proxy.CompletionHistory != want {
			t.Errorf("%q: %d, %v; want %d", arg, cfg.Proxy.CompletionHistory, err, want)
		}
	}
	if _, _, err := runServeFlags(t, "--completion-history=-1"); err == nil || !strings.Contains(err.Error(), "completion history") {
		t.Errorf("--completion-history=-1: %v", err)
	}
}
