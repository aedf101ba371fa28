package router

import (
	"context"
	"time"

	"github.com/prefixring/prefixring/prefix"
)

// newKeying builds the keyer, with a sketch when the configuration learns
// shared prefixes.
func newKeying(cfg Config) (*prefix.Live, error) {
	var sk *prefix.Sketch
	if cfg.Sketch.Enabled {
		sk = prefix.NewSketch(cfg.Sketch.Fanout, 0)
	}
	return prefix.NewLive(cfg.Key, sk)
}

// sketchRefresh is how often a replica without gossip rebuilds its table of
// shared prefixes from its own sketch (with gossip, each publication does).
const sketchRefresh = time.Second

// runSketch starts a new sketch epoch every epoch and, alone, rebuilds the
// table of shared prefixes from the sketch every sketchRefresh, until ctx
// ends.
func runSketch(ctx context.Context, k *prefix.Live, epoch time.Duration, alone bool) {
	rotate := time.NewTicker(epoch)
	defer rotate.Stop()
	var refresh <-chan time.Time
	if alone {
		t := time.NewTicker(sketchRefresh)
		defer t.Stop()
		refresh = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-rotate.C:
			k.Rotate()
		case <-refresh:
			k.SetCommon(k.Local())
		}
	}
}
