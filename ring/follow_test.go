package ring

import "testing"

// TestFollowIsTriedFirstWithinItsBounds: a keyed request with Follow goes
// there (as a spill) while it is usable and within the bounds, whatever
// its home's load; otherwise, or when Follow is its home or unknown, the
// walk places it as without.
func TestFollowIsTriedFirstWithinItsBounds(t *testing.T) {
	r := mustRing(t, fleet(5, 0))
	const k = uint64(42)
	order := r.Candidates(k, nil)
	home, third := r.ID(order[0]), r.ID(order[2])
	idle := NewState(r, nil, nil, Bound{LoadFactor: 1.25})
	full := NewState(r, nil, mapLoads{third: 10}, Bound{LoadFactor: 1.25})
	sick := make([]bool, r.Len())
	for i := range sick {
		sick[i] = i != order[2]
	}
	for _, tc := range []struct {
		name    string
		follow  string
		exclude []string
		s       *State
		want    string
		d       Decision
	}{
		{"none", "", nil, idle, home, DecisionHome},
		{"followed", third, nil, idle, third, DecisionSpill},
		{"follow over its bound", third, nil, full, home, DecisionHome},
		{"follow unhealthy", third, nil, NewState(r, sick, nil, Bound{LoadFactor: 1.25}), home, DecisionHome},
		{"follow already tried", third, []string{third}, idle, home, DecisionHome},
		{"follow is the home", home, nil, idle, home, DecisionHome},
		{"follow unknown", "gone", nil, idle, home, DecisionHome},
	} {
		i, d, err := r.Pick(Request{Key: k, Keyed: true, Follow: tc.follow, Exclude: tc.exclude}, tc.s)
		if err != nil || r.ID(i) != tc.want || d != tc.d {
			t.Errorf("%s: picked %s %v (%v), want %s %v", tc.name, r.ID(i), d, err, tc.want, tc.d)
		}
	}
}

// TestFollowIsBoundedInKV: K's bound refuses a followed endpoint whose
// engine's KV is full, and the walk takes the request home.
func TestFollowIsBoundedInKV(t *testing.T) {
	b, err := NewBalancer(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c", "d"}
	setKVCapacity(t, b, 4000, ids...)
	home, _ := b.Home(9)
	follow := "a"
	if follow == home {
		follow = "b"
	}
	req := Request{Key: 9, Keyed: true, Tokens: 1000, Follow: follow}
	if id, d, _ := b.Decide(req, nil); id != follow || d != DecisionSpill {
		t.Fatalf("idle: went to %s %v, want %s spill", id, d, follow)
	}
	hold := b.AcquireOn(Request{Key: 1, Keyed: true, Tokens: 4500}, follow, DecisionHome) // K 4500 + 1000 > 1.25·4000
	defer hold.Release()
	if id, d, _ := b.Decide(req, nil); id != home || d != DecisionHome {
		t.Fatalf("follow's KV full: went to %s %v, want home %s", id, d, home)
	}
}

// TestFollowWeighsAsTheHome: the followed endpoint holds the history, so
// it is weighed with the request's new tokens and the home's slack, as
// the home is: a long prompt with few new tokens goes there though its
// whole length would be over the spill bound.
func TestFollowWeighsAsTheHome(t *testing.T) {
	r := mustRing(t, fleet(4, 0))
	const k = uint64(7)
	follow := r.ID(r.Candidates(k, nil)[1])
	loads := mapLoads{follow: 5000}
	for _, id := range r.IDs() {
		if id != follow {
			loads[id] += 1000
		}
	}
	// With 200 new tokens: 5000+200 <= max(ceil(1.25·8200/4), 400) + 3800 of slack.
	s := NewState(r, nil, loads, Bound{LoadFactor: 1.25, Own: 1})
	req := Request{Key: k, Keyed: true, Tokens: 4000, NewTokens: 200, Follow: follow}
	pw, _ := DefaultConfig().weights(req, 4, 0)
	if i, d, _ := r.pick(req, pw, s); r.ID(i) != follow || d != DecisionSpill {
		t.Fatalf("went to %s %v, want %s spill", r.ID(i), d, follow)
	}
	req.NewTokens = 0 // all new: 5000+4000 > the bound of a 4000-token request, max(ceil(1.25·12000/4), 8000)
	pw, _ = DefaultConfig().weights(req, 4, 0)
	if i, _, _ := r.pick(req, pw, s); r.ID(i) == follow {
		t.Fatalf("all new tokens: went to the followed %s, over its bound", follow)
	}
}
