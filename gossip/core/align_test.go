package core

import (
	"testing"
	"time"
)

const lag = 250 * time.Millisecond

// alignedView returns an aligned view of "me" and its loads (local counters
// read zero).
func alignedView() (*View, *ClusterLoads) {
	loads := NewClusterLoads(zeroLoads{}, ViewAligned)
	return NewAlignedView("me", 5*time.Second, lag, loads), loads
}

// pub is node's publication version ver, stamped at, with load n on "a".
func pub(node string, ver uint64, at time.Time, n int64) Entry {
	e := NewEntry(node, node+":7946", 1, ver, at, []string{"a"}, map[string]int64{"a": n}, nil)
	e.Heard = 0 // as decoded off the wire
	return e
}

// advance promotes v at every due time up to until, as the node's timer does.
func advance(v *View, until time.Time) {
	for {
		due, ok := v.NextDue()
		if !ok || due.After(until) {
			return
		}
		v.Promote(due)
	}
}

// TestAlignedViewAppliesAtStampPlusLag: a publication counts from its
// stamp plus the lag, whenever it arrived within the lag, not before; the
// owner's clock is capped: a publication waits at most the lag after its
// receipt, and one past its due time applies at once.
func TestAlignedViewAppliesAtStampPlusLag(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name  string
		stamp time.Duration // the owner's stamp, from t0 on our clock
		heard time.Duration // from t0
		due   time.Duration // from t0
	}{
		{"delivered at once", 0, 0, 250 * ms},
		{"delivered 75 ms late", 0, 75 * ms, 250 * ms},
		{"delivered at its due time", 0, 250 * ms, 250 * ms},
		{"delivered late: at once", 0, 400 * ms, 400 * ms},
		{"owner's clock a minute ahead: lag after receipt", time.Minute, 10 * ms, 260 * ms},
		{"owner's clock a minute behind: at once", -time.Minute, 10 * ms, 10 * ms},
		{"relayed, seconds old: at once", -3 * time.Second, 0, 0},
	}
	for _, c := range cases {
		v, loads := alignedView()
		v.Receive(t0.Add(c.heard), pub("p", 1, t0.Add(c.stamp), 3))
		if c.due > c.heard {
			if got := loads.Load("a"); got != 0 {
				t.Errorf("%s: load %d on receipt, want 0 until %v", c.name, got, c.due)
			}
			if due, ok := v.NextDue(); !ok || !due.Equal(t0.Add(c.due)) {
				t.Errorf("%s: next due %v %v, want %v", c.name, due.Sub(t0), ok, c.due)
			}
			v.Promote(t0.Add(c.due - ms))
			if got := loads.Load("a"); got != 0 {
				t.Errorf("%s: load %d 1 ms before due, want 0", c.name, got)
			}
			v.Promote(t0.Add(c.due))
		}
		if got := loads.Load("a"); got != 3 {
			t.Errorf("%s: load %d at due time, want 3", c.name, got)
		}
		if _, ok := v.NextDue(); ok {
			t.Errorf("%s: still pending after due", c.name)
		}
		// It ages from when it applied, by our clock.
		v.Refresh(t0.Add(c.due+5*time.Second), nil)
		if got := loads.Load("a"); got != 3 {
			t.Errorf("%s: load %d StaleAfter after it applied, want 3", c.name, got)
		}
		v.Refresh(t0.Add(c.due+5*time.Second+ms), nil)
		if got := loads.Load("a"); got != 0 {
			t.Errorf("%s: load %d past StaleAfter, want 0", c.name, got)
		}
	}
}

// TestAlignedViewsAgreeWhateverTheDelivery: two replicas hear the same
// publications of three owners, in other orders and with other delays
// below the lag, and their own at once; at every millisecond they read the
// same loads. In the shared view they would differ until the last arrival.
func TestAlignedViewsAgreeWhateverTheDelivery(t *testing.T) {
	ms := time.Millisecond
	type delivery struct {
		e  Entry
		at time.Duration
	}
	x, y := pub("x", 1, t0, 2), pub("y", 1, t0.Add(30*ms), 5)
	z1, z2 := pub("z", 1, t0.Add(10*ms), 1), pub("z", 2, t0.Add(110*ms), 4)
	in := [2][]delivery{
		{{x, 1 * ms}, {y, 31 * ms}, {z1, 11 * ms}, {z2, 111 * ms}},
		{{z2, 190 * ms}, {y, 200 * ms}, {x, 240 * ms}, {z1, 245 * ms}}, // z1 after z2: refused
	}
	var views [2]*View
	var loads [2]*ClusterLoads
	for i := range views {
		views[i], loads[i] = alignedView()
	}
	for now := time.Duration(0); now <= 500*ms; now += ms {
		for i, v := range views {
			for _, d := range in[i] {
				if d.at == now {
					v.Receive(t0.Add(now), d.e)
				}
			}
			advance(v, t0.Add(now))
		}
		if a, b := loads[0].Load("a"), loads[1].Load("a"); a != b {
			t.Fatalf("at %v the views read %d and %d", now, a, b)
		}
	}
	if got := loads[0].Load("a"); got != 2+5+4 {
		t.Errorf("load %d after every publication applied, want 11", got)
	}
}

// TestAlignedViewOwnPublication: this replica's own publication applies
// at its stamp plus the lag too, as the others apply it.
func TestAlignedViewOwnPublication(t *testing.T) {
	v, loads := alignedView()
	v.Receive(t0, pub("p", 1, t0.Add(-time.Second), 1)) // a peer counts: the own publication is read
	own := NewEntry("me", "me:7946", 1, 1, t0, []string{"a"}, map[string]int64{"a": 7}, nil)
	v.Publish(own)
	if got := loads.Load("a"); got != 1 {
		t.Errorf("load %d at publication, want 1 (own not yet applied)", got)
	}
	advance(v, t0.Add(lag-time.Millisecond))
	if got := loads.Load("a"); got != 1 {
		t.Errorf("load %d before due, want 1", got)
	}
	advance(v, t0.Add(lag))
	if got := loads.Load("a"); got != 8 {
		t.Errorf("load %d at due, want 8", got)
	}
}

