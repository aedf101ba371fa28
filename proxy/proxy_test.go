package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeServer is a fake inference server on 127.0.0.1 that records what it
// served. Its handler can be swapped per test.
type fakeServer struct {
	*httptest.Server
	name   string
	served atomic.Int64
	open   atomic.Int64 // connections open now
	conns  atomic.Int64 // connections accepted
	handle atomic.Pointer[http.HandlerFunc]
}

func newUpstream(t *testing.T, name string) *fakeServer {
	u := &fakeServer{name: name}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		u.served.Add(1)
		if h := u.handle.Load(); h != nil {
			(*h)(w, r)
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cmpl-1","object":"chat.completion","model":"m","served_by":%q,"path":%q}`, name, r.URL.Path)
	}))
	u.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			u.open.Add(1)
			u.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			u.open.Add(-1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

func (u *fakeServer) setHandler(h http.HandlerFunc) { u.handle.Store(&h) }

// fixture is a router in front of upstreams, served on 127.0.0.1 by the
// public Server (as cmd/prefixring serves it), with the admin routes on a
// second listener.
type fixture struct {
	srv       *testServer
	admin     *httptest.Server
	balancer  *ring.Balancer
	endpoints *upstream.Endpoints
	health    *upstream.Health
	ups       []*fakeServer
	reg       *prometheus.Registry
	router    *Router
	transport *http.Transport
	draining  atomic.Bool
	observed  *observed
}

// observed passes health observations on to the checker and counts the
// failures per endpoint.
type observed struct {
	inner    Observer
	mu       sync.Mutex
	failures map[string]int
}

func (o *observed) ObserveSuccess(id string) { o.inner.ObserveSuccess(id) }

func (o *observed) ObserveFailure(id string, err error) {
	o.mu.Lock()
	o.failures[id]++
	o.mu.Unlock()
	o.inner.ObserveFailure(id, err)
}

func (o *observed) failuresOf(id string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failures[id]
}

// testServer is a Server listening on 127.0.0.1.
type testServer struct {
	URL, addr string
	client    *http.Client
}

func (s *testServer) Client() *http.Client { return s.client }

// serve starts a public Server for h with cfg on 127.0.0.1; the test's
// cleanup closes it.
func serve(t *testing.T, cfg ServerConfig, h http.Handler) *testServer {
	t.Helper()
	srv, err := NewServer(cfg, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		srv.Close()
		<-done
	})
	return &testServer{URL: "http://" + ln.Addr().String(), addr: ln.Addr().String(), client: client}
}

// fixtureOpts tweak a fixture: its Config and its ServerConfig.
type fixtureOpts struct {
	cfg       func(*Config)
	server    func(*ServerConfig)
	transport http.RoundTripper // instead of NewTransport's
}

func newFixture(t *testing.T, n int, tweak ...func(*Config)) *fixture {
	return newFixtureWith(t, n, fixtureOpts{cfg: func(c *Config) {
		for _, fn := range tweak {
			fn(c)
		}
	}})
}

func newFixtureWith(t *testing.T, n int, o fixtureOpts) *fixture {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry()}
	bal, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	f.balancer = bal
	m := NewMetrics(f.reg, bal.Status)
	log := slog.New(slog.DiscardHandler)
	if f.health, err = upstream.NewHealth(upstream.DefaultHealthConfig(), bal, nil, nil, log); err != nil {
		t.Fatal(err)
	}
	f.endpoints = upstream.NewEndpoints(func(ids []string) { _ = bal.SetEndpoints(ids) },
		func(ids []string) { f.health.SetTargets(f.endpoints, ids) })
	var urls []string
	for i := range n {
		u := newUpstream(t, fmt.Sprintf("up%d", i))
		f.ups = append(f.ups, u)
		urls = append(urls, u.URL)
	}
	if err := f.endpoints.Set(urls); err != nil {
		t.Fatal(err)
	}
	keyer, err := prefix.New(prefix.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	f.transport = NewTransport(cfg)
	t.Cleanup(f.transport.CloseIdleConnections)
	f.observed = &observed{inner: f.health, failures: map[string]int{}}
	var tr http.RoundTripper = f.transport
	if o.transport != nil {
		tr = o.transport
	}
	rt, err := NewRouter(cfg, Deps{Picker: bal, Keyer: keyer, Targets: f.endpoints, Observer: f.observed, Metrics: m, Log: log, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	f.router = rt
	scfg := DefaultServerConfig()
	if o.server != nil {
		o.server(&scfg)
	}
	ops := Ops{Gatherer: f.reg, Status: bal.Status, LoadFactor: 1.25, Draining: f.draining.Load}
	f.srv = serve(t, scfg, Public(rt, ops))
	f.admin = httptest.NewServer(Admin(ops))
	t.Cleanup(f.admin.Close)
	return f
}

func chatBody(system, user string) string {
	b, _ := json.Marshal(map[string]any{
		"model": "llama", "max_tokens": 16,
		"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}},
	})
	return string(b)
}

func (f *fixture) post(t *testing.T, path, body string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSamePrefixSameEndpoint(t *testing.T) {
	f := newFixture(t, 4)
	homes := map[string]bool{}
	for i := range 20 {
		resp := f.post(t, "/v1/chat/completions", chatBody("You are a helpful assistant.", "What is the capital of France?")+strings.Repeat(" ", i))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp.Body))
		}
		if d := resp.Header.Get("X-Prefixring-Decision"); d != "home" {
			t.Fatalf("decision %q, want home", d)
		}
		homes[resp.Header.Get("X-Prefixring-Endpoint")] = true
		readAll(t, resp.Body)
	}
	if len(homes) != 1 {
		t.Fatalf("one prefix went to %d endpoints: %v", len(homes), homes)
	}
	// Different conversations spread over the fleet.
	spread := map[string]bool{}
	for i := range 40 {
		resp := f.post(t, "/v1/chat/completions", chatBody("sys", fmt.Sprintf("question %d about something", i)))
		spread[resp.Header.Get("X-Prefixring-Endpoint")] = true
	}
	if len(spread) < 3 {
		t.Fatalf("40 conversations reached only %d of 4 endpoints", len(spread))
	}
}

