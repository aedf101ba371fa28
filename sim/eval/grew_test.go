package eval

import (
	"strings"
	"testing"
	"time"

	"github.com/prefixring/prefixring/sim/fleet"
)

// A run's queues grew when its third quarter of requests by arrival waited
// more than twice as long as its first quarter, by more than the ideal
// fleet's mean TTFT; the last quarter does not count.
func TestQueuesGrewComparesTheThirdQuarterWithTheFirst(t *testing.T) {
	ms := func(d float64) time.Duration { return time.Duration(d * float64(time.Millisecond)) }
	run := func(waits ...float64) Result {
		var recs []fleet.Record
		for i, w := range waits { // listed out of arrival order: measure sorts them
			recs = append(recs, fleet.Record{Arrival: ms(float64(len(waits) - i)), QueueDelay: ms(w), TTFT: ms(w + 5), E2E: ms(w + 50), PromptTokens: 10})
		}
		floor := func() Ideal { return Ideal{FloorsMS: []float64{10, 10}} }
		return measure(&fleet.Result{Records: recs}, nil, 16, 2, false, floor)
	}
	for _, tc := range []struct {
		name        string
		waits       []float64 // last arrival first
		early, late float64
		grew        bool
	}{
		{"steady", []float64{9, 9, 3, 3, 2, 2, 1, 1}, 1, 3, false},
		{"grows past twice and the floor", []float64{0, 0, 40, 40, 5, 5, 4, 4}, 4, 40, true},
		{"twice, not by the floor", []float64{0, 0, 17, 17, 5, 5, 4, 4}, 4, 17, false},
		{"exactly twice and the floor", []float64{0, 0, 18, 18, 5, 5, 4, 4}, 4, 18, false},
		{"only the last quarter grows", []float64{900, 900, 4, 4, 4, 4, 4, 4}, 4, 4, false},
		{"a third quarter of one", []float64{0, 0, 30, 1}, 1, 0, false},
	} {
		r := run(tc.waits...)
		if r.QueueEarlyMS != tc.early || r.QueueLateMS != tc.late || r.QueuesGrew != tc.grew {
			t.Errorf("%s: early %v late %v grew %v, want %v %v %v", tc.name, r.QueueEarlyMS, r.QueueLateMS, r.QueuesGrew, tc.early, tc.late, tc.grew)
		}
	}
	if e, l := queueQuarters(nil); e != 0 || l != 0 {
		t.Errorf("no records: %v %v", e, l)
	}
}

// The report lists the points where some policy's queues grew, with
// prefixring's and round-robin's seeds, and says so when none did.
func TestReportTablesQueuesThatGrew(t *testing.T) {
	mk := func(workload string, kv int, seed uint64, policy string, grew bool) Result {
		return Result{Grid: GridPolicies, Policy: policy, Workload: workload, Routers: 3, RateScale: 2, Endpoints: 8, KVBlocks: kv, Seed: seed,
			TTFTMeanMS: 30, TTFTP50MS: 30, TTFTP99MS: 90, HitRate: 0.5, QueueEarlyMS: float64(10 * seed), QueueLateMS: float64(1000 * seed), QueuesGrew: grew}
	}
	var rs []Result
	for seed := uint64(1); seed <= 3; seed++ {
		rs = append(rs, mk("multi-turn", 1500, seed, "chwbl", seed > 1), mk("multi-turn", 1500, seed, "round-robin", true),
			mk("multi-turn", 1500, seed, "chash", false), mk("multi-turn", 0, seed, "chwbl", false), mk("multi-turn", 0, seed, "round-robin", false))
	}
	const trace = "trace:x/conversation_trace.jsonl"
	for seed := uint64(1); seed <= 3; seed++ {
		rs = append(rs, mk(trace, 0, seed, "chwbl", seed == 3), mk(trace, 0, seed, "round-robin", false))
	}
	md := Markdown(rs, "test")
	reportHas(t, md,
		"## Queues that grew",
		"Queues grew in 6 of 21 runs at 3 router replicas, at 2 of 3 points.",
		// goals 2 and 4 say so beside their status
		"| multi-turn | ×2 | 1500 blk | 1.00 | 1.00 | 1.000 | 0.000 | — | **missed** (3 of 3 seeds), queues grew (2 of 3) |",
		"| multi-turn | ×2 | H100 | 1.00 | 1.00 | 1.000 | 0.000 | — | **missed** (3 of 3 seeds) |",
		"| spread | ×2 | H100 | 30 | 30 | 0 | 1.00 | 0.500 | 0.000 | — | **missed** (3 of 3 seeds), queues grew (1 of 3) |",
		"| multi-turn | ×2 | 1500 blk | 8 | **2** of 3 | **3** of 3 | 2 of 3 | 10–30 | 1000–3000 |",
	)
	if strings.Contains(md, "| multi-turn | ×2 | H100 | 8 | 0 of 3") {
		t.Errorf("report lists a point where no queue grew:\n%s", md)
	}
	var calm []Result
	for _, r := range rs {
		r.QueuesGrew = false
		calm = append(calm, r)
	}
	if md := Markdown(calm, "test"); !strings.Contains(md, "No run's did, of 21 at 3 router replicas.") || strings.Contains(md, ", queues grew (") {
		t.Errorf("report does not say that no queue grew:\n%s", md)
	}
}

// A closed loop's queues are bounded by its sessions: its runs are never
// marked, though the demo's round-robin runs meet the test (its third
// quarter, with the longest histories, waits on memory).
func TestClosedLoopQueuesAreNotMarked(t *testing.T) {
	g := CustomGrid()
	g.Workloads, g.Policies, g.Endpoints, g.KVBlocks, g.RateScales = []string{"demo"}, []string{"round-robin"}, []int{4}, []int{1000}, []float64{1}
	results, err := Run(Config{Grids: []Grid{g}, Seeds: []uint64{11, 12, 13}})
	if err != nil {
		t.Fatal(err)
	}
	met := 0
	for _, r := range results {
		if r.QueueLateMS > 2*r.QueueEarlyMS+r.TTFTFloorMeanMS {
			met++
		}
		if r.QueuesGrew {
			t.Errorf("seed %d: a closed loop marked as grown (queues %.0f → %.0f ms)", r.Seed, r.QueueEarlyMS, r.QueueLateMS)
		}
	}
	if met == 0 {
		t.Fatalf("no run meets the test: this one checks nothing")
	}
}
