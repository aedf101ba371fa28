package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prefixring/prefixring/gossip/core"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/gossip"
)

// gossipFlags are the flags of the gossip cluster. Gossip is on when
// --gossip-bind is set.
func gossipFlags() []cli.Flag {
	d := gossip.DefaultConfig()
	return []cli.Flag{
		&cli.StringFlag{Name: "gossip-bind", EnvVars: env("gossip-bind"), Usage: "host:port to gossip on (UDP and TCP), e.g. 0.0.0.0:7946; empty: no gossip, each replica balances on its own counts"},
		&cli.StringFlag{Name: "gossip-advertise", EnvVars: env("gossip-advertise"), Usage: "host:port other replicas reach this one at (default: the bind address, or the first private IP when bound to 0.0.0.0)"},
		&cli.StringSliceFlag{Name: "join", EnvVars: env("join"), Usage: "peers to join: host:port or host (gossip port assumed), IPs or DNS names such as a headless Service; re-resolved and retried every --gossip-rejoin-interval, so partitions heal"},
		&cli.StringFlag{Name: "gossip-key", EnvVars: env("gossip-key"), Usage: "base64 of a 16-, 24- or 32-byte key encrypting gossip (as Consul and Serf take it; surrounding whitespace is dropped); a replica without it can neither join nor inject state; gossip refuses to run without a key unless --gossip-insecure"},
		&cli.StringFlag{Name: "gossip-key-file", EnvVars: env("gossip-key-file"), Usage: "read --gossip-key from this file (a mounted Secret); surrounding whitespace is dropped"},
		&cli.BoolFlag{Name: "gossip-insecure", EnvVars: env("gossip-insecure"), Usage: "run gossip without a key, for local experiments only: any process that reaches the gossip port can then join and steer routing (logged at start, shown in /debug/cluster and as prefixring_gossip_insecure)"},
		&cli.DurationFlag{Name: "gossip-interval", Value: d.Interval, EnvVars: env("gossip-interval"), Usage: "how often this replica sends its in-flight counts when they changed (less often in a cluster too large for --gossip-publish-rate); it sends them unchanged at least every second, or every interval if longer"},
		&cli.Float64Flag{Name: "gossip-publish-rate", Value: d.PublishRate, EnvVars: env("gossip-publish-rate"), Usage: "the most messages a second this replica sends to publish its counts, one to each other replica counting one: with N replicas it publishes every --gossip-interval up to N-1 = rate x interval, then less often (0: the default)"},
		&cli.StringFlag{Name: "gossip-view", Value: string(d.View), EnvVars: env("gossip-view"), Usage: "what the bound reads as cluster-wide load: overlay (every replica's last published load, this replica's own with its unpublished new placements laid over it: it sees its own bursts at once), shared (every replica's last published load, its own included: the most agreement, blind to its own placements until it publishes) exact (its own live load + the others' published) or aligned (shared, with every publication applied --gossip-apply-lag after its stamp, so replicas agree while publications are on the wire); the study behind the default is in docs/study.md"},
		&cli.DurationFlag{Name: "gossip-apply-lag", Value: d.ApplyLag, EnvVars: env("gossip-apply-lag"), Usage: "with --gossip-view aligned: how long after its stamp every replica applies a publication (at most this long after its receipt); must exceed the delivery delay between replicas and stay below --gossip-stale-after"},
		&cli.DurationFlag{Name: "gossip-push-pull", Value: d.PushPull, EnvVars: env("gossip-push-pull"), Usage: "full-state anti-entropy interval"},
		&cli.DurationFlag{Name: "gossip-rejoin-interval", Value: d.RejoinInterval, EnvVars: env("gossip-rejoin-interval"), Usage: "how often --join is retried"},
		&cli.DurationFlag{Name: "gossip-stale-after", Value: d.StaleAfter, EnvVars: env("gossip-stale-after"), Usage: "a replica silent this long no longer counts in the cluster-wide load (its entry is forgotten after the larger of 1m and this); must exceed the heartbeat, the larger of 1s and --gossip-interval"},
		&cli.BoolFlag{Name: "gossip-strict-settings", EnvVars: env("gossip-strict-settings"), Usage: "fail /readyz while a live gossip member's settings (load signal, key, bound, sketch, KV accounting) differ from this replica's; default: refuse its counts and votes, report it (log, prefixring_gossip_settings_mismatch, /debug/cluster, /readyz's degraded) and stay ready, as a rolling change of a setting passes through a mixed fleet"},
		&cli.StringFlag{Name: "node-name", Value: d.NodeName, EnvVars: env("node-name"), Usage: "this replica's name in the cluster (default: the hostname); must be unique: a replica whose name a live member already uses fails to start"},
	}
}

