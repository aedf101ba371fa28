package prefix

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// A prefix is shared once it is continued in fanout ways, however few
// requests that takes; a prefix continued one way is never shared, however
// many requests send it.
func TestSketchCountsContinuationsNotRequests(t *testing.T) {
	s := NewSketch(4, 0)
	for range 1000 { // one busy conversation: every turn extends the last
		s.Observe([]uint64{1, 2, 3})
	}
	for i := range uint64(3) {
		s.Observe([]uint64{10, 100 + i})
	}
	if c := MergeSummaries(4, s.Summary(64)); c.Len() != 0 {
		t.Fatalf("shared %v, want none", c.Hashes())
	}
	s.Observe([]uint64{10, 103})
	if c := MergeSummaries(4, s.Summary(64)); !slices.Equal(c.Hashes(), []uint64{10}) {
		t.Fatalf("shared %v, want [10]", c.Hashes())
	}
}

// Replicas that each saw two continuations of a prefix find it shared
// together; the union does not depend on the order of the summaries.
func TestMergeSummariesUnitesReplicas(t *testing.T) {
	a, b := NewSketch(4, 0), NewSketch(4, 0)
	a.Observe([]uint64{7, 1})
	a.Observe([]uint64{7, 2})
	b.Observe([]uint64{7, 3})
	b.Observe([]uint64{7, 4})
	if MergeSummaries(4, a.Summary(8)).Len() != 0 || MergeSummaries(4, b.Summary(8)).Len() != 0 {
		t.Fatal("one replica alone should not find 7 shared")
	}
	ab := MergeSummaries(4, a.Summary(8), b.Summary(8)).Hashes()
	ba := MergeSummaries(4, b.Summary(8), a.Summary(8), a.Summary(8)).Hashes()
	if !slices.Equal(ab, []uint64{7}) || !slices.Equal(ab, ba) {
		t.Fatalf("merged %v and %v, want [7] both", ab, ba)
	}
}

// Rotate forgets after two epochs; the sketch stays near its size bound
// and keeps the most requested prefixes.
func TestSketchForgetsAndStaysBounded(t *testing.T) {
	s := NewSketch(2, 100)
	s.Observe([]uint64{5, 6})
	s.Observe([]uint64{5, 7})
	s.Rotate()
	if MergeSummaries(2, s.Summary(8)).Len() != 1 {
		t.Fatal("forgot after one epoch")
	}
	s.Rotate()
	if MergeSummaries(2, s.Summary(8)).Len() != 0 {
		t.Fatal("remembered after two epochs")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		s.Observe([]uint64{42, rng.Uint64()}) // a hot, shared prefix
	}
	for range 5000 {
		s.Observe([]uint64{rng.Uint64(), rng.Uint64()})
	}
	if s.Len() > 2*100+1 {
		t.Fatalf("sketch holds %d prefixes, bound about 200", s.Len())
	}
	if !slices.Contains(MergeSummaries(2, s.Summary(8)).Hashes(), 42) {
		t.Fatal("the hot prefix was pruned")
	}
}

// MergeShares: nothing until the replicas' counts cover
// EarlyShareRequests together, early shares until they cover
// MinShareRequests, then settled ones; each group's share of all their
// requests, whatever the order of the counts.
func TestMergeShares(t *testing.T) {
	few := GroupCounts{Groups: []SummaryEntry{{Hash: 1, Count: 10}}, Requests: EarlyShareRequests - 1}
	if s := MergeShares(few); s.Of != nil || s.Early {
		t.Fatalf("%d requests < %d gave shares %+v", few.Requests, EarlyShareRequests, s)
	}
	a := GroupCounts{Groups: []SummaryEntry{{Hash: 1, Count: 100}, {Hash: 2, Count: 20}}, Requests: 150}
	b := GroupCounts{Groups: []SummaryEntry{{Hash: 1, Count: 50}}, Requests: 100}
	if s := MergeShares(a, b); !s.Early || s.Of[1] != 150.0/250 || s.Of[2] != 20.0/250 {
		t.Fatalf("250 requests < %d gave %+v, want early shares 1: 0.6, 2: 0.08", MinShareRequests, s)
	}
	c := GroupCounts{Groups: []SummaryEntry{{Hash: 2, Count: 40}}, Requests: 150}
	abc, cba := MergeShares(a, b, c), MergeShares(c, b, a)
	if !maps.Equal(abc.Of, cba.Of) || abc.Early != cba.Early {
		t.Fatalf("order changed the shares: %+v against %+v", abc, cba)
	}
	if abc.Of[1] != 150.0/400 || abc.Of[2] != 60.0/400 || len(abc.Of) != 2 || abc.Early {
		t.Fatalf("shares %+v, want settled 1: 0.375, 2: 0.15", abc)
	}
}

// TestMergeSharesClampsCounts: a peer's counts (a record that holds the
// gossip key, from a bug or a hostile sender) are clamped to
// maxShareCount, as gossip clamps the counts of its entries, so their sum
// cannot wrap: a claim of nearly 2^64 requests drowns out the others'
// groups, but cannot turn the total into a handful (no shares, for
// everyone) or a group's count into nothing. Before, both wrapped.
func TestMergeSharesClampsCounts(t *testing.T) {
	honest := GroupCounts{Groups: []SummaryEntry{{Hash: 1, Count: 150}, {Hash: 2, Count: 100}}, Requests: 400}
	for _, c := range []struct {
		name    string
		hostile GroupCounts
		check   func(Shares) bool
	}{
		{"requests wrap the total to 10", GroupCounts{Requests: math.MaxUint64 - 389},
			func(s Shares) bool { return s.Of != nil && !s.Early && s.Of[1] < 1e-9 }},
		{"a group's count wraps to 1", GroupCounts{Groups: []SummaryEntry{{Hash: 1, Count: math.MaxUint64 - 148}}, Requests: math.MaxUint64 - 99},
			func(s Shares) bool { return !s.Early && s.Of[1] > 0.99 && s.Of[2] < 1e-9 }},
	} {
		for _, s := range []Shares{MergeShares(honest, c.hostile), MergeShares(c.hostile, honest)} {
			if !c.check(s) {
				t.Errorf("%s: shares %+v", c.name, s)
			}
		}
	}
}

// A key carries its group's share from the table and whether it is an
// early one, which the ring takes only for a group too common for one
// endpoint.
func TestKeyCarriesEarlyShares(t *testing.T) {
	body := []byte(`{"model":"llama","tools":[{"type":"function","function":{"name":"lookup"}}],"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan a trip to Lyon"}]}`)
	cfg := DefaultConfig()
	cfg.Common = NewCommon(nil)
	k, _ := New(cfg)
	first, err := k.Request(RouteChat, body, nil)
	if err != nil || first.GroupShare != 0 || first.EarlyShare {
		t.Fatalf("no shares known: %+v, %v", first, err)
	}
	for _, c := range []struct {
		requests uint64
		early    bool
	}{{40, true}, {MinShareRequests, false}} {
		shares := MergeShares(GroupCounts{Groups: []SummaryEntry{{Hash: first.Group, Count: c.requests / 4}}, Requests: c.requests})
		cfg.Common = NewCommon(nil).WithShares(shares)
		k, _ := New(cfg)
		got, err := k.Request(RouteChat, body, nil)
		if err != nil || got.GroupShare != float64(c.requests/4)/float64(c.requests) || got.EarlyShare != c.early {
			t.Fatalf("%d requests counted: share %v, early %v (%v); want early %v", c.requests, got.GroupShare, got.EarlyShare, err, c.early)
		}
	}
}
