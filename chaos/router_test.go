package chaos

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// The replicas are the router that serve runs: a worker registered through
// one replica's admin workers API (with the token) is gossiped to every
// replica and routed by all of them, and the API refuses a call without
// the token.
func TestWorkersAcrossReplicas(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Engines = 5
	synctest.Test(t, func(t *testing.T) {
		c := New(cfg)
		defer c.Close()
		for i := range cfg.Engines {
			if err := c.StartEngine(i); err != nil {
				t.Fatal(err)
			}
		}
		for i := range cfg.Replicas {
			if err := c.StartReplica(i, c.EngineURLs()[:4]); err != nil {
				t.Fatal(err)
			}
		}
		added := EngineURL(4)
		if c.Routed(added, true) {
			t.Fatal("the fifth engine is routed before anyone registered it")
		}
		client := &http.Client{Transport: c.transport()}
		defer client.CloseIdleConnections()
		post := func(token string) int {
			req, _ := http.NewRequest("POST", "http://"+ReplicaAdminAddr(0)+"/workers",
				strings.NewReader(`{"url":"`+added+`","worker_type":"regular"}`))
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			return resp.StatusCode
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
