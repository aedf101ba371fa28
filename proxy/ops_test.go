package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/workers"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsAndDebugRing(t *testing.T) {
	f := newFixture(t, 2)
	for range 3 {
		readAll(t, f.post(t, "/v1/completions", `{"model":"m","prompt":"same prompt"}`).Body)
	}
	readAll(t, f.post(t, "/v1/completions", `{"model":"m","prompt":`).Body)

	resp, err := f.admin.Client().Get(f.admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text := readAll(t, resp.Body)
	for _, want := range []string{
		`prefixring_requests_total{decision="home",endpoint="` + mustID(t, f.ups[0].URL),
		`prefixring_requests_total{decision="none",endpoint="",status="400"} 1`,
		`prefixring_upstream_ttfb_seconds_count`,
		`prefixring_upstream_duration_seconds_count`,
		`prefixring_inflight_requests{endpoint=`,
		`prefixring_endpoint_healthy{endpoint=`,
		`prefixring_load{endpoint=`,
		`prefixring_load_bound 16384`, // idle: the default floor, 16384 tokens
	} {
		if !strings.Contains(text, want) && !strings.Contains(text, strings.Replace(want, mustID(t, f.ups[0].URL), mustID(t, f.ups[1].URL), 1)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(text, `status="200"} 3`) {
		t.Errorf("/metrics does not count 3 answered requests:\n%s", text)
	}

	resp, err = f.admin.Client().Get(f.admin.URL + "/debug/ring")
	if err != nil {
		t.Fatal(err)
	}
	var ring struct {
		LoadFactor float64 `json:"load_factor"`
		Endpoints  []struct {
			ID         string `json:"id"`
			Healthy    bool   `json:"healthy"`
			Partitions int    `json:"partitions"`
		} `json:"endpoints"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ring); err != nil {
		t.Fatal(err)
	}
	parts := 0
	for _, e := range ring.Endpoints {
		parts += e.Partitions
		if !e.Healthy {
			t.Errorf("%s unhealthy", e.ID)
		}
	}
	if ring.LoadFactor != 1.25 || len(ring.Endpoints) != 2 || parts != 7919 {
		t.Fatalf("/debug/ring: %+v", ring)
	}
}

func TestHealthzAndReadyz(t *testing.T) {
	f := newFixture(t, 1)
	for _, base := range []string{f.srv.URL, f.admin.URL} {
		get := func(path string) int {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		f.setHealthy(map[string]bool{f.endpoints.Snapshot().IDs()[0]: true})
		f.draining.Store(false)
		if get("/healthz") != http.StatusOK || get("/readyz") != http.StatusOK {
			t.Fatal("healthz/readyz not OK with a healthy endpoint")
		}
		f.draining.Store(true)
		if got := get("/readyz"); got != http.StatusServiceUnavailable {
			t.Fatalf("readyz %d while draining", got)
		}
		f.draining.Store(false)
		f.setHealthy(nil)
		if got := get("/readyz"); got != http.StatusServiceUnavailable {
			t.Fatalf("readyz %d with no healthy endpoint", got)
		}
	}
}

// TestOperatorRoutesOnlyOnTheAdminListener: the public listener serves the
// API, /healthz and /readyz only. Before the fix /metrics and /debug/ring
// answered 200 on the public port (notes/proxy.md).
func TestOperatorRoutesOnlyOnTheAdminListener(t *testing.T) {
	f := newFixture(t, 1)
	for _, p := range []string{"/metrics", "/debug/ring", "/debug/pprof/", "/debug/pprof/heap", "/debug/cluster"} {
		resp, err := f.srv.Client().Get(f.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		assertAPIError(t, resp, 404, "invalid_request_error")
	}
	for p, want := range map[string]int{"/metrics": 200, "/debug/ring": 200, "/debug/pprof/": 404} {
		resp, err := f.admin.Client().Get(f.admin.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("admin %s: %d, want %d", p, resp.StatusCode, want)
		}
	}
}

// TestPprofOnlyWhenAsked: the profiler is served on the admin listener
// only with Pprof set, and never /debug/pprof/cmdline (the command line
// may carry --gossip-key).
func TestPprofOnlyWhenAsked(t *testing.T) {
	admin := httptest.NewServer(Admin(Ops{Gatherer: prometheus.NewRegistry(), Status: func() ([]ring.EndpointStatus, int64) { return nil, 0 }, Pprof: true}))
	defer admin.Close()
	for p, want := range map[string]int{"/debug/pprof/": 200, "/debug/pprof/goroutine?debug=1": 200, "/debug/pprof/cmdline": 404} {
		resp, err := admin.Client().Get(admin.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp.Body)
		if resp.StatusCode != want || strings.Contains(body, "-test.") {
			t.Errorf("%s: %d, want %d", p, resp.StatusCode, want)
		}
	}
}

// TestRoutingHeadersNameTheEndpoint: X-Prefixring-Endpoint carries the
// endpoint's name (an opaque one here), never its URL; RoutingHeaders off
// removes both headers. Before the fix it carried the internal URL.
func TestRoutingHeadersNameTheEndpoint(t *testing.T) {
	f := newFixture(t, 1)
	resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
	readAll(t, resp.Body)
	if got, want := resp.Header.Get("X-Prefixring-Endpoint"), mustName(t, f.ups[0].URL); got != want || resp.Header.Get("X-Prefixring-Decision") != "home" {
		t.Fatalf("X-Prefixring-Endpoint %q (want %q), decision %q", got, want, resp.Header.Get("X-Prefixring-Decision"))
	}
	f = newFixture(t, 1, func(c *Config) { c.RoutingHeaders = false })
	resp = f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
	readAll(t, resp.Body)
	for h := range resp.Header {
		if strings.HasPrefix(h, "X-Prefixring") {
			t.Fatalf("routing header %s sent with RoutingHeaders off", h)
		}
	}
}

// TestForgetEndpointDeletesItsSeries: once an endpoint leaves, its series
// are gone from /metrics and the other endpoints' remain.
func TestForgetEndpointDeletesItsSeries(t *testing.T) {
	f := newFixture(t, 2)
	f.ups[0].setHandler(dyingStream(fmt.Sprintf(chunk, "a"), true))
	readAll(t, f.post(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "X-Session-ID", "s0").Body)
	for i := range 20 {
		readAll(t, f.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"p%d"}`, i)).Body)
	}
	gone, kept := mustID(t, f.ups[0].URL), mustID(t, f.ups[1].URL)
	count := func(id string) int {
		mfs, err := f.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			switch name := mf.GetName(); {
			case !strings.HasPrefix(name, "prefixring_"),
				name == "prefixring_inflight_requests", name == "prefixring_load",
				name == "prefixring_endpoint_healthy", name == "prefixring_endpoint_pace":
				continue // read from the balancer at scrape time
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "endpoint" && l.GetValue() == id {
						n++
					}
				}
			}
		}
		return n
	}
	if count(gone) < 4 || count(kept) < 3 {
		t.Fatalf("series before: %d for %s, %d for %s", count(gone), gone, count(kept), kept)
	}
	before := count(kept)
	f.router.metrics.SetEndpoints([]string{kept}) // as the router does on each endpoint set
	f.router.metrics.ForgetEndpoint(gone)
	if n := count(gone); n != 0 {
		t.Fatalf("%d series left for the endpoint that left", n)
	}
	if count(kept) != before {
		t.Fatal("forgetting one endpoint deleted another's series")
	}
	// Requests that were in flight to it when it left end afterwards:
	// they must not bring its series back, or a fleet that churns
	// through pod IPs grows the metrics again.
	m := f.router.metrics
	m.request(gone, 200, "home")
	m.upstream(gone, time.Millisecond, 2*time.Millisecond, true)
	m.retried(gone)
	m.streamCut(gone)
	if n := count(gone); n != 0 {
		t.Fatalf("%d series came back for the endpoint that left, from requests that ended after", n)
	}
	// An endpoint that comes back is exported again.
	m.SetEndpoints([]string{kept, gone})
	m.request(gone, 200, "home")
	if n := count(gone); n != 1 {
		t.Fatalf("the endpoint came back: %d series, want 1", n)
	}
	var nilm *Metrics
	nilm.ForgetEndpoint(gone) // nil Metrics: no-op
	nilm.SetEndpoints(nil)
}

