package workers

import (
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
