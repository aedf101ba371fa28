package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
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
// endpoints, rounded down, and at least one (one of 3 at 20%).
func TestEjectionCap(t *testing.T) {
	for _, tc := range []struct{ n, pct, want int }{{1, 20, 1}, {2, 20, 1}, {3, 20, 1}, {9, 20, 1}, {10, 20, 2}, {16, 20, 3}, {4, 100, 4}, {4, 0, 1}} {
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

// TestDeadEndpointLeavesTheEjectionCap: an engine that dies with requests
// in flight is ejected for its failed requests before its probes notice;
// once its probes fail as often too it is out for them, and no longer
// counts against MaxEjectionPercent, which caps request ejections only.
// Until stop 40 it held the cap's one slot for as long as its host stayed
// down, so a second endpoint that answered its probes but failed every
// request with 500 was never ejected.
func TestDeadEndpointLeavesTheEjectionCap(t *testing.T) {
	s, fn, cfg, now := capOfOne(t)

	fn.set("a:1", true) // a dies: its requests fail at once
	for range 3 {
		s.ObserveFailure("http://a:1", errors.New("connection refused"))
	}
	for range cfg.FailureThreshold { // then its probes
		*now = now.Add(cfg.Interval)
		s.ProbeAll(context.Background())
	}
	for req := uint64(1); req <= 10; req++ { // b answers probes, fails requests
		s.ObserveServerError("http://b:1", req, 500)
	}
	if got := ejectedIDs(s); !slices.Equal(got, []string{"http://a:1", "http://b:1"}) {
		t.Fatalf("ejected %v, want a (dead) and b (failing its requests)", got)
	}

	fn.set("a:1", false) // a comes back: its first passing probe after its ejection time returns it
	*now = now.Add(cfg.BaseEjection)
	s.ProbeAll(context.Background())
	if got := ejectedIDs(s); slices.Contains(got, "http://a:1") {
		t.Fatalf("a answers its probes again and is still out: ejected %v", got)
	}
}

// TestCappedEndpointRemembersBoundedFailures: an endpoint the ejection cap
// keeps in while it answers every request with 5xx remembers at most as
// many failed requests as the fault ledger holds (faultCap), and warns
// once that it was not ejected, not once a request. Until stop 40 its set
// of failed requests grew with its traffic (about 8.6 million a day at
// 100 requests a second) and it logged a warning for each.
func TestCappedEndpointRemembersBoundedFailures(t *testing.T) {
	cfg := fastHealth()
	cfg.MaxEjectionPercent, cfg.PanicThreshold = 20, 50
	var logs countingHandler
	s := newTestSet(t, cfg, newFakeNet(), func(o *Options) { o.Log = slog.New(&logs) })
	_ = s.SetSource("static", []string{"http://a:1", "http://b:1", "http://c:1", "http://d:1", "http://e:1"})
	for range 3 {
		s.ObserveFailure("http://a:1", errors.New("connection refused")) // a takes the one slot
	}
	for req := uint64(1); req <= 3*faultCap; req++ {
		s.ObserveServerError("http://b:1", req, 500)
	}
	s.mu.Lock()
	got := len(s.checks["http://b:1"].pending)
	s.mu.Unlock()
	if got > faultCap {
		t.Fatalf("the capped endpoint remembers %d failed requests, more than the fault ledger's %d", got, faultCap)
	}
	if n := logs.count("endpoint not ejected: the ejection cap is reached"); n != 1 {
		t.Fatalf("%d warnings that the cap kept b in, want 1", n)
	}
}

// countingHandler counts log records by message.
type countingHandler struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[r.Message]++
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

// TestFlakyProbesKeepARequestEjectionInTheCap: an endpoint out for its
// failed requests whose probes fail now and then, never FailureThreshold in
// a row, is not out for its probes: it still holds the ejection cap's slot,
// so a second endpoint failing its requests stays in. A passing probe
// breaks the run of failed ones, as it does for an endpoint not ejected.
func TestFlakyProbesKeepARequestEjectionInTheCap(t *testing.T) {
	s, fn, cfg, now := capOfOne(t)

	for range 3 { // a fails its requests: it takes the cap's one slot
		s.ObserveFailure("http://a:1", errors.New("connection refused"))
	}
	for i := range 2*cfg.FailureThreshold - 1 { // its probes fail every other time
		fn.set("a:1", i%2 == 0)
		*now = now.Add(cfg.Interval)
		s.ProbeAll(context.Background())
	}
	for req := uint64(1); req <= 10; req++ {
		s.ObserveServerError("http://b:1", req, 500)
	}
	if got := ejectedIDs(s); !slices.Equal(got, []string{"http://a:1"}) {
		t.Fatalf("ejected %v, want only a: its probes never failed %d in a row, so it still holds the cap's slot", got, cfg.FailureThreshold)
	}
}

// TestRevivedEndpointRespectsTheEjectionCap: an endpoint out for its
// failed requests whose host then died is out for its probes and leaves
// the ejection cap, so a second endpoint failing its requests takes the
// cap's slot. When the first one's host answers its probes again, as an
// endpoint out for its probes it returns at its first passing probe:
// held out for its old ejection time instead, it was a second endpoint out
// for failed requests beside the one the cap allows, uncounted.
func TestRevivedEndpointRespectsTheEjectionCap(t *testing.T) {
	s, fn, cfg, now := capOfOne(t)

	for range cfg.FailureThreshold { // a fails its requests: the cap's one slot
		s.ObserveFailure("http://a:1", errors.New("connection reset"))
	}
	fn.set("a:1", true) // then its host dies
	for range cfg.FailureThreshold {
		*now = now.Add(cfg.Interval)
		s.ProbeAll(context.Background())
	}
	for req := uint64(1); req <= 10; req++ { // b takes the slot a left
		s.ObserveServerError("http://b:1", req, 500)
	}
	fn.set("a:1", false) // a's host is back, well within a's ejection time
	*now = now.Add(cfg.Interval)
	s.ProbeAll(context.Background())
	if got := ejectedIDs(s); !slices.Equal(got, []string{"http://b:1"}) {
		t.Fatalf("every probe passes and %v are out; want only b, the one endpoint the cap lets failed requests hold out", got)
	}
}

// capOfOne is five endpoints (a to e) whose ejection cap (20 %) holds one
// of them out for its requests, on a clock the test moves through now.
func capOfOne(t *testing.T) (*Set, *fakeNet, HealthConfig, *time.Time) {
	t.Helper()
	now := time.Unix(1_000_000, 0)
	fn := newFakeNet()
	cfg := fastHealth()
	cfg.MaxEjectionPercent, cfg.PanicThreshold = 20, 50
	s := newTestSet(t, cfg, fn, func(o *Options) { o.Now = func() time.Time { return now } })
	_ = s.SetSource("static", []string{"http://a:1", "http://b:1", "http://c:1", "http://d:1", "http://e:1"})
	return s, fn, cfg, &now
}
