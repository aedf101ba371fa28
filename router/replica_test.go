package router

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/prefixring/prefixring/gossip"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Sources.Static = []string{"http://127.0.0.1:1"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("default with an endpoint: %v", err)
	}
	empty := DefaultConfig()
	empty.Workers.Mode = WorkersPublic
	if err := empty.Validate(); err != nil {
		t.Fatalf("no endpoints with the public workers API must start empty: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"no endpoints":         func(c *Config) { c.Sources.Static = nil },
		"policy":               func(c *Config) { c.Policy = "fastest" },
		"workers mode":         func(c *Config) { c.Workers.Mode = "everywhere" },
		"dns interval":         func(c *Config) { c.Sources.DNS, c.Sources.DNSInterval = "x:1", 0 },
		"file interval":        func(c *Config) { c.Sources.File, c.Sources.FileInterval = "f", -1 },
		"sketch fanout":        func(c *Config) { c.Sketch.Fanout = 1 },
		"drain":                func(c *Config) { c.DrainTimeout = -time.Second },
		"ring":                 func(c *Config) { c.Ring.LoadFactor = 0.5 },
		"proxy":                func(c *Config) { c.Proxy.MaxBodyBytes = -1 },
		"gossip without a key": func(c *Config) { g := gossip.DefaultConfig(); g.BindAddr = "127.0.0.1:0"; c.Gossip = &g },
		"gossip bind":          func(c *Config) { g := gossip.DefaultConfig(); g.BindAddr = "nowhere"; c.Gossip = &g },
	} {
		c := ok
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
}

// engine answers every chat completion with its own name.
func engine(t *testing.T, name string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"`+name+`"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(s.Close)
	return s
}

func listen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// start runs a replica over two engines and returns its API and admin
// URLs, the replica, and the channel Run's result arrives on.
func start(t *testing.T, ctx context.Context, mutate func(*Config)) (api, admin string, r *Replica, done chan error) {
	return startWith(t, ctx, mutate, Options{})
}

// startWith is start with opts, less the listeners and seed it sets.
func startWith(t *testing.T, ctx context.Context, mutate func(*Config), opts Options) (api, admin string, r *Replica, done chan error) {
	cfg := DefaultConfig()
	cfg.Sources.Static = []string{engine(t, "a").URL, engine(t, "b").URL}
	cfg.DrainDelay, cfg.DrainTimeout = 0, 5*time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	ln, aln := listen(t), listen(t)
	opts.Listener, opts.AdminListener, opts.Seed = ln, aln, 1
	r, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Started():
	case err := <-done:
		t.Fatal(err)
	}
	return "http://" + ln.Addr().String(), "http://" + aln.Addr().String(), r, done
}

func chat(t *testing.T, api, prompt string) (status int, endpoint string) {
	body := `{"model":"m","messages":[{"role":"user","content":"` + prompt + `"}]}`
	resp, err := http.Post(api+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Prefixring-Endpoint")
}

// The replica routes, keeps a key's requests on one endpoint, answers its
// admin routes, and on the end of its context drains and returns, its
// listeners closed.
func TestRunRoutesAndDrains(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api, admin, r, done := start(t, ctx, nil)
	code, first := chat(t, api, "the same prompt")
	if code != 200 || first == "" {
		t.Fatalf("first answer: %d, endpoint %q", code, first)
	}
	for range 5 {
		if code, ep := chat(t, api, "the same prompt"); code != 200 || ep != first {
			t.Fatalf("a repeated prompt went to %q (%d), first to %q", ep, code, first)
		}
	}
	for _, path := range []string{"/metrics", "/debug/ring", "/debug/endpoints", "/debug/pick?key=1", "/workers"} {
		resp, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("admin %s: %d", path, resp.StatusCode)
		}
	}
	if r.Node() != nil || r.Workers() == nil {
		t.Fatalf("gossip off, workers API on: node %v, workers %v", r.Node(), r.Workers())
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after a drain: %v", err)
	}
	if _, err := http.Get(api + "/healthz"); err == nil {
		t.Fatal("the API listener still answers after Run returned")
	}
}

// Close stops a replica at once, with a request still in flight.
func TestCloseStopsAtOnce(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	api, _, r, done := start(t, context.Background(), func(c *Config) {
		c.Sources.Static = []string{hang.URL}
		c.DrainTimeout = time.Hour
	})
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post(api+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err == nil {
			_ = resp.Body.Close()
		}
		errc <- err
	}()
	for r.Balancer().Inflight().Total() == 0 {
		time.Sleep(time.Millisecond)
	}
	r.Close()
	if err := <-done; err != nil {
		t.Fatalf("Run after Close: %v", err)
	}
	<-errc
}

