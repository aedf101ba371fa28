package router

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/prefixring/prefixring/ring"
)

// /debug/pick answers each key's home beside its pick: a key its home
// holds too much for goes elsewhere, and the home says where it would have
// gone, so chaos runs can tell a bound-decided pick from a trivial one.
func TestDebugPickHomes(t *testing.T) {
	cfg := ring.DefaultConfig()
	cfg.Signal, cfg.MinBound = ring.SignalRequests, 0
	bal, err := ring.NewBalancer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := bal.Update([]ring.Endpoint{{ID: "a", Healthy: true}, {ID: "b", Healthy: true}, {ID: "c", Healthy: true}}); err != nil {
		t.Fatal(err)
	}
	const key = 42
	home, _ := bal.Home(key)
	for range 3 { // 3 on the home, 0 elsewhere: over ceil(1.25·4/3) = 2
		l, err := bal.Acquire(ring.Request{Key: key, Keyed: true, Exclude: others(home)})
		if err != nil || l.Endpoint != home {
			t.Fatalf("%v %v", l.Endpoint, err)
		}
		defer l.Release()
	}
	rec := httptest.NewRecorder()
	pickHandler(bal).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pick?key=42", nil))
	var v struct{ Picks, Homes map[string]string }
	if err := json.NewDecoder(rec.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v.Homes["42"] != home || v.Picks["42"] == "" || v.Picks["42"] == home {
		t.Fatalf("home %s: %+v", home, v)
	}
}

// others are the test's endpoints but id.
func others(id string) []string {
	var out []string
	for _, e := range []string{"a", "b", "c"} {
		if e != id {
			out = append(out, e)
		}
	}
	return out
}
