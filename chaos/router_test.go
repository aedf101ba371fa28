package chaos

import (
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// The replicas are the router that serve runs: a worker registered through
// one replica's admin workers API (with the token) is gossiped to every
// replica and routed by all of them, and the API refuses a call without
// the token.
func TestWorkersAcrossReplicas(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Engines = 5
	synctest.Test(t, func(t *testing.T) {
		c := New(cfg)
		defer c.Close()
		if err := c.StartRouting(4); err != nil {
			t.Fatal(err)
		}
		added := EngineURL(4)
		if c.Routed(added, true) {
			t.Fatal("the fifth engine is routed before anyone registered it")
		}
		post := func(token string) int {
			code, err := c.Workers(0, http.MethodPost, added, token)
			if err != nil {
				t.Fatal(err)
			}
			return code
		}
		if code := post(""); code != http.StatusUnauthorized {
			t.Fatalf("a call without the token: %d, want 401", code)
		}
		if code := post(workersToken); code != http.StatusAccepted {
			t.Fatalf("registering a worker: %d, want 202", code)
		}
		took := waitRouted(t, c, added, true, 10*time.Second)
		report(t, "worker registered at r0 routed by all %d replicas after %v", cfg.Replicas, took)
	})
}

// Workers churn under load: 250 registrations and removals of four
// extra engines, through every replica's workers API in turn, while the
// standard load runs. The calls come 45 ms apart, so that the churn spans
// two push/pull rounds (5 s apart), whose ops cross the calls' own sends
// (1,000 calls 15 ms apart until stop 44; with 250 calls 15 ms apart, a
// merge that kept the older op passed); each engine is still added and
// removed 31 times, each call at another replica than the engine's last.
// A removal at a replica the add has not reached yet gets 404 (the set is
// eventually consistent). Nothing fails, every replica ends with the same
// workers and routes the same endpoints, and each call costs one op of
// gossip (workers.TestLocalSendsOnlyNewOps), so the churn's gossip grows
// with the calls, not with the set.
func TestWorkersChurnUnderLoad(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Engines = 8
	synctest.Test(t, func(t *testing.T) {
		c := New(cfg)
		defer c.Close()
		if err := c.StartRouting(4); err != nil {
			t.Fatal(err)
		}
		call := func(replica int, method, url string) int {
			code, err := c.Workers(replica, method, url, workersToken)
			if err != nil {
				t.Fatal(err)
			}
			return code
		}
		wait := steady(c, 13*time.Second, 5)
		const ops = 250
		want := map[string]bool{}
		codes := map[int]int{}
		for i := range ops {
			url := EngineURL(4 + i%4)
			method := "POST"
			if want[url] {
				method = "DELETE"
			}
			code := call(i%cfg.Replicas, method, url)
			codes[code]++
			switch {
			case code == http.StatusAccepted:
				want[url] = method == "POST"
			case code == http.StatusNotFound && method == "DELETE":
				// The add, made at another replica 180 ms before, has
				// not reached this one yet: the set is eventually
				// consistent, and the worker stays.
			default:
				t.Fatalf("%s %s at r%d: %d", method, url, i%cfg.Replicas, code)
			}
			time.Sleep(45 * time.Millisecond)
		}
		tally := Count(wait().Outcomes())
		if tally.OK != tally.Requests || tally.Requests < 100 {
			t.Fatalf("under workers churn: %v", tally)
		}
		var members []string
		for url, in := range want {
			if in {
				members = append(members, url)
			}
		}
		slices.Sort(members)
		deadline := time.Now().Add(2 * c.cfg.Gossip.PushPull)
		for _, r := range c.Live() {
			for !slices.Equal(r.Router.Workers().Members(), members) {
				if time.Now().After(deadline) {
					t.Fatalf("replica %s ends with workers %v, want %v", r.Name, r.Router.Workers().Members(), members)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if codes[http.StatusAccepted] < ops*9/10 {
			t.Fatalf("answers to %d calls: %v", ops, codes)
		}
		report(t, "%d workers API calls under load: %v; %s; every replica ends with %d workers", ops, codes, tally, len(members))
	})
}
