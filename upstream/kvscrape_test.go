package upstream

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// engines answers each host's paths with a body, or status 404; a host
// that is down refuses connections. It counts requests per host and path.
type engines struct {
	mu    sync.Mutex
	pages map[string]string // host+path -> body
	down  map[string]bool
	hits  map[string]int
}

func newEngines() *engines {
	return &engines{pages: map[string]string{}, down: map[string]bool{}, hits: map[string]int{}}
}

func (e *engines) set(hostPath, body string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pages[hostPath] = body
}

func (e *engines) setDown(host string, down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.down[host] = down
}

func (e *engines) count(hostPath string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hits[hostPath]
}

func (e *engines) RoundTrip(r *http.Request) (*http.Response, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hits[r.URL.Host+r.URL.Path]++
	if e.down[r.URL.Host] {
		return nil, &net.OpError{Op: "dial", Err: io.ErrUnexpectedEOF}
	}
	if r.URL.Path == "/health" {
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	}
	body, ok := e.pages[r.URL.Host+r.URL.Path]
	if !ok {
		return &http.Response{StatusCode: 404, Body: io.NopCloser(strings.NewReader("not found")), Request: r}, nil
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

// capacities is the snapshot's KV capacity by endpoint ID.
func capacities(s *Set) map[string]int64 {
	out := map[string]int64{}
	for _, e := range s.Snapshot().Endpoints {
		out[e.ID] = e.KVCapacity
	}
	return out
}

// The set learns each engine's KV capacity from its metrics (vLLM,
// SGLang) or its /props (llama.cpp) as soon as the endpoint appears, keeps
// the last known value through failures, logs each problem once per
// endpoint, lets an override win, and exports the capacity as a gauge.
func TestKVCapacityIsScraped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newEngines()
		eng.set("vllm:1/metrics", vllmCacheConfig)
		eng.set("sgl:1/metrics", sglangMetrics)
		eng.set("llama:1/props", `{"default_generation_settings":{"n_ctx":8192},"total_slots":2}`)
		eng.set("fixed:1/metrics", vllmCacheConfig)
		var logs bytes.Buffer
		reg := prometheus.NewRegistry()
		kv := DefaultKVConfig()
		kv.Capacity, _ = ParseKVCapacities([]string{"fixed:1=1234"})
		s, err := NewSet(fastHealth(), Options{Transport: eng, KV: kv, Metrics: NewMetrics(reg),
			Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Run(ctx)
		_ = s.SetSource("static", []string{"http://vllm:1", "http://sgl:1", "http://llama:1", "http://none:1", "http://fixed:1"})
		synctest.Wait()
		want := map[string]int64{"http://vllm:1": 27125 * 16, "http://sgl:1": 1048576, "http://llama:1": 2 * 8192,
			"http://none:1": 0, "http://fixed:1": 1234}
		if got := capacities(s); !mapsEqual(got, want) {
			t.Fatalf("at first sight: %v, want %v", got, want)
		}
		if eng.count("fixed:1/metrics") != 0 {
			t.Error("an endpoint with an override was scraped")
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP prefixring_endpoint_kv_capacity_tokens KV cache capacity of the endpoint's engine in tokens, as the ring bounds K by it (an override, or scraped from the engine); absent while unknown.
# TYPE prefixring_endpoint_kv_capacity_tokens gauge
prefixring_endpoint_kv_capacity_tokens{endpoint="http://fixed:1"} 1234
prefixring_endpoint_kv_capacity_tokens{endpoint="http://llama:1"} 16384
prefixring_endpoint_kv_capacity_tokens{endpoint="http://sgl:1"} 1.048576e+06
prefixring_endpoint_kv_capacity_tokens{endpoint="http://vllm:1"} 434000
`), "prefixring_endpoint_kv_capacity_tokens"); err != nil {
			t.Error(err)
		}

		// Failures keep the last known value; each problem is logged once.
		eng.setDown("vllm:1", true)
		eng.set("sgl:1/metrics", "garbage\n")
		for range 3 {
			time.Sleep(kv.Interval)
			synctest.Wait()
		}
		want["http://vllm:1"], want["http://sgl:1"] = 27125*16, 1048576
		if got := capacities(s); !mapsEqual(got, want) {
			t.Fatalf("after failures: %v, want %v", got, want)
		}
		for _, ep := range []string{"http://vllm:1", "http://sgl:1", "http://none:1"} {
			if n := warnings(logs.String(), ep); n != 1 {
				t.Errorf("%s logged %d times, want once:\n%s", ep, n, logs.String())
			}
		}
		if h := healthOf(s, "http://vllm:1"); h.KVCapacity != 27125*16 || h.KVSource != "vllm" {
			t.Errorf("/debug/endpoints shows %d from %q", h.KVCapacity, h.KVSource)
		}

		// A change is picked up at the next scrape.
		eng.setDown("vllm:1", false)
		eng.set("vllm:1/metrics", `vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1`)
		time.Sleep(kv.Interval)
		synctest.Wait()
		if got := capacities(s)["http://vllm:1"]; got != 1600 {
			t.Fatalf("after a restart with less memory: %d, want 1600", got)
		}
		cancel()
	})
}

// A set without scraping and without overrides knows no capacity and
// sends the engines nothing but probes.
func TestKVScrapeOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newEngines()
		eng.set("vllm:1/metrics", vllmCacheConfig)
		kv := DefaultKVConfig()
		kv.Scrape = false
		s, err := NewSet(fastHealth(), Options{Transport: eng, KV: kv})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go s.Run(ctx)
		_ = s.SetSource("static", []string{"http://vllm:1"})
		time.Sleep(2 * kv.Interval)
		synctest.Wait()
		if c := capacities(s)["http://vllm:1"]; c != 0 || eng.count("vllm:1/metrics") != 0 {
			t.Fatalf("scraping off: capacity %d, %d scrapes", c, eng.count("vllm:1/metrics"))
		}
		cancel()
	})
}

func TestKVConfigValidate(t *testing.T) {
	if err := DefaultKVConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (KVConfig{}).Validate(); err != nil {
		t.Fatalf("zero (off): %v", err)
	}
	for name, mutate := range map[string]func(*KVConfig){
		"interval": func(c *KVConfig) { c.Interval = 0 },
		"timeout":  func(c *KVConfig) { c.Timeout = -1 },
		"path":     func(c *KVConfig) { c.MetricsPath = "metrics" },
	} {
		c := DefaultKVConfig()
		mutate(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
}

// warnings counts the log's warnings about endpoint ep.
func warnings(log, ep string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=WARN msg=\"KV capacity") && strings.Contains(l, "endpoint="+ep+" ") {
			n++
		}
	}
	return n
}

func healthOf(s *Set, id string) EndpointHealth {
	for _, h := range s.Health() {
		if h.ID == id {
			return h
		}
	}
	return EndpointHealth{}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// hangs is engines whose hosts in hung accept a request and never answer
// it.
type hangs struct {
	*engines
	hung map[string]bool // set before the set runs
}

func (h hangs) RoundTrip(r *http.Request) (*http.Response, error) {
	if h.hung[r.URL.Host] {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return h.engines.RoundTrip(r)
}

// TestSlowScrapeHoldsUpNoOther: an endpoint is scraped as soon as it
// appears, even while another that never answers holds a scrape open.
// The scraper used to wait for every scrape of a round before it looked at
// new endpoints, so one hung engine (its metrics, then its /props, each
// timing out) kept a new engine's capacity unknown, and its K unbounded,
// for twice KVConfig.Timeout.
func TestSlowScrapeHoldsUpNoOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newEngines()
		eng.set("new:1/metrics", vllmCacheConfig)
		kv := DefaultKVConfig()
		s, err := NewSet(fastHealth(), Options{Transport: hangs{eng, map[string]bool{"hung:1": true}}, KV: kv})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Run(ctx)
		_ = s.SetSource("static", []string{"http://hung:1"})
		time.Sleep(kv.Interval + time.Millisecond) // its next scrape hangs
		_ = s.SetSource("static", []string{"http://hung:1", "http://new:1"})
		synctest.Wait()
		if got := capacities(s)["http://new:1"]; got != 27125*16 {
			t.Fatalf("a new endpoint's capacity is %d while another's scrape hangs, want %d", got, 27125*16)
		}
		cancel()
	})
}

// TestReturningEndpointKeepsItsCapacityGauge: the router forgets a
// departed endpoint's series when its subscriber sees it leave. An
// endpoint that came back while that subscriber still ran (a ring
// rebuild) had its capacity gauge exported when its snapshot was built,
// before the late forget deleted it: routed with a known capacity, it was
// exported as unknown until some later change rebuilt the snapshot.
func TestReturningEndpointKeepsItsCapacityGauge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		met := NewMetrics(reg)
		kv := KVConfig{Capacity: KVCapacities{Default: 1000}}
		s := newTestSet(t, fastHealth(), newFakeNet(), func(o *Options) { o.Metrics, o.KV = met, kv })
		slow := make(chan struct{})
		s.Subscribe(func(old, cur *Snapshot) { // as the router's does
			for _, id := range old.IDs() {
				if _, ok := cur.Get(id); !ok {
					<-slow // the ring takes its time
					met.ForgetEndpoint(id)
				}
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Dispatch(ctx)
		_ = s.SetSource("dns", []string{"http://a:1", "http://b:1"})
		_ = s.WaitDispatched(ctx)
		_ = s.SetSource("dns", []string{"http://b:1"}) // a leaves
		synctest.Wait()
		_ = s.SetSource("dns", []string{"http://a:1", "http://b:1"}) // and is back
		close(slow)
		_ = s.WaitDispatched(ctx)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP prefixring_endpoint_kv_capacity_tokens KV cache capacity of the endpoint's engine in tokens, as the ring bounds K by it (an override, or scraped from the engine); absent while unknown.
# TYPE prefixring_endpoint_kv_capacity_tokens gauge
prefixring_endpoint_kv_capacity_tokens{endpoint="http://a:1"} 1000
prefixring_endpoint_kv_capacity_tokens{endpoint="http://b:1"} 1000
`), "prefixring_endpoint_kv_capacity_tokens"); err != nil {
			t.Error(err)
		}
		cancel()
	})
}
