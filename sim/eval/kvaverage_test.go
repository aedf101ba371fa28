package eval

import (
	"math"
	"testing"
)

// demoRun runs the demo's shape on its 1000-block engines, seed 1, with
// cfg's KV settings, and returns chwbl's result.
func demoRun(t *testing.T, cfg Config) Result {
	t.Helper()
	cfg.Grids, cfg.Seed, cfg.KVBlocks = []Grid{DemoGrid([]string{"chwbl"})}, 1, DemoKVBlocks
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Errors != 0 {
		t.Fatalf("%+v", res)
	}
	return res[0]
}

// demoSpill is demoRun's spill rate.
func demoSpill(t *testing.T, cfg Config) float64 { return demoRun(t, cfg).SpillRate }

// With the engines' KV capacity hidden, K bounds nothing unless KVAverage
// bounds it by c·average: on the demo's small engines, where K decides,
// the routers then spill again, and a KV min bound without KVAverage is
// refused.
func TestKVAverageBoundsHiddenCapacity(t *testing.T) {
	hidden, average := demoSpill(t, Config{KVCapacityUnknown: true}), demoSpill(t, Config{KVCapacityUnknown: true, KVAverage: true})
	if !(average > hidden+0.05) {
		t.Fatalf("spill with the capacity hidden %.3f, with K bounded by c·average %.3f: want the average bound to spill more", hidden, average)
	}
	if err := (Config{Grids: []Grid{DemoGrid([]string{"chwbl"})}, KVMinBound: 4096}).Validate(); err == nil {
		t.Fatal("a KV min bound without KVAverage was accepted")
	}
}

// KVCapacityFactor reaches the routers' balancers: on the demo's small
// engines, whose conversations outgrow their KV, the default bound at 0.85
// of the capacity spills more than one at 1.25; a negative factor is
// refused.
func TestKVCapacityFactorReachesTheRouters(t *testing.T) {
	def, loose := demoSpill(t, Config{}), demoSpill(t, Config{KVCapacityFactor: 1.25})
	if !(def > loose+0.03) {
		t.Fatalf("spill at the default 0.85·capacity %.3f, at 1.25·capacity %.3f: want the default to spill more", def, loose)
	}
	if err := (Config{Grids: []Grid{DemoGrid([]string{"chwbl"})}, KVCapacityFactor: -1}).Validate(); err == nil {
		t.Fatal("a negative KV capacity factor was accepted")
	}
}

// KVLoadFactor reaches the routers' balancers: on the demo's small
// engines, whose memory the conversations fill, a relative bound of 2
// keeps nearly every turn home where the default 1.1 spills some.
func TestKVLoadFactorReachesTheRouters(t *testing.T) {
	def, loose := demoSpill(t, Config{}), demoSpill(t, Config{KVLoadFactor: 2})
	if !(def > loose+0.05) {
		t.Fatalf("spill at the default KV load factor %.3f, at 2 %.3f: want the default to spill more", def, loose)
	}
	if err := (Config{Grids: []Grid{DemoGrid([]string{"chwbl"})}, KVLoadFactor: 0.5}).Validate(); err == nil {
		t.Fatal("a KV load factor below 1 was accepted")
	}
}

// GroupMemory reaches the routers' balancers: on the demo's small engines
// (16k tokens each, eight 1024-token system prompts of 1/8 of the traffic
// each) the default cap keeps each prompt on two engines instead of a
// copy on all four, and the hit rate rises by more than 0.02 (0.733
// against 0.686 at seed 1); a negative GroupMemory is no cap, and the
// eval refuses NaN.
func TestGroupMemoryReachesTheRouters(t *testing.T) {
	capped, uncapped := demoRun(t, Config{}).HitRate, demoRun(t, Config{GroupMemory: -1}).HitRate
	if !(capped > uncapped+0.02) {
		t.Fatalf("hit with the default group memory %.3f, with no cap %.3f: want the cap to keep more prompts cached", capped, uncapped)
	}
	if err := (Config{Grids: []Grid{DemoGrid([]string{"chwbl"})}, GroupMemory: math.NaN()}).Validate(); err == nil {
		t.Fatal("a NaN group memory was accepted")
	}
}
