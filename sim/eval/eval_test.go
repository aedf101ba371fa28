package eval

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prefixring/prefixring/sim/workload"
)

func tiny() Config {
	c := DefaultConfig()
	c.Policies = []string{"round-robin", "chwbl"}
	c.Routers = []int{1, 2}
	c.RateScales = []float64{1}
	c.LoadFactors = []float64{1.25, 2}
	c.Requests = 300
	return c
}

// A sweep runs every combination, and the report folder holds results.json
// with the study's fields, report.md and index.html with its charts.
func TestEvalWritesTheReport(t *testing.T) {
	cfg := tiny()
	calls := 0
	cfg.Progress = func(done, total int) {
		calls++
		if done > total || total != 8 {
			t.Errorf("progress %d/%d", done, total)
		}
	}
	results, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2*2*2 || calls != 8 {
		t.Fatalf("%d results, %d progress calls; want 8 (2 policies × 2 routers × 2 load factors)", len(results), calls)
	}
	dir := t.TempDir()
	if err := WriteReport(dir, results, "prefixring eval (test)"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(`policy workload endpoints routers rate_scale load_factor gossip_interval_ms hit_rate
		ideal_hit_rate ttft_mean_ms ttft_p50_ms ttft_p95_ms ttft_p99_ms e2e_p50_ms e2e_p99_ms output_tokens_per_s
		prefill_tokens queue_depth_mean queue_depth_max imbalance spill_rate agreement same_engine_turns`)
	for i, row := range rows {
		for _, f := range fields {
			if _, ok := row[f]; !ok {
				t.Fatalf("run %d lacks %s: %v", i, f, row)
			}
		}
		hit, ideal := row["hit_rate"].(float64), row["ideal_hit_rate"].(float64)
		if !(hit > 0 && hit <= ideal+1e-9) {
			t.Errorf("run %d: hit rate %v against ideal %v", i, hit, ideal)
		}
		if (row["policy"] == "chwbl") != (row["agreement"] != nil) {
			t.Errorf("run %d: agreement %v for %v", i, row["agreement"], row["policy"])
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"## 1.", "## 2.", "## 3.", "## Goals", "c 1.25 (", "hit(2)/hit(1)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	page, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	if n := strings.Count(string(page), "<svg"); n < 3 {
		t.Errorf("index.html has %d charts, want the CDF, hit against c and hit against routers", n)
	}
}

// Same seed, same results; chwbl keeps a hot prefix home where round-robin
// scatters it.
func TestEvalIsDeterministic(t *testing.T) {
	a, err := Run(tiny())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Run(tiny())
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatal("two runs with one seed differ")
	}
	if a[4].Policy != "chwbl" || a[0].Policy != "round-robin" || a[4].HitRate <= a[0].HitRate {
		t.Fatalf("chwbl hit %v, round-robin %v", a[4].HitRate, a[0].HitRate)
	}
}

func TestEvalRejectsBadConfigs(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"policy":   func(c *Config) { c.Policies = []string{"nope"} },
		"workload": func(c *Config) { c.Workloads = []string{"multi-turns"} },
		"c":        func(c *Config) { c.LoadFactors = []float64{0.5} },
		"routers":  func(c *Config) { c.Routers = []int{0} },
		"empty":    func(c *Config) { c.RateScales = nil },
	} {
		c := tiny()
		mut(&c)
		if _, err := Run(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	bad := filepath.Join(t.TempDir(), "trace.jsonl")
	os.WriteFile(bad, []byte(`{"timestamp":0,"input_length":600,"output_length":5,"hash_ids":[1,2]}`+"\n{oops\n"), 0o644)
	c := tiny()
	c.Workloads = []string{"trace:" + bad}
	if _, err := Run(c); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("malformed trace: %v", err)
	}
}

// The ideal hit rate counts each request's leading blocks that an earlier
// request computed, in arrival order.
func TestIdealHitRate(t *testing.T) {
	reqs := []workload.Request{
		{Arrival: 2, InputLen: 1024, HashIDs: []uint64{1, 2}}, // blocks 1,2: the first is cached
		{Arrival: 1, InputLen: 1024, HashIDs: []uint64{1, 3}}, // first: nothing cached
		{Arrival: 3, InputLen: 1024, HashIDs: []uint64{9, 2}}, // a different first block: nothing
		{Arrival: 4, InputLen: 1024, HashIDs: []uint64{1, 2}}, // all cached
	}
	got := IdealHitRate(reqs, 16)
	if want := float64(512+1024) / 4096; got != want {
		t.Fatalf("ideal %v, want %v", got, want)
	}
}

// The closed-loop workloads run through the production key and report
// how many of a conversation's turns stayed on its engine.
func TestEvalSessionWorkloads(t *testing.T) {
	c := tiny()
	c.Workloads = []string{"multi-turn", "agentic"}
	c.Routers, c.LoadFactors = []int{1}, []float64{1.25}
	results, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.SameEngineTurns == nil || r.Requests < 100 {
			t.Fatalf("%s/%s: %d requests, same-engine turns %v", r.Workload, r.Policy, r.Requests, r.SameEngineTurns)
		}
		if r.Policy == "round-robin" && *r.SameEngineTurns > 0.6 {
			t.Errorf("%s: round-robin kept %.2f of turns together", r.Workload, *r.SameEngineTurns)
		}
		if r.Policy == "chwbl" && *r.SameEngineTurns < 0.9 {
			t.Errorf("%s: chwbl kept only %.2f of turns together at low load", r.Workload, *r.SameEngineTurns)
		}
	}
}