// TestReadyzReportsDegradedButStaysReady: a degraded replica (a gossip
// island) still answers every request, so it stays ready, and says why in
// the body.
func TestReadyzReportsDegradedButStaysReady(t *testing.T) {
	why := ""
	h := readyz(Ops{Status: func() ([]ring.EndpointStatus, int64) {
		return []ring.EndpointStatus{{ID: "a", Healthy: true}}, 1
	}, Degraded: func() string { return why }})
	for _, w := range []string{"", "gossip isolated"} {
		why = w
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), "degraded") != (w != "") {
			t.Fatalf("degraded %q: %d %s", w, rec.Code, rec.Body)
		}
	}
}

// TestPublicRoutesDoNotWaitForUnsentBodies: a request to /healthz or
// /readyz, or one the workers API refuses, that declares a body and never
// sends it, is answered at once; the public listener's own routes read no
// body. Before the fix net/http waited, with no deadline, for the body it
// reads before answering (to keep the connection): the client got no
// answer and held the connection for as long as it liked.
func TestPublicRoutesDoNotWaitForUnsentBodies(t *testing.T) {
	ops := Ops{
		Status:        func() ([]ring.EndpointStatus, int64) { return []ring.EndpointStatus{{ID: "a", Healthy: true}}, 0 },
		Workers:       &WorkersAPI{Registry: workers.NewSet("r0", nil, 0)},
		PublicWorkers: true,
	}
	srv := serve(t, DefaultServerConfig(), Public(http.NotFoundHandler(), ops), nil)
	for _, tc := range []struct {
		head   string
		status int
	}{
		{"GET /healthz", http.StatusOK},
		{"POST /healthz", http.StatusMethodNotAllowed},
		{"GET /readyz", http.StatusOK},
		{"POST /workers", http.StatusForbidden}, // Host is not dstack
	} {
		raw := tc.head + " HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
		resp, _, err := rawExchange(t, srv.addr, raw, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: no answer: %v", tc.head, err)
		}
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.head, resp.StatusCode, tc.status)
		}
	}
}
