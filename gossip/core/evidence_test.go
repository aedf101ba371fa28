package core

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// replica builds a voter from a compact description of what its checks say
// of endpoints e1..e5: "e1:fail" (down by failed requests), "e1:probe"
// (down by failed probes), "e1:ok" (up, and it answered requests lately).
func replica(t *testing.T, name string, obs ...string) Entry {
	t.Helper()
	eps := []string{"e1", "e2", "e3", "e4", "e5"}
	down, failing, served := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, o := range obs {
		id, what, _ := strings.Cut(o, ":")
		switch what {
		case "fail":
			down[id], failing[id] = true, true
		case "probe":
			down[id] = true
		case "ok":
			served[id] = true
		default:
			t.Fatalf("bad observation %q", o)
		}
	}
	return NewEntry(name, "", 1, 1, t0, eps, nil, down).WithRequestEvidence(failing, served)
}

// TestTallyRequestEvidence: an endpoint that fails any replica's requests
// is out cluster-wide unless a replica it answered lately vouches for it; a
// replica's failed probes alone stay one vote; and however many replicas
// vote, no more endpoints are out for failed requests than the ejection cap
// (20% of five: one).
func TestTallyRequestEvidence(t *testing.T) {
	r := func(name string, obs ...string) Entry { return replica(t, name, obs...) }
	cases := []struct {
		name   string
		pct    int
		voters []Entry
		down   []string
	}{
		{"1 of 3 replicas' requests fail, the others send none: out", 20,
			[]Entry{r("a", "e1:fail"), r("b"), r("c")}, []string{"e1"}},
		{"2 of 3 fail, the third sends none: out", 20,
			[]Entry{r("a", "e1:fail"), r("b", "e1:fail"), r("c")}, []string{"e1"}},
		{"3 of 3 fail: out", 20,
			[]Entry{r("a", "e1:fail"), r("b", "e1:fail"), r("c", "e1:fail")}, []string{"e1"}},
		{"a bad path: 1 fails, 2 are answered: stays", 20,
			[]Entry{r("a", "e1:fail"), r("b", "e1:ok"), r("c", "e1:ok")}, nil},
		{"a bad path: 1 fails, 1 is answered, 1 sends none: stays", 20,
			[]Entry{r("a", "e1:fail"), r("b", "e1:ok"), r("c")}, nil},
		{"2 of 3 fail, 1 is answered: the majority takes it out", 20,
			[]Entry{r("a", "e1:fail"), r("b", "e1:fail"), r("c", "e1:ok")}, []string{"e1"}},
		{"1 of 3 probes fail: one vote, stays", 20,
			[]Entry{r("a", "e1:probe"), r("b"), r("c")}, nil},
		{"2 of 3 probes fail: out", 20,
			[]Entry{r("a", "e1:probe"), r("b", "e1:probe"), r("c")}, []string{"e1"}},
		{"a cluster of one: its own failed requests", 20,
			[]Entry{r("a", "e2:fail")}, []string{"e2"}},
		{"cap: three replicas each fail another endpoint: one out", 20,
			[]Entry{r("a", "e1:fail"), r("b", "e2:fail"), r("c", "e3:fail")}, []string{"e1"}},
		{"cap: every replica fails two endpoints: one out", 20,
			[]Entry{r("a", "e1:fail", "e2:fail"), r("b", "e1:fail", "e2:fail"), r("c", "e1:fail", "e2:fail")}, []string{"e1"}},
		{"cap: the endpoint with more failing replicas goes first", 20,
			[]Entry{r("a", "e1:fail", "e3:fail"), r("b", "e3:fail"), r("c", "e3:fail")}, []string{"e3"}},
		{"cap: failed probes are not capped, nor count against it", 20,
			[]Entry{r("a", "e1:probe", "e2:probe", "e3:fail"), r("b", "e1:probe", "e2:probe"), r("c")}, []string{"e1", "e2", "e3"}},
		{"cap off (100%): all three out", 100,
			[]Entry{r("a", "e1:fail"), r("b", "e2:fail"), r("c", "e3:fail")}, []string{"e1", "e2", "e3"}},
		{"cap 40% of five: two", 40,
			[]Entry{r("a", "e1:fail"), r("b", "e2:fail"), r("c", "e3:fail")}, []string{"e1", "e2"}},
	}
	for _, c := range cases {
		v := Tally(c.voters, c.pct)
		if !reflect.DeepEqual(v.Down, c.down) {
			t.Errorf("%s: down %v, want %v", c.name, v.Down, c.down)
		}
		rng := rand.New(rand.NewPCG(1, 1))
		for range 5 {
			shuffled := append([]Entry(nil), c.voters...)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if w := Tally(shuffled, c.pct); !w.Equal(v) {
				t.Errorf("%s: the voters' order changes the verdict: %v vs %v", c.name, w, v)
			}
		}
	}
}

// TestRequestEvidenceRoundTrips: the failing and served bits survive the
// codec, in full entries and deltas.
func TestRequestEvidenceRoundTrips(t *testing.T) {
	e := replica(t, "a", "e1:fail", "e2:probe", "e3:ok")
	got, err := DecodeEntry(AppendEntry(nil, e))
	if err != nil {
		t.Fatal(err)
	}
	if !SameContent(got, e) {
		t.Fatalf("entry: %+v, want %+v", got, e)
	}
	d, err := DecodeDelta(AppendDelta(nil, e))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.Entry.Failing, e.Failing) || !reflect.DeepEqual(d.Entry.Served, e.Served) {
		t.Fatalf("delta: failing %v served %v, want %v %v", d.Entry.Failing, d.Entry.Served, e.Failing, e.Served)
	}
}
