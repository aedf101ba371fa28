package main

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/gossip/core"
	"github.com/prefixring/prefixring/ring"
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
	if _, _, err := runServeFlags(t, "--group-memory=-1"); err == nil || !strings.Contains(err.Error(), "--group-memory") {
		t.Errorf("--group-memory=-1: %v", err)
	}
	for _, v := range []string{"1", "-1", "NaN", "2000"} {
		if _, _, err := runServeFlags(t, "--pace-threshold="+v); err == nil || !strings.Contains(err.Error(), "--pace-threshold") {
			t.Errorf("--pace-threshold=%s: %v", v, err)
		}
	}
	for v, want := range map[string]float64{"0": 0, "1.5": 1.5, "100": 100} {
		if cfg, _, err := runServeFlags(t, "--pace-threshold="+v); err != nil || cfg.Ring.Pace.Threshold != want || cfg.Ring.Pace.Validate() != nil {
			t.Errorf("--pace-threshold=%s: %v, %v", v, cfg.Ring.Pace, err)
		}
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

// gossip.Config reads a zero duration as its default, so a gossip flag's
// 0s would silently run the default: each duration flag refuses zero and
// negatives by name, as --gossip-stale-after did (until stop 42
// --gossip-interval, --gossip-push-pull, --gossip-rejoin-interval and
// --gossip-apply-lag took 0s for their defaults).
func TestGossipDurationFlagsMustBePositive(t *testing.T) {
	for _, f := range []string{"gossip-interval", "gossip-push-pull", "gossip-rejoin-interval", "gossip-apply-lag", "gossip-stale-after"} {
		for _, v := range []string{"0s", "-1s"} {
			_, _, err := runServeFlags(t, "--gossip-bind=127.0.0.1:0", "--gossip-insecure", "--gossip-view=aligned", "--"+f+"="+v)
			if err == nil || !strings.Contains(err.Error(), "--"+f) {
				t.Errorf("--%s %s: %v, want an error naming the flag", f, v, err)
			}
		}
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
	if _, _, err := runServeFlags(t, "--completion-history=-1"); err == nil || !strings.Contains(err.Error(), "--completion-history") {
		t.Errorf("--completion-history=-1: %v", err)
	}
}

// serve without flags runs the defaults that docs/security.md and
// docs/operating.md state, each the limit or timeout an operator relies on
// without setting it; a changed default must change those pages too.
func TestServeDefaultsAreTheDocumented(t *testing.T) {
	cfg, _, err := runServeFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	p, h := cfg.Proxy, cfg.Health
	for _, c := range []struct {
		flag      string
		got, want any
	}{
		{"--listen", cfg.Listen, ":8080"},
		{"--admin-listen", cfg.AdminListen, ":9090"},
		{"--pprof", cfg.Pprof, false},
		{"--workers-api", cfg.Workers.Mode, "admin"},
		{"--admin-token", cfg.Workers.Token, ""},
		{"--max-workers", cfg.Workers.Policy.MaxWorkers, 256},
		{"--workers-allow-link-local", cfg.Workers.Policy.AllowLinkLocal, false},
		{"--workers-allow-cidr", len(cfg.Workers.Policy.AllowCIDRs), 0},
		{"--gossip-bind", cfg.Gossip == nil, true},
		{"--max-body-bytes", p.MaxBodyBytes, int64(32 << 20)},
		{"--client-body-timeout", p.ClientBodyTimeout, 30 * time.Second},
		{"--client-body-deadline", p.ClientBodyDeadline, time.Minute},
		{"--max-buffered-body-bytes", p.MaxBufferedBodyBytes, int64(1 << 30)},
		{"--client-write-timeout", p.ClientWriteTimeout, time.Minute},
		{"--stream-idle-timeout", p.StreamIdleTimeout, 5 * time.Minute},
		{"--upstream-timeout", p.UpstreamTimeout, 10 * time.Minute},
		{"--max-retries", p.MaxRetries, 2},
		{"--retry-timeout", p.RetryTimeout, 10 * time.Second},
		{"--session-header", p.SessionHeader, "X-Session-ID"},
		{"--routing-headers", p.RoutingHeaders, true},
		{"--routing-headers-address", p.EndpointAddress, false},
		{"--client-idle-timeout", cfg.Server.IdleTimeout, 75 * time.Second},
		{"--max-connections", cfg.Server.MaxConnections, 8192},
		{"--health-path", h.Path, "/health"},
		{"--failure-threshold", h.FailureThreshold, 3},
		{"--ejection-time", h.BaseEjection, 30 * time.Second},
		{"--max-ejection-time", h.MaxEjection, 5 * time.Minute},
		{"--max-ejection-percent", h.MaxEjectionPercent, 20},
		{"--panic-threshold", h.PanicThreshold, 50},
		{"--served-window", h.ServedWindow, 10 * time.Second},
		{"--dns-interval", cfg.Sources.DNSInterval, 10 * time.Second},
		{"--endpoints-file-interval", cfg.Sources.FileInterval, 5 * time.Second},
		{"--drain-delay", cfg.DrainDelay, 5 * time.Second},
		{"--drain-timeout", cfg.DrainTimeout, 20 * time.Second},
		{"--load-factor", cfg.Ring.LoadFactor, 1.25},
		{"--min-bound", cfg.Ring.MinBound, int64(16384)},
		{"--kv-capacity-factor", cfg.Ring.KVCapacityFactor, 0.85},
		{"--kv-load-factor", cfg.Ring.KVLoadFactor, 1.1},
		{"--pace-threshold", cfg.Ring.Pace.Threshold, 3.0},
		{"--kv-scrape", cfg.KV.Scrape, true},
		{"--kv-scrape-interval", cfg.KV.Interval, 30 * time.Second},
		{"--kv-metrics-path", cfg.KV.MetricsPath, "/metrics"},
		{"--health-interval", h.Interval, 5 * time.Second},
		{"--health-timeout", h.Timeout, 2 * time.Second},
		{"--policy", cfg.Policy, "chwbl"},
		{"--load-signal", cfg.Ring.Signal, ring.SignalTokens},
		{"--group-spread", cfg.Ring.GroupSpread, 8.0},
		{"--group-memory", cfg.Ring.GroupMemory, 0.25},
		{"--prefix-chars", cfg.Key.MaxChars, 4096},
		{"--prompt-chars", cfg.Key.PromptChars, 256},
		{"--shared-chars", cfg.Key.SharedChars, 32768},
		{"--completion-history", p.CompletionHistory, 65536},
		{"--sketch", cfg.Sketch.Enabled, true},
		{"--sketch-fanout", cfg.Sketch.Fanout, 4},
		{"--sketch-epoch", cfg.Sketch.Epoch, 10 * time.Minute},
		{"--sketch-interval", cfg.Sketch.Interval, time.Second},
	} {
		if c.got != c.want {
			t.Errorf("%s defaults to %v, the docs say %v", c.flag, c.got, c.want)
		}
	}
	// Counted in requests, the floor is four of them.
	if cfg, _, err := runServeFlags(t, "--load-signal=requests"); err != nil || cfg.Ring.MinBound != 4 {
		t.Errorf("--min-bound under --load-signal requests: %d, %v; the docs say 4", cfg.Ring.MinBound, err)
	}
	// Gossip's, once it is on.
	cfg, _, err = runServeFlags(t, "--gossip-bind=127.0.0.1:0", "--gossip-insecure")
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Gossip
	for _, c := range []struct {
		flag      string
		got, want any
	}{
		{"--gossip-interval", g.Interval, 10 * time.Millisecond},
		{"--gossip-publish-rate", g.PublishRate, 1000.0},
		{"--gossip-push-pull", g.PushPull, 5 * time.Second},
		{"--gossip-rejoin-interval", g.RejoinInterval, 10 * time.Second},
		{"--gossip-stale-after", g.StaleAfter, 5 * time.Second},
		{"--gossip-view", g.View, core.ViewOverlay},
		{"--gossip-apply-lag", g.ApplyLag, 250 * time.Millisecond},
		{"--gossip-strict-settings", cfg.GossipStrictSettings, false},
	} {
		if c.got != c.want {
			t.Errorf("%s defaults to %v, the docs say %v", c.flag, c.got, c.want)
		}
	}
}

// The gossip key is base64 of 16, 24 or 32 bytes, from --gossip-key or a
// file, never both; surrounding whitespace is dropped from either (a
// Secret's value often ends in a newline: until stop 42 only the file's
// was dropped, so the same Secret worked as a file and not through the
// environment), and a key of only whitespace is refused rather than read
// as none. A key of another length or not base64 is refused by flag name,
// and no error quotes it. The admin token reads alike.
func TestSecretFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := func(n int) string { return base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", n))) }
	bind := "--gossip-bind=127.0.0.1:0"
	for _, n := range []int{16, 24, 32} {
		if cfg, _, err := runServeFlags(t, bind, "--gossip-key="+key(n)); err != nil || len(cfg.Gossip.Key) != n {
			t.Errorf("a %d-byte key: %v", n, err)
		}
	}
	for _, bad := range []string{key(8), key(20), key(31), key(64), "not base64!"} {
		if _, _, err := runServeFlags(t, bind, "--gossip-key="+bad); err == nil || strings.Contains(err.Error(), bad) {
			t.Errorf("key %q: %v, want an error that does not quote it", bad, err)
		}
	}
	if cfg, _, err := runServeFlags(t, bind, "--gossip-key-file="+write("key", "\n  "+key(32)+"\n")); err != nil || len(cfg.Gossip.Key) != 32 {
		t.Errorf("--gossip-key-file with whitespace around the key: %v", err)
	}
	t.Setenv("PREFIXRING_GOSSIP_KEY", "\t"+key(32)+" \n")
	if cfg, _, err := runServeFlags(t, bind); err != nil || len(cfg.Gossip.Key) != 32 {
		t.Errorf("PREFIXRING_GOSSIP_KEY with whitespace around the key: %v", err)
	}
	t.Setenv("PREFIXRING_GOSSIP_KEY", " \n")
	if _, _, err := runServeFlags(t, bind, "--gossip-insecure"); err == nil || !strings.Contains(err.Error(), "--gossip-key") {
		t.Errorf("PREFIXRING_GOSSIP_KEY of only whitespace: %v, want an error naming --gossip-key", err)
	}
	os.Unsetenv("PREFIXRING_GOSSIP_KEY") // t.Setenv restores it at the end
	for _, bad := range []string{key(20), "not base64!"} {
		if _, _, err := runServeFlags(t, bind, "--gossip-key="+bad); err == nil || !strings.Contains(err.Error(), "--gossip-key:") {
			t.Errorf("key %q: %v, want an error naming --gossip-key", bad, err)
		}
		if _, _, err := runServeFlags(t, bind, "--gossip-key-file="+write("bad", bad)); err == nil || !strings.Contains(err.Error(), "--gossip-key-file") {
			t.Errorf("key file holding %q: %v, want an error naming --gossip-key-file", bad, err)
		}
	}
	for _, args := range [][]string{
		{"--gossip-key-file=" + write("empty", " \n")},
		{"--gossip-key-file=" + filepath.Join(dir, "missing")},
		{"--gossip-key=" + key(32), "--gossip-key-file=" + write("key2", key(32))},
	} {
		if _, _, err := runServeFlags(t, append([]string{bind}, args...)...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}

	if cfg, _, err := runServeFlags(t, "--admin-token-file="+write("token", "\ts3cret\n")); err != nil || cfg.Workers.Token != "s3cret" {
		t.Errorf("--admin-token-file: token %q, %v", cfg.Workers.Token, err)
	}
	t.Setenv("PREFIXRING_ADMIN_TOKEN", "s3cret\n")
	if cfg, _, err := runServeFlags(t); err != nil || cfg.Workers.Token != "s3cret" {
		t.Errorf("PREFIXRING_ADMIN_TOKEN with a trailing newline: token %q, %v", cfg.Workers.Token, err)
	}
	os.Unsetenv("PREFIXRING_ADMIN_TOKEN")
	for _, args := range [][]string{
		{"--admin-token= \n"},
		{"--admin-token-file=" + write("empty-token", "\n")},
		{"--admin-token=s3cret", "--admin-token-file=" + write("token2", "s3cret")},
	} {
		if _, _, err := runServeFlags(t, args...); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: %v, want an error that does not quote the token", args, err)
		}
	}
}

// The workers API's flags, --pprof and --gossip-insecure act only where
// what they shape runs: given where it does not, each is warned about at
// start (until stop 41 they were silently dropped: a token given to a
// replica whose workers API nobody can reach, a profiler on no listener).
func TestServeAdminFlagsSayWhatCannotAct(t *testing.T) {
	workerFlags := []string{"--admin-token=x", "--max-workers=3", "--workers-allow-cidr=10.0.0.0/8", "--workers-allow-link-local"}
	for _, where := range [][]string{{"--workers-api=off"}, {"--admin-listen="}, {"--workers-api=admin", "--admin-listen="}} {
		for _, f := range workerFlags {
			_, w, err := runServeFlags(t, append(slices.Clone(where), f)...)
			name := strings.SplitN(f, "=", 2)[0]
			if err != nil || !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, name) }) {
				t.Errorf("%v %s: warnings %v, err %v; want a warning naming %s", where, f, w, err, name)
			}
		}
	}
	// Served: on the admin listener (the default) or the API listener.
	for _, where := range [][]string{nil, {"--workers-api=public", "--admin-listen="}} {
		if _, w, err := runServeFlags(t, append(slices.Clone(where), workerFlags...)...); err != nil || len(w) != 0 {
			t.Errorf("%v with the workers API served: warnings %v, err %v", where, w, err)
		}
	}
	if _, w, err := runServeFlags(t, "--pprof", "--admin-listen="); err != nil || len(w) != 1 || !strings.Contains(w[0], "--pprof") {
		t.Errorf("--pprof without an admin listener: warnings %v, err %v", w, err)
	}
	if _, w, err := runServeFlags(t, "--pprof"); err != nil || len(w) != 0 {
		t.Errorf("--pprof: warnings %v, err %v", w, err)
	}
	key := "--gossip-key=MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	cfg, w, err := runServeFlags(t, "--gossip-bind=127.0.0.1:0", key, "--gossip-insecure")
	if err != nil || cfg.Gossip.Key == nil || len(w) != 1 || !strings.Contains(w[0], "--gossip-insecure") {
		t.Errorf("--gossip-insecure with a key: warnings %v, err %v", w, err)
	}
}

