package core

import (
	"slices"
	"testing"
	"time"

	"github.com/prefixring/prefixring/internal/wire"
)

// fixedLoads is a ring.Loads of fixed counts.
type fixedLoads map[string]int64

func (f fixedLoads) Load(id string) int64 { return f[id] }
func (f fixedLoads) Total() int64 {
	var t int64
	for _, n := range f {
		t += n
	}
	return t
}

// K rides in every entry beside the load and is summed and viewed as the
// load is: the others' published K plus this replica's own by the view's
// mode. Before, only the load (P) was gossiped and each replica bounded K
// by its own leases alone.
func TestKVIsGossipedLikeTheLoad(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	eps := []string{"http://a:1", "http://b:1"}
	other := NewEntryKV("r1", "r1", 1, 1, now, eps, map[string]int64{"http://a:1": 5}, map[string]int64{"http://a:1": 900, "http://b:1": 100}, nil)
	if got, err := DecodeEntry(AppendEntry(nil, other)); err != nil || !SameContent(got, other) || got.KV[0] != 900 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if SameContent(other, NewEntryKV("r1", "r1", 1, 1, now, eps, map[string]int64{"http://a:1": 5}, nil, nil)) {
		t.Fatal("entries that differ in K read as the same content: K would not be republished")
	}
	remote := SumRemote([]Entry{other}, Liveness{Self: "r0", StaleAfter: time.Second}, now)
	local := fixedLoads{"http://a:1": 300}
	for _, c := range []struct {
		mode      ViewMode
		a, total  int64
		published int64 // own K at its last publication on a
	}{
		{ViewExact, 300 + 900, 300 + 1000, 0},
		{ViewShared, 200 + 900, 200 + 1000, 200},
		{ViewOverlay, 300 + 900, 300 + 1000, 200},
	} {
		cl := NewClusterLoads(fixedLoads{}, c.mode)
		cl.SetRemote(remote)
		cl.SetOwn(NewEntryKV("r0", "r0", 1, 1, now, eps, nil, map[string]int64{"http://a:1": c.published}, nil))
		kv := cl.KV(local)
		if got := kv.Load("http://a:1"); got != c.a {
			t.Errorf("%s: K on a %d, want %d", c.mode, got, c.a)
		}
		if got := kv.Total(); got != c.total {
			t.Errorf("%s: K total %d, want %d", c.mode, got, c.total)
		}
		if got := cl.Load("http://a:1"); got != 5 {
			t.Errorf("%s: load (P) on a %d, want the other's 5 (no own load)", c.mode, got)
		}
	}
	// Replacing the entry takes its K out with its load.
	if r := remote.Replace(&other, nil); r.kv["http://a:1"] != 0 || r.kvTotal != 0 || r.Total() != 0 {
		t.Fatalf("after Replace: %+v", r)
	}
}

// sharedLoads is a fixedLoads of K whose shared parts are given apart.
type sharedLoads struct {
	fixedLoads
	shared fixedLoads
}

func (s sharedLoads) Shared(id string) int64 { return s.shared[id] }
func (s sharedLoads) SharedTotal() int64     { return s.shared.Total() }

// Three replicas holding requests of the same group on an engine count
// its shared part once: the cluster's K is every replica's own part plus
// the largest shared part, where the sum counted it three times (the
// demo's 1024-token system prompts, agentic's tool sets). It rides the
// wire, a shared part above its K is clamped on receipt, and replacing a
// replica's entry by its next one keeps the others' shared parts.
func TestKVSharedPartCountsOnce(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	eps := []string{"http://a:1", "http://b:1"}
	entry := func(node string, ver uint64, own, shared int64) Entry {
		return NewEntryKV(node, node, 1, ver, now, eps, nil, map[string]int64{"http://a:1": own + shared}, nil).
			WithKVShared(map[string]int64{"http://a:1": shared})
	}
	r1, r2 := entry("r1", 1, 300, 2000), entry("r2", 1, 500, 2000)
	got, err := DecodeEntry(AppendEntry(nil, r1))
	if err != nil || !SameContent(got, r1) || got.KVShared[0] != 2000 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if SameContent(r1, entry("r1", 1, 1300, 1000)) {
		t.Fatal("entries that differ only in their shared part read as the same content")
	}
	over := r1
	over.KVShared = []int64{9000, -5}
	if got, err := DecodeEntry(AppendEntry(nil, over)); err != nil || got.KVShared[0] != 2300 || got.KVShared[1] != 0 {
		t.Fatalf("a shared part above its K or below 0 was not clamped: %+v %v", got.KVShared, err)
	}

	live := func() *Remote { return SumRemote([]Entry{r1, r2}, Liveness{Self: "r0", StaleAfter: time.Second}, now) }
	remote := live()
	orig := remote
	if remote.kv["http://a:1"] != 800 || remote.shared["http://a:1"] != 2000 || remote.kvTotal != 800 || remote.sharedTotal != 2000 {
		t.Fatalf("remote: own parts %v (total %d), shared %v (total %d); want 800 and 2000", remote.kv, remote.kvTotal, remote.shared, remote.sharedTotal)
	}
	local := sharedLoads{fixedLoads{"http://a:1": 2100}, fixedLoads{"http://a:1": 2000}}
	for _, mode := range []ViewMode{ViewExact, ViewOverlay} {
		cl := NewClusterLoads(fixedLoads{}, mode)
		cl.SetRemote(remote)
		cl.SetOwn(entry("r0", 1, 100, 2000))
		kv := cl.KV(local)
		if got := kv.Load("http://a:1"); got != 100+800+2000 {
			t.Errorf("%s: K on a %d, want 2900 (the shared 2000 once)", mode, got)
		}
		if got := kv.Total(); got != 100+800+2000 {
			t.Errorf("%s: K total %d, want 2900", mode, got)
		}
	}
	// A replica's next entry replaces its last: with r2's group gone and
	// r1's shared part grown, the largest is r1's.
	next := entry("r1", 2, 300, 2500)
	remote = remote.Replace(&r1, &next)
	if remote.shared["http://a:1"] != 2500 || remote.kv["http://a:1"] != 800 || remote.peers != 2 {
		t.Fatalf("after Replace: shared %v, own parts %v, peers %d", remote.shared, remote.kv, remote.peers)
	}
	gone := entry("r2", 2, 500, 0)
	remote = remote.Replace(&r2, &gone).Replace(&next, nil)
	if remote.shared["http://a:1"] != 0 || remote.sharedTotal != 0 || remote.kv["http://a:1"] != 500 {
		t.Fatalf("after both groups left: shared %v (total %d), own parts %v", remote.shared, remote.sharedTotal, remote.kv)
	}
	if orig.shared["http://a:1"] != 2000 || len(orig.sharedBy["http://a:1"]) != 2 || orig.kv["http://a:1"] != 800 {
		t.Fatalf("Replace changed the Remote it was called on: %v %v", orig.shared, orig.sharedBy)
	}
}