// The debug pick route refuses a bad key with an OpenAI-style error.
func TestDebugPickBadKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	_, admin, _, done := start(t, ctx, nil)
	defer func() { cancel(); <-done }()
	resp, err := http.Get(admin + "/debug/pick?key=1,x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 400 || v.Error.Code != "invalid_key" {
		t.Fatalf("%d %+v %v", resp.StatusCode, v, err)
	}
}

// Gossip without a key runs only when asked, and then says so: in the
// log, /debug/cluster and prefixring_gossip_insecure.
func TestGossipInsecureIsVisible(t *testing.T) {
	g := gossip.DefaultConfig()
	g.NodeName, g.BindAddr = "lonely", "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	_, admin, r, done := start(t, ctx, func(c *Config) { c.Gossip, c.GossipInsecure = &g, true })
	defer func() { cancel(); <-done }()
	resp, err := http.Get(admin + "/debug/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Self     string `json:"self"`
		Insecure bool   `json:"insecure"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || !v.Insecure || v.Self == "" {
		t.Fatalf("/debug/cluster: %+v %v", v, err)
	}
	if got := gauge(t, r, "prefixring_gossip_insecure"); got != 1 {
		t.Fatalf("prefixring_gossip_insecure = %v", got)
	}
}

// gauge is the value of the registered gauge called name.
func gauge(t *testing.T, r *Replica, name string) float64 {
	mfs, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// The sketch's publication interval (what gossip.Config.SketchInterval
// was) defaults to a second and must be positive.
func TestSketchIntervalValidated(t *testing.T) {
	c := DefaultConfig()
	c.Sources.Static = []string{"http://10.0.0.1:8000"}
	if c.Sketch.Interval != time.Second || c.Validate() != nil {
		t.Fatalf("default sketch interval %v: %v", c.Sketch.Interval, c.Validate())
	}
	c.Sketch.Interval = -time.Second
	if c.Validate() == nil {
		t.Fatal("a negative sketch interval passed")
	}
}

// The debug key route answers a chat body's key, the same each time and
// different for another prompt, and refuses a body that is no chat with an
// OpenAI-style error.
func TestDebugKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	_, admin, _, done := start(t, ctx, nil)
	defer func() { cancel(); <-done }()
	key := func(body string) (int, string) {
		resp, err := http.Post(admin+"/debug/key", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			Key   string                `json:"key"`
			Error struct{ Code string } `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, v.Key + v.Error.Code
	}
	chat := func(s string) string { return `{"model":"m","messages":[{"role":"user","content":"` + s + `"}]}` }
	c1, a := key(chat("one prompt"))
	_, a2 := key(chat("one prompt"))
	_, b := key(chat("another prompt"))
	if c1 != 200 || a == "" || a != a2 || a == b {
		t.Fatalf("keys: %d %q %q %q", c1, a, a2, b)
	}
	if code, v := key(`not json`); code != 400 || v != "invalid_body" {
		t.Fatalf("a bad body: %d %q", code, v)
	}
}

// lockedBuffer is a log destination the replica's goroutines may share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// An empty AdminListen turns the admin listener off (docs/security.md):
// the replica serves its API and opens nothing else, so /metrics, /debug/*
// and the workers API are nowhere. With an address it logs the one it
// serves the admin routes on, which is what this test looks for.
func TestEmptyAdminListenServesNoAdmin(t *testing.T) {
	for _, admin := range []string{"", "127.0.0.1:0"} {
		cfg := DefaultConfig()
		cfg.Sources.Static = []string{engine(t, "a").URL}
		cfg.DrainDelay, cfg.DrainTimeout = 0, 5*time.Second
		cfg.AdminListen = admin
		logs := &lockedBuffer{}
		ln := listen(t)
		r, err := New(cfg, Options{Listener: ln, Log: slog.New(slog.NewTextHandler(logs, nil)), Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		select {
		case <-r.Started():
		case err := <-done:
			t.Fatal(err)
		}
		if code, _ := chat(t, "http://"+ln.Addr().String(), "hello"); code != 200 {
			t.Errorf("AdminListen %q: the API answered %d", admin, code)
		}
		http.DefaultClient.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if served := strings.Contains(logs.String(), "msg=admin "); served != (admin != "") {
			t.Errorf("AdminListen %q: admin listener served %v; log:\n%s", admin, served, logs)
		}
	}
}
