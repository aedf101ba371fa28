package eval

import (
	"testing"

	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/ring"
)

// TestLocalFalseSpillReadsTrueKV: a chwbl-local replica holding K at a
// key's home spills a request off it, its own K too close to the
// engine's capacity and to its own share of K; by the true cluster-wide
// K, which the other replica's requests elsewhere raise, the home's
// share had room, so the spill is a false one.
func TestLocalFalseSpillReadsTrueKV(t *testing.T) {
	ids := []string{"engine-0", "engine-1", "engine-2", "engine-3"}
	m := &multi{spills: true}
	for i := range 2 {
		bal, err := ring.NewBalancer(ring.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		eps := make([]ring.Endpoint, len(ids))
		for k, id := range ids {
			eps[k] = ring.Endpoint{ID: id, Healthy: true, KVCapacity: 1000}
		}
		if err := bal.Update(eps); err != nil {
			t.Fatal(err)
		}
		p, err := policy.New("chwbl-local", bal, bal, replicaSeed(1, i))
		if err != nil {
			t.Fatal(err)
		}
		m.ps, m.bals = append(m.ps, p), append(m.bals, bal)
	}
	home, _ := m.bals[1].Home(7)
	var held []ring.Lease
	defer func() {
		for _, l := range held {
			l.Release()
		}
	}()
	held = append(held, m.bals[1].AcquireOn(ring.Request{Key: 7, Keyed: true, Tokens: 800}, home, ring.DecisionHome))
	for _, id := range ids {
		if id != home { // K far past the capacity elsewhere: the home's share of it is large
			held = append(held, m.bals[0].AcquireOn(ring.Request{Key: 1, Keyed: true, Tokens: 3000}, id, ring.DecisionHome))
		}
	}
	m.turn = 1
	l, err := m.Acquire(ring.Request{Key: 7, Keyed: true, Tokens: 200})
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, l)
	if l.Decision == ring.DecisionHome {
		t.Fatalf("replica 1 kept %s home on its own K", home)
	}
	if m.Keyed != 1 || m.False != 1 {
		t.Fatalf("%d false spills of %d keyed, want 1 of 1: by the true K the home had room", m.False, m.Keyed)
	}
}