func TestPathAndQueryReachUpstream(t *testing.T) {
	f := newFixture(t, 1)
	resp := f.post(t, "/v1/completions?x=1", `{"model":"m","prompt":"hello"}`)
	body := readAll(t, resp.Body)
	if !strings.Contains(body, `"path":"/v1/completions"`) {
		t.Fatalf("upstream saw %s", body)
	}
}

// TestHotPrefixSpillsWithinBound holds many concurrent requests of one
// prefix: the home fills to the bound, the rest spill, none overfills.
func TestHotPrefixSpillsWithinBound(t *testing.T) {
	f := newFixture(t, 4)
	release := make(chan struct{})
	arrived := make(chan string, 64)
	for _, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			arrived <- u.name
			<-release
			io.WriteString(w, `{}`)
		})
	}
	const n = 24
	var wg sync.WaitGroup
	decisions := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			resp := f.post(t, "/v1/chat/completions", chatBody("shared system prompt", "the same question"))
			decisions <- resp.Header.Get("X-Prefixring-Decision")
			readAll(t, resp.Body)
			_ = i
		})
		<-arrived // one at a time, so each pick sees the previous loads
	}
	st, _ := f.balancer.Status()
	// An endpoint takes a request while its load <= ceil(c*(total+1)/n).
	// The last pick saw 23 in flight on 4 endpoints with c = 1.25: bound
	// ceil(1.25*24/4) = 8, so no endpoint may hold more than 8+1.
	for _, e := range st {
		if e.LocalLoad > 9 {
			t.Errorf("%s holds %d in flight, bound 8 (+1 taken at the bound)", e.ID, e.LocalLoad)
		}
	}
	close(release)
	wg.Wait()
	close(decisions)
	count := map[string]int{}
	for d := range decisions {
		count[d]++
	}
	if count["home"] == 0 || count["spill"] == 0 || count["home"]+count["spill"] != n {
		t.Fatalf("decisions %v: want the home filled, then spills", count)
	}
	if got := f.balancer.Inflight().Total(); got != 0 {
		t.Fatalf("%d leases left after all requests ended", got)
	}
}

// TestStreamEventsArriveAsProduced: the upstream holds its second event
// until the client has read the first through the router.
func TestStreamEventsArriveAsProduced(t *testing.T) {
	f := newFixture(t, 1)
	next := make(chan struct{})
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-time.After(10 * time.Second):
				return // the router buffered: the test fails below
			}
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	resp := f.post(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	sc := bufio.NewScanner(resp.Body)
	var events []string
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		events = append(events, line)
		if line != "data: [DONE]" {
			next <- struct{}{} // blocks until the upstream waits: only reachable if the event came through
		}
	}
	if len(events) != 4 || events[3] != "data: [DONE]" {
		t.Fatalf("events %v", events)
	}
}

