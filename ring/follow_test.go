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

// TestFollowedLeaseWeighsAsTheHome: a followed pick is bounded with the
// request's new tokens and the home's slack, so its lease must count the
// same new tokens in P. Counting the whole prompt let the followed
// endpoint's P end above anything the home could have reached, and
// Settle and Release must give back exactly what was counted.
func TestFollowedLeaseWeighsAsTheHome(t *testing.T) {
	b, err := NewBalancer(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetEndpoints(fleet(4, 0)); err != nil {
		t.Fatal(err)
	}
	const k = uint64(7)
	r := b.snap.Load().ring
	follow := r.ID(r.Candidates(k, nil)[1])
	for _, id := range r.IDs() {
		w := int64(1000)
		if id == follow {
			w = 5000
		}
		defer b.AcquireOn(Request{Key: 1, Keyed: true, Tokens: w}, id, DecisionHome).Release()
	}
	const total, before = 8000, 5000
	req := Request{Key: k, Keyed: true, Tokens: 4000, NewTokens: 200, NewKnown: true, Follow: follow}
	l, err := b.Acquire(req)
	if err != nil {
		t.Fatal(err)
	}
	if l.Endpoint != follow || l.Decision != DecisionSpill {
		t.Fatalf("went to %s %v, want %s spill", l.Endpoint, l.Decision, follow)
	}
	if got := l.Weight(); got != 200 {
		t.Errorf("lease weighs %d, want the 200 new tokens the home would count", got)
	}
	// The home's worst case: its bound for 200 tokens with no floor
	// (NewKnown, placed by key) plus 3800 tokens of slack.
	worst := Bound{LoadFactor: 1.25, Own: 1}.Limit(total, 200, 4) + 3800
	if got := b.Inflight().Load(follow); got != before+200 || got > worst {
		t.Errorf("followed endpoint's P is %d, want %d (the home's worst case is %d)", got, before+200, worst)
	}
	l.Settle()
	if got := b.Inflight().Load(follow); got != before {
		t.Errorf("P %d after Settle, want %d", got, before)
	}
	l.Release()
	if got, tot := b.Inflight().Load(follow), b.Inflight().Total(); got != before || tot != total {
		t.Errorf("P %d, total %d after Release, want %d and %d", got, tot, before, total)
	}
}

// TestGroupedRetryFollowsPastItsExcludedHome: a grouped retry whose home
// failed (excluded) and whose Follow is another endpoint goes to Follow
// weighed as the home, as a ring-placed retry does: followed's "other
// than the key's home" is the home over every healthy endpoint, the one
// pickGrouped excludes, not the first endpoint left once it is gone.
func TestGroupedRetryFollowsPastItsExcludedHome(t *testing.T) {
	b := tokensBalancer(t, DefaultConfig(), fleet(8, 0)...)
	for k := range uint64(50) {
		for _, group := range []uint64{0, 7} { // by its key on the ring, and grouped
			req := Request{Key: k*0x9e3779b97f4a7c15 + 1, Keyed: true, Group: group, GroupShare: 0.5, SharedTokens: 2000, Tokens: 3000, NewTokens: 500}
			home, _, err := b.Peek(req)
			if err != nil {
				t.Fatal(err)
			}
			req.Exclude = []string{home}
			// Follow the endpoint the retry would go to without it.
			follow, _, err := b.Peek(req)
			if err != nil {
				t.Fatal(err)
			}
			req.Follow = follow
			l, err := b.Acquire(req)
			if err != nil {
				t.Fatal(err)
			}
			if l.Endpoint != follow || l.Decision != DecisionSpill || l.Weight() != 500 {
				t.Errorf("group %d, key %d, home %s excluded: went to %s as %v weighing %d, want %s followed as a spill weighing its 500 new tokens",
					group, k, home, l.Endpoint, l.Decision, l.Weight(), follow)
			}
			l.Release()
		}
	}
}
