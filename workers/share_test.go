package workers

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The share's sections round-trip through a peer's Merge; a truncated one
// is refused and changes nothing; only a local change fires Changed.
func TestShareRoundTrip(t *testing.T) {
	a, b := NewSet("r0", nil, 0), NewSet("r1", nil, 0)
	sa, sb := NewShare(a), NewShare(b)
	if sa.Tag() != Tag || sa.Local() != nil || sa.State(true) != nil {
		t.Fatal("an empty set has a section")
	}
	a.Add("http://a:1")
	a.Add("http://b:1")
	a.Remove("http://b:1")
	select {
	case <-sa.Changed():
	default:
		t.Fatal("a local change did not fire Changed")
	}
	for _, sec := range [][]byte{sa.Local(), sa.State(false)} {
		for i := range len(sec) {
			if _, err := sb.Merge("r0", sec[:i]); err == nil {
				t.Fatalf("truncated to %d bytes merged", i)
			}
		}
		if reply, err := sb.Merge("r0", sec); err != nil || reply != nil {
			t.Fatalf("merge: %v, reply %x", err, reply)
		}
	}
	if !slices.Equal(b.Members(), []string{"http://a:1"}) || !slices.Equal(b.Ops(), a.Ops()) {
		t.Fatalf("peer holds %v, ops %v", b.Members(), b.Ops())
	}
	select {
	case <-sb.Changed():
		t.Fatal("a merged change fired Changed: it would be re-sent")
	default:
	}
}

// State drops tombstones past their time to live before it is sent.
func TestShareStateCollectsTombstones(t *testing.T) {
	now := time.Unix(1e6, 0)
	s := NewSet("r0", func() time.Time { return now }, time.Hour)
	sh := NewShare(s)
	s.Add("http://a:1")
	s.Remove("http://a:1")
	if sh.State(false) == nil {
		t.Fatal("a fresh tombstone was not sent")
	}
	now = now.Add(2 * time.Hour)
	if st := sh.State(false); st != nil {
		t.Fatalf("an expired tombstone was sent: %x", st)
	}
}

// An add or a removal costs O(1) gossip: Local, what a change sends every
// member, carries the ops this replica made since its last send, not the
// whole set. Before, every add re-sent every op held: 300 adds sent 300²/2
// ops (the issue measured 1.3–2.1 MB of gossip).
func TestLocalSendsOnlyNewOps(t *testing.T) {
	s := NewSet("r0", nil, 0)
	if err := s.SetPolicy(Policy{MaxURLBytes: DefaultMaxURLBytes, MaxWorkers: 400}); err != nil {
		t.Fatal(err)
	}
	sh := NewShare(s)
	total, most := 0, 0
	for i := range 300 {
		if !s.Add(fmt.Sprintf("http://10.0.%d.%d:8000", i/250, i%250+1)) {
			t.Fatalf("add %d refused", i)
		}
		b := sh.Local()
		ops, err := DecodeOps(b)
		if err != nil || len(ops) != 1 {
			t.Fatalf("add %d: Local carried %d ops (%v), want 1", i, len(ops), err)
		}
		total, most = total+len(b), max(most, len(b))
	}
	if sh.Local() != nil {
		t.Fatal("Local with nothing new is not nil")
	}
	t.Logf("300 adds: %d bytes of Local in all, at most %d a send", total, most)
	// A removal is an op too; ops merged from a peer are not re-sent.
	s.Remove("http://10.0.0.1:8000")
	if ops, _ := DecodeOps(sh.Local()); len(ops) != 1 || !ops[0].Removed {
		t.Fatalf("after a removal: %+v", ops)
	}
	s.Merge([]Op{{URL: "http://10.9.9.9:8000", Stamp: 1 << 40, Origin: "r1"}})
	if b := sh.Local(); b != nil {
		t.Fatalf("a merged op was re-sent: %x", b)
	}
	// State (push/pull, a join) still carries every op.
	if ops, _ := DecodeOps(sh.State(true)); len(ops) != 301 {
		t.Fatalf("State carries %d ops, want 301 (300 URLs, one removed, one merged)", len(ops))
	}
}
