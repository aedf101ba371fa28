package eval

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseSlowEngines: --slow-engines reads engine:factor pairs and
// refuses what is not one, a factor below 1 and an engine named twice.
func TestParseSlowEngines(t *testing.T) {
	got, err := ParseSlowEngines(" 0:10, 3:4 ")
	if want := map[int]float64{0: 10, 3: 4}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("0:10,3:4: %v %v, want %v", got, err, want)
	}
	if s := slowName(map[int]float64{3: 4, 0: 10, 12: 1.5}); s != "0:10,3:4,12:1.5" {
		t.Errorf("named %q, want engines in order", s)
	}
	for _, bad := range []string{"", "0", "0:", ":10", "a:10", "0:x", "-1:10", "0:0.5", "0:0", "0:NaN", "0:Inf", "0:10,0:4", "0:10;1:2"} {
		if m, err := ParseSlowEngines(bad); err == nil {
			t.Errorf("%q accepted: %v", bad, m)
		}
	}
}

// TestSlowEnginesInEval: a study with SlowEngines runs those engines that
// many times slower (engine-0's requests wait far longer than the
// others' under round-robin, which does not steer off it), labels its
// results and names its records files with them, so that they are told
// apart from a run without, in the report too; an engine outside a grid's fleet is refused.
func TestSlowEnginesInEval(t *testing.T) {
	g := CustomGrid()
	g.Workloads, g.Policies, g.Endpoints, g.Routers, g.RateScales = []string{"multi-turn"}, []string{"round-robin"}, []int{4}, []int{1}, []float64{1}
	dir := t.TempDir()
	run := func(slow map[int]float64) Result {
		t.Helper()
		res, err := Run(Config{Grids: []Grid{g}, Seed: 1, Requests: 200, Records: dir, SlowEngines: slow})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	normal, slow := run(nil), run(map[int]float64{0: 10})
	if normal.SlowEngines != "" || slow.SlowEngines != "0:10" || pointID(normal) == pointID(slow) || recordsName(normal) == recordsName(slow) {
		t.Fatalf("labels %q and %q, records %s and %s: not told apart", normal.SlowEngines, slow.SlowEngines, recordsName(normal), recordsName(slow))
	}
	md := Markdown([]Result{normal, slow}, "test")
	reportHas(t, md, "| H100, slow 0:10 |", "| H100 |", `Slow engines (engine:factor, every step that many times the profile's): ["" "0:10"]`)
	if files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl")); len(files) != 2 {
		t.Fatalf("records files %v, want one per run", files)
	}
	meanTTFT := func(r Result) (slow, rest float64) {
		var n0, n1 int
		for _, rec := range runRecords(t, dir, r) {
			if rec.Endpoint == "engine-0" {
				slow, n0 = slow+float64(rec.TTFT), n0+1
			} else {
				rest, n1 = rest+float64(rec.TTFT), n1+1
			}
		}
		return slow / float64(n0), rest / float64(n1)
	}
	if s, r := meanTTFT(slow); s < 5*r {
		t.Errorf("slowed engine-0's mean TTFT %.1f ms, the others' %.1f ms: not much slower", s/1e6, r/1e6)
	}
	if s, r := meanTTFT(normal); s > 2*r {
		t.Errorf("without slowdown, engine-0's mean TTFT %.1f ms, the others' %.1f ms", s/1e6, r/1e6)
	}
	_, err := Run(Config{Grids: []Grid{g}, Seed: 1, Requests: 200, SlowEngines: map[int]float64{4: 10}})
	if err == nil || !strings.Contains(err.Error(), "engine 4") {
		t.Errorf("engine 4 of 4 slowed: %v, want an error naming it", err)
	}
}
