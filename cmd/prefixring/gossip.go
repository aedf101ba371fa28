package main

import (
	"fmt"

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
		&cli.StringFlag{Name: "gossip-key", EnvVars: env("gossip-key"), Usage: "base64 of a 16-, 24- or 32-byte key encrypting gossip (as Consul and Serf take it); a replica without it can neither join nor inject state"},
		&cli.DurationFlag{Name: "gossip-interval", Value: d.Interval, EnvVars: env("gossip-interval"), Usage: "how often this replica sends its in-flight counts when they changed"},
		&cli.StringFlag{Name: "gossip-view", Value: string(d.View), EnvVars: env("gossip-view"), Usage: "what the bound reads as cluster-wide load: overlay (every replica's last published load, this replica's own with its unpublished new placements laid over it: it sees its own bursts at once), shared (every replica's last published load, its own included: the most agreement, blind to its own placements until it publishes) or exact (its own live load + the others' published); the study behind the default is in docs/study.md"},
		&cli.DurationFlag{Name: "gossip-push-pull", Value: d.PushPull, EnvVars: env("gossip-push-pull"), Usage: "full-state anti-entropy interval"},
		&cli.DurationFlag{Name: "gossip-rejoin-interval", Value: d.RejoinInterval, EnvVars: env("gossip-rejoin-interval"), Usage: "how often --join is retried"},
		&cli.DurationFlag{Name: "gossip-stale-after", Value: d.StaleAfter, EnvVars: env("gossip-stale-after"), Usage: "a replica silent this long no longer counts in the cluster-wide load"},
		&cli.StringFlag{Name: "node-name", Value: d.NodeName, EnvVars: env("node-name"), Usage: "this replica's name in the cluster (default: the hostname); must be unique: a replica whose name a live member already uses fails to start"},
	}
}

// gossipConfig reads the gossip flags; nil when gossip is off.
func gossipConfig(c *cli.Context) (*gossip.Config, error) {
	if c.String("gossip-bind") == "" {
		for _, f := range []string{"join", "gossip-key", "gossip-advertise", "gossip-view"} {
			if c.IsSet(f) {
				return nil, fmt.Errorf("--%s needs --gossip-bind", f)
			}
		}
		return nil, nil
	}
	key, err := gossip.ParseKey(c.String("gossip-key"))
	if err != nil {
		return nil, fmt.Errorf("--gossip-key: %w", err)
	}
	cfg := gossip.DefaultConfig()
	cfg.NodeName, cfg.BindAddr, cfg.AdvertiseAddr = c.String("node-name"), c.String("gossip-bind"), c.String("gossip-advertise")
	cfg.Join, cfg.Key = c.StringSlice("join"), key
	cfg.Interval, cfg.PushPull = c.Duration("gossip-interval"), c.Duration("gossip-push-pull")
	if cfg.View, err = core.ParseViewMode(c.String("gossip-view")); err != nil {
		return nil, fmt.Errorf("--gossip-view: %w", err)
	}
	cfg.RejoinInterval, cfg.StaleAfter = c.Duration("gossip-rejoin-interval"), c.Duration("gossip-stale-after")
	if cfg.StaleAfter <= cfg.Heartbeat {
		return nil, fmt.Errorf("--gossip-stale-after %v must exceed the %v heartbeat", cfg.StaleAfter, cfg.Heartbeat)
	}
	return &cfg, cfg.Validate()
}
