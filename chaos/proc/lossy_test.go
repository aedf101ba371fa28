package proc

import (
	"slices"
	"testing"
)

var testKeys = []uint64{1, 2, 3, 4}

// Agreement counts the keys every replica picks alike; AwayShare the keys
// some replica picks away from its home, each replica against its own.
func TestAgreementAndAwayShare(t *testing.T) {
	homes := map[string]string{"1": "a", "2": "b", "3": "c", "4": "a"}
	views := []PickView{
		{Picks: map[string]string{"1": "a", "2": "b", "3": "a", "4": "b"}, Homes: homes},
		{Picks: map[string]string{"1": "a", "2": "b", "3": "a", "4": "c"}, Homes: homes},
		{Picks: map[string]string{"1": "a", "2": "c", "3": "a", "4": "b"}, Homes: homes},
	}
	// Agreed: 1 (home) and 3 (away); not 2 and 4.
	if got := Agreement(testKeys, views); got != 0.5 {
		t.Errorf("agreement %v, want 0.5", got)
	}
	// Away: 2 (on one replica), 3, 4; not 1.
	if got := AwayShare(testKeys, views); got != 0.75 {
		t.Errorf("away share %v, want 0.75", got)
	}
	// Every key home on every replica: full agreement that could not fail.
	home := []PickView{{Picks: homes, Homes: homes}, {Picks: homes, Homes: homes}}
	if a, s := Agreement(testKeys, home), AwayShare(testKeys, home); a != 1 || s != 0 {
		t.Errorf("all home: agreement %v, away %v", a, s)
	}
	// A replica whose home differs (it lacks an endpoint) counts against its own.
	other := map[string]string{"1": "b", "2": "b", "3": "c", "4": "a"}
	skewed := []PickView{{Picks: homes, Homes: homes}, {Picks: other, Homes: other}}
	if a, s := Agreement(testKeys, skewed), AwayShare(testKeys, skewed); a != 0.75 || s != 0 {
		t.Errorf("own homes: agreement %v, away %v", a, s)
	}
	if a, s := Agreement(nil, nil), AwayShare(nil, nil); a != 0 || s != 0 {
		t.Errorf("no keys: %v %v", a, s)
	}
}

// The lossy scenarios run at the textbook bound in their view, and the
// scenarios that read excess in requests run the requests signal, each
// after the command's own flags and without changing them.
func TestScenarioReplicaArgs(t *testing.T) {
	want := map[string][]string{
		"lossy-gossip":         {"--min-bound", "0", "--gossip-view", "shared"},
		"lossy-gossip-aligned": {"--min-bound", "0", "--gossip-view", "aligned"},
		"partition":            {"--load-signal", "requests"},
		"endpoint-skew":        {"--load-signal", "requests"},
	}
	base := make([]string, 1, 8)
	base[0] = "--x"
	for _, s := range scenarios {
		w, ok := want[s.name]
		if !ok {
			continue
		}
		cfg := Config{ReplicaArgs: base}
		s.setup(&cfg)
		if !slices.Equal(cfg.ReplicaArgs, append([]string{"--x"}, w...)) || len(base) != 1 || base[:2][1] != "" {
			t.Errorf("%s: %q (command's %q)", s.name, cfg.ReplicaArgs, base[:cap(base)])
		}
		delete(want, s.name)
	}
	if len(want) > 0 {
		t.Errorf("scenarios missing: %v", want)
	}
}
