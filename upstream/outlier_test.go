package upstream

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func ejectedIDs(s *Set) []string {
	var out []string
	for _, h := range s.Health() {
		if h.Ejected {
			out = append(out, h.ID)
		}
	}
	return out
}

func guarded() HealthConfig {
	c := fastHealth()
	c.MaxEjectionPercent, c.PanicThreshold = 20, 50
	return c
}

// TestEjectionCap: failed requests eject at most MaxEjectionPercent of the
// endpoints, and at least one.
func TestEjectionCap(t *testing.T) {
	for _, tc := range []struct{ n, pct, want int }{{2, 20, 1}, {9, 20, 1}, {10, 20, 2}, {16, 20, 3}, {4, 100, 4}, {4, 0, 1}} {
		cfg := guarded()
		cfg.MaxEjectionPercent = tc.pct
		s := newTestSet(t, cfg, newFakeNet())
		var ids []string
		for i := range tc.n {
			ids = append(ids, fmt.Sprintf("http://e%d:1", i))
		}
		_ = s.SetSource("static", ids)
		for _, id := range ids {
			for range 3 {
				s.ObserveFailure(id, errors.New("refused"))
			}
		}
		if got := len(ejectedIDs(s)); got != tc.want {
			t.Errorf("%d endpoints at %d%%: %d ejected, want %d", tc.n, tc.pct, got, tc.want)
		}
	}
}

// TestPanicRoutesToAll: below the panic threshold every endpoint is routed
// as healthy; above it, the ejected ones are out again.
func TestPanicRoutesToAll(t *testing.T) {
	cfg := guarded()
	cfg.MaxEjectionPercent = 100
	s := newTestSet(t, cfg, newFakeNet())
	_ = s.SetSource("static", []string{"http://a:1", "http://b:1", "http://c:1"})
	for range 3 {
		s.ObserveFailure("http://a:1", errors.New("refused"))
	}
	if got := healthyIDs(s); !slices.Equal(got, []string{"http://b:1", "http://c:1"}) || s.Snapshot().Panic {
		t.Fatalf("one of three out: healthy %v, panic %v", got, s.Snapshot().Panic)
	}
	for range 3 {
		s.ObserveFailure("http://b:1", errors.New("refused"))
	}
	if got := healthyIDs(s); len(got) != 3 || !s.Snapshot().Panic {
		t.Fatalf("two of three out (33%% healthy < 50%%): healthy %v, panic %v", got, s.Snapshot().Panic)
	}
	cfg.PanicThreshold = 0
	off := newTestSet(t, cfg, newFakeNet())
	_ = off.SetSource("static", []string{"http://a:1"})
	for range 3 {
		off.ObserveFailure("http://a:1", errors.New("refused"))
	}
	if got := healthyIDs(off); len(got) != 0 {
		t.Fatalf("panic off: healthy %v", got)
	}
}

// TestRequestsFaultCountsAgainstNone: a request's repeated 5xx on one
// endpoint counts once; a second endpoint's 5xx for it withdraws the first
// one's (undoing an ejection that rested on it); distinct requests failing
// on one endpoint eject it; a request that fails on one and succeeds on
// another leaves the first's failure counted.
func TestRequestsFaultCountsAgainstNone(t *testing.T) {
	cfg := guarded()
	cfg.MaxEjectionPercent = 100
	cfg.PanicThreshold = 0
	s := newTestSet(t, cfg, newFakeNet())
	_ = s.SetSource("static", []string{"http://a:1", "http://b:1", "http://c:1"})
	for range 10 {
		s.ObserveServerError("http://a:1", 1, 500)
	}
	if got := ejectedIDs(s); len(got) != 0 {
		t.Fatalf("one request's retries ejected %v", got)
	}
	s.ObserveServerError("http://a:1", 2, 500)
	s.ObserveServerError("http://a:1", 3, 500)
	if got := ejectedIDs(s); !slices.Equal(got, []string{"http://a:1"}) {
		t.Fatalf("three requests failing on a: ejected %v", got)
	}
	s.ObserveServerError("http://b:1", 3, 500) // request 3 fails on b too: its fault
	s.ObserveServerError("http://c:1", 3, 500)
	if got := ejectedIDs(s); len(got) != 0 {
		t.Fatalf("after request 3 failed on b and c: ejected %v, want none", got)
	}
	s.ObserveSuccess("http://b:1") // request 2 served elsewhere: a's failure stands
	s.ObserveServerError("http://a:1", 4, 500)
	if got := ejectedIDs(s); !slices.Equal(got, []string{"http://a:1"}) {
		t.Fatalf("requests 1, 2 and 4 failing on a only: ejected %v", got)
	}
}
