package core

import (
	"testing"
	"time"
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
