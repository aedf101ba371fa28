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

// runSketch starts a new sketch epoch every epoch until ctx ends. Alone,
// it rebuilds the table of shared prefixes from the sketch every
// sketchRefresh; with gossip (share), it publishes at once (even an empty
// summary: it replaces the record of an earlier process of this name),
// then ticks the share every interval.
func runSketch(ctx context.Context, k *prefix.Live, share *prefix.Share, cfg SketchConfig) {
	rotate := time.NewTicker(cfg.Epoch)
	defer rotate.Stop()
	every := sketchRefresh
	if share != nil {
		share.Publish(true)
		every = cfg.Interval
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rotate.C:
			k.Rotate()
		case <-tick.C:
			if share != nil {
				share.Tick()
			} else {
				k.SetCommon(k.Local())
			}
		}
	}
}