// Shared parts go on the wire sparse (1 byte when none): a 500-endpoint
// delta still fits one packet. Indexes that do not rise within the
// endpoints are refused.
func TestKVSharedSparse(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	eps := []string{"a", "b", "c", "d"}
	e := NewEntryKV("r1", "r1", 1, 1, now, eps, nil, map[string]int64{"b": 900, "d": 70}, nil).
		WithKVShared(map[string]int64{"b": 800, "d": 70})
	got, err := DecodeEntry(AppendEntry(nil, e))
	if err != nil || !slices.Equal(got.KVShared, []int64{0, 800, 0, 70}) {
		t.Fatalf("round trip: %v %v", got.KVShared, err)
	}
	none := NewEntryKV("r1", "r1", 1, 1, now, eps, nil, map[string]int64{"b": 900, "d": 70}, nil)
	if d := len(AppendEntry(nil, e)) - len(AppendEntry(nil, none)); d != 2+2+1+1 {
		t.Fatalf("two shared parts cost %d bytes over none, want 6 (two gaps of 1 byte, 800 and 70 as 2-byte varints)", d)
	}
	for _, b := range [][]byte{
		{2, 1, 4, 0, 4}, // the second index does not rise
		{1, 4, 4},       // index 4 of 4
		{5},             // more parts than endpoints
	} {
		r := wire.NewReader(b)
		if v := readSparse(r, 4); r.Err() == nil {
			t.Errorf("% x read as %v", b, v)
		}
	}
}

// The overlay view mirrors K's unpublished growth as it does P's: a
// replica's K placed since its last publication counts once more for each
// other replica (they presumably placed as much), the shared parts not (the
// others' placements of a group share its one copy) and releases not.
func TestOverlayMirrorsKVGrowth(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	eps := []string{"http://a:1", "http://b:1"}
	entry := func(node string, own, shared int64) Entry {
		return NewEntryKV(node, node, 1, 1, now, eps, nil, map[string]int64{"http://a:1": own + shared}, nil).
			WithKVShared(map[string]int64{"http://a:1": shared})
	}
	remote := SumRemote([]Entry{entry("r1", 300, 2000), entry("r2", 500, 2000)}, Liveness{Self: "r0", StaleAfter: time.Second}, now)
	for _, tc := range []struct {
		name             string
		mode             ViewMode
		mirrors          int
		live, liveShared int64
		want             int64
	}{
		{"no mirrors", ViewOverlay, 0, 2600, 2000, 2600 + 800},
		{"500 placed since the publication, 2 mirrors", ViewOverlay, 2, 2600, 2000, 2600 + 2*500 + 800},
		{"a new shared part counts once", ViewOverlay, 2, 3600, 3000, 3600 + 2*500 + 800},
		{"released below the publication", ViewOverlay, 2, 2050, 2000, 2100 + 800},
		{"the shared view does not mirror", ViewShared, 2, 2600, 2000, 2100 + 800},
	} {
		cl := NewClusterLoads(fixedLoads{}, tc.mode)
		cl.SetRemote(remote)
		cl.SetOwn(entry("r0", 100, 2000))
		cl.SetMirrors(tc.mirrors)
		kv := cl.KV(sharedLoads{fixedLoads{"http://a:1": tc.live}, fixedLoads{"http://a:1": tc.liveShared}})
		if got, total := kv.Load("http://a:1"), kv.Total(); got != tc.want || total != tc.want {
			t.Errorf("%s: K on a %d, total %d; want %d", tc.name, got, total, tc.want)
		}
	}
}