func TestClientDisconnectCancelsUpstreamAndReleases(t *testing.T) {
	f := newFixture(t, 2)
	canceled := make(chan struct{})
	started := make(chan struct{})
	for _, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {}\n\n")
			w.(http.Flusher).Flush()
			close(started)
			<-r.Context().Done()
			close(canceled)
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if got := f.balancer.Inflight().Total(); got != 1 {
		t.Fatalf("in flight %d while streaming, want 1", got)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream request not canceled after the client left")
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.balancer.Inflight().Total() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("lease not released after the client left")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDeadUpstreamIsRetriedOnNextCandidate: requests homed on a closed
// upstream go to their next candidate; no request fails.
func TestDeadUpstreamIsRetriedOnNextCandidate(t *testing.T) {
	f := newFixture(t, 3)
	dead := f.ups[1]
	dead.Close()
	deadID := mustID(t, dead.URL)
	fallbacks := 0
	for i := range 60 {
		resp := f.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"prompt number %d"}`, i))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d %s", i, resp.StatusCode, readAll(t, resp.Body))
		}
		if resp.Header.Get("X-Prefixring-Endpoint") == deadID {
			t.Fatalf("request %d answered by the dead endpoint", i)
		}
		if resp.Header.Get("X-Prefixring-Decision") == "fallback" {
			fallbacks++
		}
		readAll(t, resp.Body)
	}
	if fallbacks == 0 {
		t.Fatal("no request was homed on the dead endpoint; the test proves nothing")
	}
	st, _ := f.balancer.Status()
	for _, e := range st {
		if e.ID == deadID && e.Healthy {
			t.Fatalf("dead endpoint still healthy after %d failures", fallbacks)
		}
	}
}

func mustID(t *testing.T, raw string) string {
	_, id, err := upstream.ParseEndpoint(raw)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestAllUpstreamsDownIs502(t *testing.T) {
	f := newFixture(t, 2, func(c *Config) { c.MaxRetries = 5 })
	for _, u := range f.ups {
		u.Close()
	}
	resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
	assertAPIError(t, resp, 502, "upstream_error")
}

func TestNoHealthyEndpointIs503(t *testing.T) {
	f := newFixture(t, 2)
	for _, id := range f.endpoints.IDs() {
		f.balancer.SetHealthy(id, false)
	}
	resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
	assertAPIError(t, resp, 503, "service_unavailable")
	for _, u := range f.ups {
		if n := u.served.Load(); n != 0 {
			t.Fatalf("%s served %d requests while unhealthy", u.name, n)
		}
	}
}

func TestBadRequestsGetOpenAIErrors(t *testing.T) {
	f := newFixture(t, 1, func(c *Config) { c.MaxBodyBytes = 1024 })
	cases := []struct {
		name, method, path, body string
		status                   int
		kind                     string
	}{
		{"malformed JSON", "POST", "/v1/chat/completions", `{"model":"m","messages":[`, 400, "invalid_request_error"},
		{"missing messages", "POST", "/v1/chat/completions", `{"model":"m"}`, 400, "invalid_request_error"},
		{"wrong prompt type", "POST", "/v1/completions", `{"model":"m","prompt":42}`, 400, "invalid_request_error"},
		{"not an object", "POST", "/v1/completions", `[1,2]`, 400, "invalid_request_error"},
		{"too large", "POST", "/v1/completions", `{"model":"m","prompt":"` + strings.Repeat("a", 2000) + `"}`, 413, "invalid_request_error"},
		{"unknown route", "POST", "/admin/secret", `{}`, 404, "invalid_request_error"},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, "invalid_request_error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, f.srv.URL+tc.path, strings.NewReader(tc.body))
			resp, err := f.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			assertAPIError(t, resp, tc.status, tc.kind)
		})
	}
	if n := f.ups[0].served.Load(); n != 0 {
		t.Fatalf("upstream served %d bad requests", n)
	}
}

func assertAPIError(t *testing.T, resp *http.Response, status int, kind string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	body := readAll(t, resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" || e.Error.Type != kind || e.Error.Code == nil {
		t.Fatalf("body %s is not an OpenAI error of type %s (%v)", body, kind, err)
	}
	for _, leak := range []string{"127.0.0.1", "dial", "goroutine", "panic"} {
		if strings.Contains(body, leak) {
			t.Fatalf("error body leaks %q: %s", leak, body)
		}
	}
}

func TestSessionHeaderOverridesPrefix(t *testing.T) {
	f := newFixture(t, 4)
	homes := map[string]bool{}
	for i := range 30 {
		resp := f.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"different prompt %d"}`, i), "X-Session-ID", "user-42")
		homes[resp.Header.Get("X-Prefixring-Endpoint")] = true
		readAll(t, resp.Body)
	}
	if len(homes) != 1 {
		t.Fatalf("one session went to %d endpoints", len(homes))
	}
}

func TestOtherRoutesAreProxied(t *testing.T) {
	f := newFixture(t, 2)
	resp, err := f.srv.Client().Get(f.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(body, `"path":"/v1/models"`) || resp.Header.Get("X-Prefixring-Decision") != "fallback" {
		t.Fatalf("GET /v1/models: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	a := f.post(t, "/v1/embeddings", `{"model":"e","input":"embed this text"}`)
	b := f.post(t, "/v1/embeddings", `{"input":"embed this text","model":"e"}`)
	if a.Header.Get("X-Prefixring-Decision") != "home" || a.Header.Get("X-Prefixring-Endpoint") != b.Header.Get("X-Prefixring-Endpoint") {
		t.Fatalf("embeddings not keyed: %v / %v", a.Header, b.Header)
	}
}
