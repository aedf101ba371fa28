package policy

import (
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
)

var t0 = time.Unix(1_700_000_000, 0)

func memory(t *testing.T, max int, ttl time.Duration) *FollowMemory {
	t.Helper()
	m, err := NewFollowMemory(FollowConfig{Max: max, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestFollowConfigValidate(t *testing.T) {
	if err := DefaultFollowConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range []FollowConfig{{Max: 0, TTL: time.Second}, {Max: 1, TTL: 0}} {
		if _, err := NewFollowMemory(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// A turn off home is remembered, a turn home forgets it, and so does the
// TTL.
func TestFollowMemoryRemembersUntilHomeOrTTL(t *testing.T) {
	m := memory(t, 8, time.Minute)
	m.Record(1, "b", false, t0)
	if id, ok := m.Where(1, t0.Add(time.Minute)); !ok || id != "b" {
		t.Fatalf("after a spill to b: %q %v", id, ok)
	}
	m.Record(1, "c", false, t0.Add(2*time.Minute))
	if id, _ := m.Where(1, t0.Add(2*time.Minute)); id != "c" {
		t.Fatalf("after a spill to c: %q", id)
	}
	m.Record(1, "a", true, t0.Add(3*time.Minute))
	if id, ok := m.Where(1, t0.Add(3*time.Minute)); ok {
		t.Fatalf("after a turn home: %q", id)
	}
	m.Record(2, "b", false, t0)
	if id, ok := m.Where(2, t0.Add(time.Minute+1)); ok || m.Len() != 0 {
		t.Fatalf("past the TTL: %q %v, %d kept", id, ok, m.Len())
	}
}

// Beyond Max keys the least recently recorded goes first.
func TestFollowMemoryEvictsLeastRecent(t *testing.T) {
	m := memory(t, 2, time.Hour)
	m.Record(1, "b", false, t0)
	m.Record(2, "b", false, t0)
	m.Record(1, "c", false, t0) // 1 is now the most recent
	m.Record(3, "b", false, t0)
	if m.Len() != 2 {
		t.Fatalf("%d keys kept, want 2", m.Len())
	}
	if _, ok := m.Where(2, t0); ok {
		t.Fatal("key 2, least recent, was kept")
	}
	for _, k := range []uint64{1, 3} {
		if _, ok := m.Where(k, t0); !ok {
			t.Fatalf("key %d was evicted", k)
		}
	}
}

// scripted is a Picker that answers each request with the next lease of
// its script and keeps the requests it saw.
type scripted struct {
	leases []ring.Lease
	seen   []ring.Request
}

func (s *scripted) Acquire(req ring.Request) (ring.Lease, error) {
	s.seen = append(s.seen, req)
	l := s.leases[0]
	s.leases = s.leases[1:]
	return l, nil
}

// Follow hands the balancer where the key's last turn went off home, and
// nothing after a turn home; unkeyed requests pass untouched.
func TestFollowPassesWhereTheLastTurnSpilled(t *testing.T) {
	next := &scripted{leases: []ring.Lease{
		{Endpoint: "b", Decision: ring.DecisionSpill}, // turn 1 spills to b
		{Endpoint: "b", Decision: ring.DecisionSpill}, // turn 2 follows
		{Endpoint: "a", Decision: ring.DecisionHome},  // turn 3: b was full, home
		{Endpoint: "c", Decision: ring.DecisionFallback},
		{Endpoint: "d", Decision: ring.DecisionFallback}, // unkeyed
	}}
	f := NewFollow(next, memory(t, 8, time.Minute), func() time.Time { return t0 })
	req := ring.Request{Key: 5, Keyed: true}
	for range 4 {
		if _, err := f.Acquire(req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Acquire(ring.Request{Key: 5}); err != nil {
		t.Fatal(err)
	}
	want := []string{"", "b", "b", "", ""}
	for i, r := range next.seen {
		if r.Follow != want[i] {
			t.Errorf("request %d: Follow %q, want %q", i, r.Follow, want[i])
		}
	}
	if n := f.Followed.Load(); n != 1 {
		t.Errorf("followed %d, want 1", n)
	}
}

// Through a real balancer: a turn whose home is full spills, and the next
// turn goes where it spilled though its home has room again; chwbl alone
// sends it home.
func TestFollowKeepsTheConversationWhereItSpilled(t *testing.T) {
	b := balancer(t)
	const key = 11
	home, _ := b.Home(key)
	var holds []ring.Lease
	for range 5 { // the home at its floor (4 requests) and over
		holds = append(holds, b.AcquireOn(ring.Request{Key: 99, Keyed: true}, home, ring.DecisionHome))
	}
	f := NewFollow(b, memory(t, 8, time.Minute), func() time.Time { return t0 })
	first, err := f.Acquire(ring.Request{Key: key, Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	first.Release()
	if first.Decision != ring.DecisionSpill {
		t.Fatalf("turn 1 went to %s %v, want a spill", first.Endpoint, first.Decision)
	}
	for _, h := range holds {
		h.Release()
	}
	if got := pick(t, f, ring.Request{Key: key, Keyed: true}); got != first.Endpoint {
		t.Fatalf("turn 2 went to %s, want %s where turn 1 spilled", got, first.Endpoint)
	}
	if got := pick(t, b, ring.Request{Key: key, Keyed: true}); got != home {
		t.Fatalf("chwbl alone sent turn 2 to %s, want home %s", got, home)
	}
}
