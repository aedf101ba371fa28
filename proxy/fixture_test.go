package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
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

	"github.com/prefixring/prefixring/internal/memhttp"
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
	hung   atomic.Bool // answers nothing, its health probe included
}

func newUpstream(t *testing.T, name string) *fakeServer { return newUpstreamOn(t, name, nil) }

// newUpstreamOn is newUpstream listening on mem at name:80 instead, when
// mem is not nil.
func newUpstreamOn(t *testing.T, name string, mem *memhttp.Net) *fakeServer {
	u := &fakeServer{name: name}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u.hung.Load() {
			if r.URL.Path != "/health" {
				u.served.Add(1)
			}
			io.Copy(io.Discard, r.Body) // then the server notices the connection close
			<-r.Context().Done()
			return
		}
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
	if mem != nil {
		u.Listener.Close()
		u.Listener = listenMem(t, mem, name+":80")
	}
	u.Start()
	t.Cleanup(func() {
		u.hung.Store(false)
		u.CloseClientConnections() // a hung handler waits on its connection
		u.Close()
	})
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
	endpoints *upstream.Set
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

func (o *observed) ObserveServerError(id string, request uint64, status int) {
	o.mu.Lock()
	o.failures[id]++
	o.mu.Unlock()
	o.inner.ObserveServerError(id, request, status)
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

// serve starts a public Server for h with cfg on 127.0.0.1, or on mem at
// router:80 when mem is not nil; the test's cleanup closes it.
func serve(t *testing.T, cfg ServerConfig, h http.Handler, mem *memhttp.Net) *testServer {
	t.Helper()
	srv, err := NewServer(cfg, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	tr := &http.Transport{}
	if mem != nil {
		ln, tr.DialContext = listenMem(t, mem, "router:80"), mem.DialContext
	} else if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	client := &http.Client{Transport: tr}
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
	transport http.RoundTripper     // instead of NewTransport's
	targets   func(Targets) Targets // wraps the endpoint set the router resolves through
	health    func(*upstream.HealthConfig)
	ring      func(*ring.Config)
	// mem puts the router, its upstreams and its admin server on an
	// in-memory network, for tests that run in a synctest bubble (no
	// real socket may: it would stop the bubble's clock).
	mem *memhttp.Net
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
	rc := ring.DefaultConfig()
	if o.ring != nil {
		o.ring(&rc)
	}
	bal, err := ring.NewBalancer(rc)
	if err != nil {
		t.Fatal(err)
	}
	f.balancer = bal
	m := NewMetrics(f.reg, bal.Status)
	log := slog.New(slog.DiscardHandler)
	hc := upstream.DefaultHealthConfig()
	if o.health != nil {
		o.health(&hc)
	}
	if f.endpoints, err = upstream.NewSet(hc, upstream.Options{Log: log}); err != nil {
		t.Fatal(err)
	}
	f.endpoints.Subscribe(func(_, cur *upstream.Snapshot) { _ = bal.Update(ringEndpoints(cur)) })
	ctx, cancel := context.WithCancel(context.Background())
	running := make(chan struct{})
	go func() { defer close(running); f.endpoints.Dispatch(ctx) }() // no probes: tests drive health
	t.Cleanup(func() { cancel(); <-running })
	var urls []string
	for i := range n {
		u := newUpstreamOn(t, fmt.Sprintf("up%d", i), o.mem)
		f.ups = append(f.ups, u)
		urls = append(urls, u.URL)
	}
	f.setEndpoints(t, urls...)
	keyer, err := prefix.New(prefix.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	f.transport = NewTransport(cfg)
	if o.mem != nil {
		f.transport.DialContext = o.mem.DialContext
	}
	t.Cleanup(f.transport.CloseIdleConnections)
	f.observed = &observed{inner: f.endpoints, failures: map[string]int{}}
	var tr http.RoundTripper = f.transport
	if o.transport != nil {
		tr = o.transport
	}
	var targets Targets = f.endpoints
	if o.targets != nil {
		targets = o.targets(targets)
	}
	rt, err := NewRouter(cfg, Deps{Picker: bal, Keys: keyer, Targets: targets, Observer: f.observed, Metrics: m, Log: log, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	f.router = rt
	scfg := DefaultServerConfig()
	if o.server != nil {
		o.server(&scfg)
	}
	ops := Ops{Gatherer: f.reg, Status: bal.Status, LoadFactor: 1.25, Draining: f.draining.Load}
	f.srv = serve(t, scfg, Public(rt, ops), o.mem)
	f.admin = httptest.NewUnstartedServer(Admin(ops))
	if o.mem != nil {
		f.admin.Listener.Close()
		f.admin.Listener = listenMem(t, o.mem, "admin:80")
	}
	f.admin.Start()
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

func mustID(t *testing.T, raw string) string {
	ep, _, err := upstream.ParseEndpoint(raw)
	if err != nil {
		t.Fatal(err)
	}
	return ep.ID
}

func ringEndpoints(s *upstream.Snapshot) []ring.Endpoint {
	out := make([]ring.Endpoint, len(s.Endpoints))
	for i, e := range s.Endpoints {
		out[i] = ring.Endpoint{ID: e.ID, Healthy: e.Healthy}
	}
	return out
}

// setEndpoints makes the fixture route to urls, and waits until the
// balancer has them.
func (f *fixture) setEndpoints(t *testing.T, urls ...string) {
	t.Helper()
	if err := f.endpoints.SetSource("static", urls); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, u := range urls {
		want[mustID(t, u)] = true
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := f.balancer.Status()
		got := map[string]bool{}
		for _, e := range st {
			got[e.ID] = true
		}
		if maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("balancer has %v, want %v", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// setHealthy marks every routed endpoint healthy or not, straight on the
// balancer (the endpoint set's own checks are not consulted).
func (f *fixture) setHealthy(ids map[string]bool) {
	var eps []ring.Endpoint
	for _, id := range f.endpoints.Snapshot().IDs() {
		eps = append(eps, ring.Endpoint{ID: id, Healthy: ids[id]})
	}
	_ = f.balancer.Update(eps)
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

// listenMem opens addr on mem, failing the test if it is taken.
func listenMem(t testing.TB, mem *memhttp.Net, addr string) net.Listener {
	t.Helper()
	ln, err := mem.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