// The TLS flags: a certificate and its key go together (the listeners'
// and the upstream client's), --admin-tls needs the listeners' and is
// warned about without an admin listener, and the files are handed to
// the replica as given.
func TestServeTLSFlags(t *testing.T) {
	for _, args := range [][]string{{"--tls-cert-file=c.pem"}, {"--tls-key-file=k.pem"}} {
		if _, _, err := runServeFlags(t, args...); err == nil || !strings.Contains(err.Error(), "--tls-cert-file and --tls-key-file") {
			t.Errorf("%v: err %v, want one naming both flags", args, err)
		}
	}
	if _, _, err := runServeFlags(t, "--admin-tls"); err == nil || !strings.Contains(err.Error(), "--admin-tls") {
		t.Errorf("--admin-tls alone: err %v, want one naming it", err)
	}
	files := []string{"--tls-cert-file=c.pem", "--tls-key-file=k.pem"}
	if _, _, err := runServeFlags(t, append(files, "--tls-reload-interval=0s")...); err == nil || !strings.Contains(err.Error(), "--tls-reload-interval") {
		t.Errorf("--tls-reload-interval 0: err %v, want one naming it", err)
	}
	if _, w, err := runServeFlags(t, append(files, "--admin-tls", "--admin-listen=")...); err != nil || len(w) != 1 || !strings.Contains(w[0], "--admin-tls") {
		t.Errorf("--admin-tls without an admin listener: warnings %v, err %v", w, err)
	}
	cfg, w, err := runServeFlags(t, append(files, "--admin-tls")...)
	if err != nil || len(w) != 0 || cfg.TLS != (router.TLSConfig{CertFile: "c.pem", KeyFile: "k.pem", Admin: true, Interval: 10 * time.Second}) {
		t.Errorf("the TLS flags: %+v, warnings %v, err %v", cfg.TLS, w, err)
	}
	for _, args := range [][]string{{"--upstream-cert-file=c.pem"}, {"--upstream-key-file=k.pem"}} {
		if _, _, err := runServeFlags(t, args...); err == nil || !strings.Contains(err.Error(), "--upstream-cert-file and --upstream-key-file") {
			t.Errorf("%v: err %v, want one naming both flags", args, err)
		}
	}
	cfg, w, err = runServeFlags(t, "--upstream-ca-file=ca.pem", "--upstream-cert-file=c.pem", "--upstream-key-file=k.pem")
	if err != nil || len(w) != 0 || cfg.UpstreamTLS != (router.UpstreamTLSConfig{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem"}) || cfg.TLS.Enabled() {
		t.Errorf("the upstream TLS flags: %+v, listener %+v, warnings %v, err %v", cfg.UpstreamTLS, cfg.TLS, w, err)
	}
}
