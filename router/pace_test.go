package router

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
)

func paceSums() map[string]ring.PaceSums {
	return map[string]ring.PaceSums{
		"http://10.0.0.1:8000": {{Seconds: 1.5, Weight: 3000, N: 2}, {Seconds: 4, Weight: 2, N: 2}, {Seconds: -1.2, Weight: 2, N: 2}},
		"http://10.0.0.2:8000": {{}, {Seconds: 0.25, Weight: 1, N: 1}, {Seconds: math.Log(0.25), Weight: 1, N: 1}},
	}
}

// A record decodes to what was encoded; a malformed one is an error,
// never a panic or a pace fed nonsense.
func TestPaceRecordCodec(t *testing.T) {
	b := encodePace("r1", 42, paceSums())
	node, stamp, sums, err := decodePace(b)
	if err != nil || node != "r1" || stamp != 42 || !reflect.DeepEqual(sums, paceSums()) {
		t.Fatalf("round trip: %q %d %v %v", node, stamp, sums, err)
	}
	bad := func(mutate func(map[string]ring.PaceSums)) []byte {
		s := paceSums()
		mutate(s)
		return encodePace("r1", 1, s)
	}
	for name, rec := range map[string][]byte{
		"truncated":          b[:len(b)-3],
		"trailing bytes":     append(append([]byte{}, b...), 0),
		"NaN":                bad(func(s map[string]ring.PaceSums) { s["x"] = ring.PaceSums{{Seconds: math.NaN(), Weight: 1, N: 1}} }),
		"infinite weight":    bad(func(s map[string]ring.PaceSums) { s["x"] = ring.PaceSums{{}, {Seconds: 1, Weight: math.Inf(1), N: 1}} }),
		"negative count":     bad(func(s map[string]ring.PaceSums) { s["x"] = ring.PaceSums{{}, {Seconds: 1, Weight: 1, N: -1}} }),
		"negative seconds":   bad(func(s map[string]ring.PaceSums) { s["x"] = ring.PaceSums{{Seconds: -1, Weight: 1, N: 1}} }),
		"a count past bytes": append(encodePace("r1", 1, nil)[:4], 0xff, 0xff, 0x03),
		"empty":              nil,
	} {
		if _, _, _, err := decodePace(rec); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// Merge pools a live matching member's newest record only: not its own,
// not a record under another member's name, not an older one.
func TestPaceShareMerge(t *testing.T) {
	p := ring.NewPace(ring.DefaultPaceConfig())
	p.Forget([]string{"http://10.0.0.1:8000", "http://10.0.0.2:8000"})
	members := map[string]string{"r0": "a", "r1": "b"}
	now := time.Unix(1000, 0)
	s := newPaceShare(p, "r0", func() map[string]string { return members }, func() time.Time { return now })
	merged := func() bool { return len(p.PeerNodes()) > 0 }
	for name, tc := range map[string]struct {
		from string
		rec  []byte
	}{
		"own record":     {"r0", encodePace("r0", 5, paceSums())},
		"another's name": {"r1", encodePace("r2", 5, paceSums())},
		"not a member":   {"r2", encodePace("r2", 5, paceSums())},
	} {
		if _, err := s.Merge(tc.from, tc.rec); err != nil || merged() {
			t.Fatalf("%s: err %v, peers %v; want it ignored", name, err, p.PeerNodes())
		}
	}
	if _, err := s.Merge("r1", encodePace("r1", 5, paceSums())); err != nil || !reflect.DeepEqual(p.PeerNodes(), []string{"r1"}) {
		t.Fatalf("a member's record: err %v, peers %v", err, p.PeerNodes())
	}
	if _, err := s.Merge("r1", encodePace("r1", 4, nil)); err != nil || len(p.PeerSums("r1")) != 2 {
		t.Fatalf("an older record replaced the newer: err %v, sums %v", err, p.PeerSums("r1"))
	}
	if _, err := s.Merge("r1", encodePace("r1", 6, nil)); err != nil || len(p.PeerSums("r1")) != 0 {
		t.Fatalf("a newer record did not replace the older: err %v, sums %v", err, p.PeerSums("r1"))
	}
	if _, err := s.Merge("r1", []byte{1, 2}); err == nil {
		t.Fatal("a malformed record merged")
	}
	// The stamps of members gone are not kept for good.
	for i := range 20 {
		name := "old-" + string(rune('a'+i))
		members[name] = "x"
		if _, err := s.Merge(name, encodePace(name, 1, nil)); err != nil {
			t.Fatal(err)
		}
		delete(members, name)
	}
	if _, err := s.Merge("r1", encodePace("r1", 7, nil)); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	kept := len(s.last)
	s.mu.Unlock()
	if kept > 2*len(members)+8 {
		t.Fatalf("%d stamps kept for %d members", kept, len(members))
	}
}
