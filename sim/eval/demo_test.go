package eval

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDemoShape measures `make demo`'s shape in virtual time, seed by
// seed, when PREFIXRING_DEMO_SEEDS lists seeds (e.g. 1,2,3); the policies
// are PREFIXRING_DEMO_POLICIES (default round-robin,chwbl; ratios are to
// the first; PREFIXRING_DEMO_KV_UNKNOWN=1 hides the engines' KV capacity
// from the routers). It prints the table and checks only that every request ran:
//
//	PREFIXRING_DEMO_SEEDS=1,2,3 go test ./sim/eval -run TestDemoShape -v
func TestDemoShape(t *testing.T) {
	env := os.Getenv("PREFIXRING_DEMO_SEEDS")
	if env == "" {
		t.Skip("set PREFIXRING_DEMO_SEEDS=1,2,3 to measure the demo's shape")
	}
	var seeds []uint64
	for _, f := range strings.Split(env, ",") {
		s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			t.Fatalf("PREFIXRING_DEMO_SEEDS: %v", err)
		}
		seeds = append(seeds, s)
	}
	pols := []string{"round-robin", "chwbl"}
	if p := os.Getenv("PREFIXRING_DEMO_POLICIES"); p != "" {
		pols = strings.Split(p, ",")
	}
	table, err := DemoSeeds(DemoGrid(pols), seeds, DemoKVBlocks, os.Getenv("PREFIXRING_DEMO_KV_UNKNOWN") != "")
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table)
}

// The demo workload runs closed loop: all 768 turns of its 128
// conversations, at most 48 conversations at a time.
func TestDemoWorkloadIsClosedLoop(t *testing.T) {
	ss, err := Workload("demo", 1, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 128 || len(ss[0].Turns) != 6 || Concurrency("demo") != 48 {
		t.Fatalf("%d sessions of %d turns, concurrency %d; want 128 of 6, 48", len(ss), len(ss[0].Turns), Concurrency("demo"))
	}
	res, err := Run(Config{Grids: []Grid{DemoGrid([]string{"round-robin"})}, Seed: 1, KVBlocks: DemoKVBlocks, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Requests != 768 || r.Errors != 0 {
		t.Fatalf("%d requests, %d errors; want 768, 0", r.Requests, r.Errors)
	}
}