// TestAlignedViewNewerPublications: publications closer together than
// the lag each apply in turn (a newer one never starves an older one);
// a newer one due first (its owner's clock stepped back) supersedes the
// older ones still pending, which never apply.
func TestAlignedViewNewerPublications(t *testing.T) {
	ms := time.Millisecond
	v, loads := alignedView()
	v.Receive(t0, pub("p", 1, t0, 1))
	v.Receive(t0.Add(100*ms), pub("p", 2, t0.Add(100*ms), 2))
	v.Receive(t0.Add(200*ms), pub("p", 3, t0.Add(200*ms), 3))
	for _, step := range []struct {
		at   time.Duration
		want int64
	}{{249 * ms, 0}, {250 * ms, 1}, {349 * ms, 1}, {350 * ms, 2}, {450 * ms, 3}} {
		advance(v, t0.Add(step.at))
		if got := loads.Load("a"); got != step.want {
			t.Errorf("at %v: load %d, want %d", step.at, got, step.want)
		}
	}

	v, loads = alignedView()
	v.Receive(t0, pub("p", 1, t0, 1))
	v.Receive(t0.Add(100*ms), pub("p", 2, t0.Add(-10*time.Second), 2)) // due at once
	if got := loads.Load("a"); got != 2 {
		t.Errorf("load %d after the newer publication, due at once, want 2", got)
	}
	if e, _ := v.Applied("p"); v.Pending("p") != 0 || e.Version != 2 {
		t.Errorf("pending %d, applied version %d; want 0 and 2", v.Pending("p"), e.Version)
	}
	advance(v, t0.Add(time.Second))
	if got := loads.Load("a"); got != 2 {
		t.Errorf("load %d after the older one's due time, want 2: it was superseded", got)
	}
}

// TestAlignedViewGoneAndForgottenNodes: an entry of a node memberlist
// lists dead stops counting at once and does not count when it applies;
// a forgotten node's pending entries are dropped.
func TestAlignedViewGoneAndForgottenNodes(t *testing.T) {
	v, loads := alignedView()
	v.Receive(t0, pub("p", 1, t0, 1))
	advance(v, t0.Add(lag))
	v.Receive(t0.Add(lag), pub("p", 2, t0.Add(lag), 2))
	v.Refresh(t0.Add(lag), map[string]bool{"p": true})
	if got := loads.Load("a"); got != 0 {
		t.Errorf("load %d of a node listed dead, want 0", got)
	}
	advance(v, t0.Add(2*lag))
	if got := loads.Load("a"); got != 0 {
		t.Errorf("load %d once a dead node's pending entry applied, want 0", got)
	}

	v, _ = alignedView()
	v.Receive(t0, pub("q", 1, t0, 1))
	v.Table().Forget(t0.Add(2*time.Minute), time.Minute, "me")
	v.Refresh(t0.Add(2*time.Minute), nil)
	if _, ok := v.NextDue(); ok {
		t.Error("a forgotten node's entry is still pending")
	}
	if _, ok := v.Applied("q"); v.Pending("q") != 0 || ok {
		t.Errorf("forgotten node: pending %d, applied %v; want none", v.Pending("q"), ok)
	}
}

// TestSharedViewHasNoLag: the views without a lag apply on receipt and
// never have anything due.
func TestSharedViewHasNoLag(t *testing.T) {
	loads := NewClusterLoads(zeroLoads{}, ViewShared)
	v := NewView("me", 5*time.Second, loads)
	v.Receive(t0, pub("p", 1, t0, 3))
	if _, ok := v.NextDue(); ok || loads.Load("a") != 3 || v.Promote(t0) {
		t.Errorf("shared view: load %d, due %v", loads.Load("a"), ok)
	}
}

// TestAlignedViewRefusesAForgottenEntryPushedBack: the aligned view
// applies only what the table takes. A restarted replica at its
// predecessor's incarnation counts once its predecessor's entry was
// forgotten (TestForgottenFirstIncarnationDoesNotBlockItsSuccessor);
// a peer that heard the old entry later then pushes it back, and the
// table refuses it. The aligner held it anyway, as the newer of the two
// (its version is higher), and applied it: the dead process's counts
// replaced its successor's, whose publications, all older by version,
// never applied again.
func TestAlignedViewRefusesAForgottenEntryPushedBack(t *testing.T) {
	v, loads := alignedView()
	old := pub("b", 5000, t0, 7)
	v.Receive(t0, old)
	advance(v, t0.Add(lag))
	at := t0.Add(61 * time.Second) // b crashed; its entry is forgotten
	if gone := v.Table().Forget(at, time.Minute, "me"); len(gone) != 1 {
		t.Fatalf("forgot %v", gone)
	}
	v.Refresh(at, nil)
	for ver := uint64(1); ver <= 3; ver++ { // b's successor publishes
		now := at.Add(time.Duration(ver) * time.Second)
		v.Receive(now, pub("b", ver, now, int64(ver)))
		v.Receive(now, old) // and a peer pushes the old entry back
		advance(v, now.Add(lag))
		if e, _ := v.Applied("b"); e.Version != ver || loads.Load("a") != int64(ver) {
			t.Fatalf("after the successor's version %d: applied version %d, load %d; want %d and %d",
				ver, e.Version, loads.Load("a"), ver, ver)
		}
	}
}
