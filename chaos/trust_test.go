package chaos

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prefixring/prefixring/router"
)

// A stranger without the gossip key (a process that reaches the gossip
// port and runs with --gossip-insecure) cannot join the keyed cluster, and
// a worker it registers through its own workers API is never routed by
// the operators' replicas. Without keys, such a stranger received a share
// of the clients' requests (17–23 of 40 clients' requests when this was
// measured).
func TestKeylessStranger(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Replicas, cfg.Engines = 4, 5
	synctest.Test(t, func(t *testing.T) {
		c := New(cfg)
		defer c.Close()
		for i := range cfg.Engines {
			if err := c.StartEngine(i); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			if err := c.StartReplica(i, c.EngineURLs()[:4]); err != nil {
				t.Fatal(err)
			}
		}
		err := c.StartReplicaWith(3, c.EngineURLs()[:4], func(rc *router.Config) {
			rc.Gossip.Key, rc.GossipInsecure = nil, true
			rc.Workers.Token = "the-strangers-own"
		})
		if err != nil {
			t.Fatal(err)
		}
		code, err := c.Workers(3, http.MethodPost, EngineURL(4), "the-strangers-own")
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusAccepted {
			t.Fatalf("the stranger's own API refused its worker: %d", code)
		}
		// Give gossip far longer than it needs to spread a worker (10 ms
		// in TestWorkersAcrossReplicas) and two push/pull rounds.
		time.Sleep(2 * c.cfg.Gossip.PushPull)
		for i := range 3 {
			r := c.Replica(i)
			if n := len(r.Node.Status().Members); n != 3 {
				t.Errorf("replica %s sees %d members, want 3 (the stranger joined)", r.Name, n)
			}
			for _, e := range must(r.Bal.Status()) {
				if e.ID == EngineURL(4) {
					t.Errorf("replica %s routes the stranger's worker %s", r.Name, e.ID)
				}
			}
		}
		if !c.Replica(3).Node.Isolated() {
			t.Error("the stranger is not isolated")
		}
		report(t, "keyless stranger: not a member of any keyed replica, its worker routed by none")
	})
}

func must[T any](v T, _ int64) T { return v }
