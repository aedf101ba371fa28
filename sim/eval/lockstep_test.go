package eval

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/fleet"
)

// runRecords reads the per-request records of run r, in arrival order.
func runRecords(t *testing.T, dir string, r Result) []fleet.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, recordsName(r)))
	if err != nil {
		t.Fatal(err)
	}
	var recs []fleet.Record
	for line := range strings.Lines(string(b)) {
		var rec fleet.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	slices.SortStableFunc(recs, func(a, b fleet.Record) int { return cmp.Compare(a.Arrival, b.Arrival) })
	return recs
}

// TestLeastLoadReplicasAreNotInStep: the study's least-load and
// least-tokens replicas, each seeing only its own counts and sent the
// requests in turn, break their ties from places of their own. In step,
// as they were until stop 40, two in three consecutive requests went to
// one engine (on 4 engines, about one in four would by chance), which cost
// least-load a quarter of its mean TTFT on multi-turn ×1 and least-tokens
// two fifths on ×2 (one seed).
func TestLeastLoadReplicasAreNotInStep(t *testing.T) {
	g := CustomGrid()
	g.Workloads, g.Policies, g.Endpoints, g.Routers, g.RateScales = []string{"multi-turn"}, []string{"least-load", LeastTokens}, []int{4}, []int{3}, []float64{0.25, 1}
	cfg := Config{Grids: []Grid{g}, Seeds: []uint64{1}, Requests: 300, Records: t.TempDir()}
	results, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		recs := runRecords(t, cfg.Records, r)
		same := 0
		for i := 1; i < len(recs); i++ {
			if recs[i].Endpoint == recs[i-1].Endpoint {
				same++
			}
		}
		if share := float64(same) / float64(len(recs)-1); share > 0.45 {
			t.Errorf("%s ×%g: %.2f of consecutive requests on one engine; replicas in step send 2/3", r.Policy, r.RateScale, share)
		}
	}
}

// TestSessionPolicyFollowsSessions: the study's session policy sees each
// request's session id, as serve does from its session header, and keeps
// a conversation's turns on one engine. Until stop 40 eval never set the
// id, so every request fell back to least-load, and --full's session row
// was least-load's under another name.
func TestSessionPolicyFollowsSessions(t *testing.T) {
	g := CustomGrid()
	g.Workloads, g.Policies, g.Endpoints, g.Routers, g.RateScales = []string{"multi-turn"}, []string{"session", "least-load"}, []int{4}, []int{3}, []float64{1}
	results, err := Run(Config{Grids: []Grid{g}, Seeds: []uint64{1}, Requests: 300})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Policy == "session" && (r.SameEngineTurns == nil || *r.SameEngineTurns != 1) {
			t.Errorf("session: %v of later turns on their conversation's engine, want all", r.SameEngineTurns)
		}
	}
	if results[0].HitRate == results[1].HitRate {
		t.Errorf("session and least-load hit alike (%v): session is least-load", results[0].HitRate)
	}
}

// An empty load signal is an error, not a pass that skips the grid's
// remaining checks: until stop 40 Grid.Validate returned nil at the first
// empty signal, so a grid with a gossip interval of 0 was accepted.
func TestGridValidateRefusesAnEmptySignal(t *testing.T) {
	g := CustomGrid()
	g.Signals = []ring.Signal{""}
	if g.Validate() == nil {
		t.Fatal("a grid with an empty load signal accepted")
	}
	g.Signals = []ring.Signal{ring.SignalTokens}
	g.GossipIntervals = []time.Duration{0}
	if g.Validate() == nil {
		t.Fatal("a grid with a gossip interval of 0 accepted")
	}
}
