package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/upstream"
)

// slowEngine exports a vLLM cache_config_info of blocks × 16 tokens and
// holds every chat completion until release is closed, counting those it
// holds.
type slowEngine struct {
	srv     *httptest.Server
	mu      sync.Mutex
	held    int
	arrived chan struct{}
}

func newSlowEngine(t *testing.T, name string, blocks int64, release <-chan struct{}) *slowEngine {
	e := &slowEngine{arrived: make(chan struct{}, 64)}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			fmt.Fprintf(w, "vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"%d\"} 1.0\n", blocks)
			return
		case "/health":
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		e.mu.Lock()
		e.held++
		e.mu.Unlock()
		e.arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"`+name+`"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *slowEngine) holding() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.held
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// The router learns two engines' KV capacity from their /metrics and the
// balancer bounds K by 0.85 times it (ring.DefaultKVCapacityFactor): 16
// concurrent slow requests with one long prompt, each about 1/12 of an
// engine's KV, put 10 (floor(0.85·12)) on the home and 6 on the other,
// and no engine ever holds more K than 0.85 times its capacity.
// Without the capacity all 16 stay at their home (P alone never binds
// below the 16384-token floor).
func TestKVCapacityBoundsKAcrossEngines(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("long prompt ", 260) + `"}]}`
	w := int64(len(body) / 4) // the router's estimate of its tokens
	blocks := 12 * w / 16     // 12 prompts' worth, in 16-token blocks
	capTokens := blocks * 16  // what the router should learn
	a, b := newSlowEngine(t, "a", blocks, release), newSlowEngine(t, "b", blocks, release)
	ln, aln := listen(t), listen(t)
	cfg := DefaultConfig()
	cfg.Sources.Static = []string{"a=" + a.srv.URL, "b=" + b.srv.URL}
	cfg.Sketch.Enabled = false
	cfg.DrainDelay, cfg.DrainTimeout = 0, time.Second
	r, err := New(cfg, Options{Listener: ln, AdminListener: aln, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-r.Started()
	waitFor(t, "the balancer to learn both capacities", func() bool {
		st, _ := r.Balancer().Status()
		return len(st) == 2 && st[0].KVCapacity == capTokens && st[1].KVCapacity == capTokens
	})

	api := "http://" + ln.Addr().String()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			resp, err := http.Post(api+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		// One at a time: each pick sees the K of every earlier one.
		select {
		case <-a.arrived:
		case <-b.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d never reached an engine", i)
		}
		st, _ := r.Balancer().Status()
		for _, e := range st {
			if e.KV > ring.KVCapacityBound(ring.DefaultKVCapacityFactor, e.KVCapacity) {
				t.Errorf("after %d requests %s holds K %d > 0.85 times its capacity %d (%d and %d held)", i+1, e.ID, e.KV, e.KVCapacity,
					a.holding(), b.holding())
			}
		}
	}
	if held := []int{a.holding(), b.holding()}; slices.Max(held) != 10 || slices.Min(held) != 6 {
		t.Errorf("engines hold %v of 16, want 10 and 6", held)
	}

	// The capacity shows in /debug/endpoints and the gauge.
	resp, err := http.Get("http://" + aln.Addr().String() + "/debug/endpoints")
	if err != nil {
		t.Fatal(err)
	}
	var eps []upstream.EndpointHealth
	_ = json.NewDecoder(resp.Body).Decode(&eps)
	resp.Body.Close()
	if len(eps) != 2 || eps[0].KVCapacity != capTokens || eps[0].KVSource != "vllm" {
		t.Errorf("/debug/endpoints: %+v", eps)
	}
	resp, err = http.Get("http://" + aln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("prefixring_endpoint_kv_capacity_tokens{endpoint=%q} %d", a.srv.URL, capTokens); !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics lacks %s", want)
	}
	r.Close()
	wg.Wait()
	<-done
}

// An operator's capacity wins over the engine's, and needs no scrape.
func TestKVCapacityOverride(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	close(release)
	a := newSlowEngine(t, "a", 1000, release)
	ln, aln := listen(t), listen(t)
	cfg := DefaultConfig()
	cfg.Sources.Static = []string{"gpu-a=" + a.srv.URL}
	cfg.KV.Scrape = false
	var err error
	if cfg.KV.Capacity, err = upstream.ParseKVCapacities([]string{"gpu-a=396000"}); err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg, Options{Listener: ln, AdminListener: aln, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-r.Started()
	if st, _ := r.Balancer().Status(); len(st) != 1 || st[0].KVCapacity != 396000 {
		t.Fatalf("status %+v, want capacity 396000", st)
	}
	r.Close()
	<-done
}