// gossipOnly are the flags that mean nothing without --gossip-bind: given
// alone, each is refused (the first four would change who routes where) or
// warned about.
var (
	gossipRefused = []string{"join", "gossip-key", "gossip-key-file", "gossip-advertise", "gossip-view", "gossip-insecure"}
	gossipWarned  = []string{"gossip-interval", "gossip-publish-rate", "sketch-interval", "gossip-push-pull", "gossip-rejoin-interval", "gossip-stale-after", "node-name", "gossip-strict-settings", "gossip-apply-lag"}
)

// gossipKey reads --gossip-key or --gossip-key-file. Errors never quote
// the key.
func gossipKey(c *cli.Context) ([]byte, error) {
	raw, file := c.String("gossip-key"), c.String("gossip-key-file")
	// Surrounding whitespace is dropped, from the flag (or its environment
	// variable) as from the file; a key of only whitespace is refused, not
	// read as none.
	s, flag := strings.TrimSpace(raw), "--gossip-key"
	switch {
	case raw != "" && file != "":
		return nil, errors.New("give --gossip-key or --gossip-key-file, not both")
	case raw != "" && s == "":
		return nil, errors.New("--gossip-key is only whitespace")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key-file: %w", err)
		}
		if s = strings.TrimSpace(string(b)); s == "" {
			return nil, fmt.Errorf("--gossip-key-file %s is empty", file)
		}
		flag = "--gossip-key-file " + file
	}
	key, err := gossip.ParseKey(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return key, nil
}

// gossipConfig reads the gossip flags; nil when gossip is off. warnings
// name the flags given that have no effect.
func gossipConfig(c *cli.Context) (cfg *gossip.Config, warnings []string, err error) {
	if c.String("gossip-bind") == "" {
		for _, f := range gossipRefused {
			if c.IsSet(f) {
				return nil, nil, fmt.Errorf("--%s needs --gossip-bind", f)
			}
		}
		for _, f := range gossipWarned {
			if c.IsSet(f) {
				warnings = append(warnings, "--"+f+" has no effect without --gossip-bind")
			}
		}
		return nil, warnings, nil
	}
	key, err := gossipKey(c)
	if err != nil {
		return nil, nil, err
	}
	// gossip.Config reads a zero duration as its default: a flag's 0s
	// would silently run that, so zero is refused here by the flag's name.
	for _, d := range []struct {
		flag string
		min  time.Duration
		want string
	}{
		{"gossip-interval", time.Millisecond, "at least 1ms"}, {"gossip-apply-lag", time.Millisecond, "at least 1ms"},
		{"gossip-push-pull", 1, "positive"}, {"gossip-rejoin-interval", 1, "positive"}, {"gossip-stale-after", 1, "positive"},
	} {
		if v := c.Duration(d.flag); v < d.min {
			return nil, nil, fmt.Errorf("--%s %v must be %s", d.flag, v, d.want)
		}
	}
	// 0 is the default rate, as documented.
	if err := checkRanges(c, atLeast("gossip-publish-rate", 0)); err != nil {
		return nil, nil, err
	}
	g := gossip.DefaultConfig()
	g.NodeName, g.BindAddr, g.AdvertiseAddr = c.String("node-name"), c.String("gossip-bind"), c.String("gossip-advertise")
	g.Join, g.Key = c.StringSlice("join"), key
	g.Interval, g.PushPull = c.Duration("gossip-interval"), c.Duration("gossip-push-pull")
	g.PublishRate = c.Float64("gossip-publish-rate")
	if g.View, err = core.ParseViewMode(c.String("gossip-view")); err != nil {
		return nil, nil, fmt.Errorf("--gossip-view: %w", err)
	}
	g.RejoinInterval, g.StaleAfter = c.Duration("gossip-rejoin-interval"), c.Duration("gossip-stale-after")
	g.ApplyLag = c.Duration("gossip-apply-lag")
	if c.IsSet("gossip-apply-lag") && g.View != core.ViewAligned {
		warnings = append(warnings, "--gossip-apply-lag has no effect without --gossip-view aligned")
	}
	// A replica republishes at least every heartbeat, and is forgotten
	// after ForgetAfter of silence: both follow the flags that must stay
	// within them, so neither has a cap of its own that no flag moves.
	g.Heartbeat = max(g.Heartbeat, g.Interval)
	g.ForgetAfter = max(g.ForgetAfter, g.StaleAfter)
	if g.StaleAfter <= g.Heartbeat {
		return nil, nil, fmt.Errorf("--gossip-stale-after %v must exceed the heartbeat, %v (the larger of 1s and --gossip-interval)", g.StaleAfter, g.Heartbeat)
	}
	return &g, warnings, g.Validate()
}
