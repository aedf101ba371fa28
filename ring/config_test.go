package ring

import (
	"math"
	"testing"
)

// A load factor the bound cannot compute with is refused: before, inf and
// 1e18 were accepted and overflowed the bound down to its floor.
func TestLoadFactorRange(t *testing.T) {
	for _, c := range []float64{math.Inf(1), 1e18, MaxLoadFactor * 1.01, math.NaN(), 0.99, -1} {
		cfg := DefaultConfig()
		cfg.LoadFactor = c
		if cfg.Validate() == nil {
			t.Errorf("load factor %v accepted", c)
		}
	}
	for _, c := range []float64{1, 1.25, 2, MaxLoadFactor} {
		cfg := DefaultConfig()
		cfg.LoadFactor = c
		if err := cfg.Validate(); err != nil {
			t.Errorf("load factor %v: %v", c, err)
		}
	}
	// At the largest c the bound still grows with the load.
	b := Bound{LoadFactor: MaxLoadFactor}
	if lo, hi := b.Slots(1e6, 4), b.Slots(1e9, 4); !(hi > lo && lo > 0) {
		t.Fatalf("bound at c=%v: %d for 1e6, %d for 1e9", float64(MaxLoadFactor), lo, hi)
	}
}

// KVCapacityFactor is 0 (the load factor) or a positive finite factor up
// to MaxLoadFactor; below 1 is allowed (K then spills before the engine's
// memory is full).
func TestKVCapacityFactorRange(t *testing.T) {
	for _, f := range []float64{-0.5, math.NaN(), math.Inf(1), MaxLoadFactor * 1.01} {
		cfg := DefaultConfig()
		cfg.KVCapacityFactor = f
		if cfg.Validate() == nil {
			t.Errorf("KV capacity factor %v accepted", f)
		}
	}
	for _, f := range []float64{0, 0.5, 0.9, 1, 1.25, MaxLoadFactor} {
		cfg := DefaultConfig()
		cfg.KVCapacityFactor = f
		if err := cfg.Validate(); err != nil {
			t.Errorf("KV capacity factor %v: %v", f, err)
		}
	}
}

// KVLoadFactor is 0 (the default) or between 1 and MaxLoadFactor.
func TestKVLoadFactorRange(t *testing.T) {
	for _, f := range []float64{-1, 0.5, 0.99, math.NaN(), math.Inf(1), MaxLoadFactor * 1.01} {
		cfg := DefaultConfig()
		cfg.KVLoadFactor = f
		if cfg.Validate() == nil {
			t.Errorf("KV load factor %v accepted", f)
		}
	}
	for _, f := range []float64{0, 1, 1.1, 2, MaxLoadFactor} {
		cfg := DefaultConfig()
		cfg.KVLoadFactor = f
		if err := cfg.Validate(); err != nil {
			t.Errorf("KV load factor %v: %v", f, err)
		}
	}
}
