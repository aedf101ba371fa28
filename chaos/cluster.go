package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixring/prefixring/chaos/memnet"
	"github.com/prefixring/prefixring/gossip"
	"github.com/prefixring/prefixring/internal/memhttp"
	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/proxy"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/router"
	"github.com/prefixring/prefixring/sim/vllm"
	"github.com/prefixring/prefixring/upstream"
)

// Config shapes a cluster.
type Config struct {
	Replicas, Engines int
	Seed              uint64
	Ring              ring.Config
	Gossip            gossip.Config // NodeName, BindAddr, Join and Transport are set per replica
	Health            upstream.HealthConfig
	Proxy             proxy.Config
	// Engine configures every simulated engine.
	Engine vllm.Config
	// Log, when set, receives every component's logs (CHAOS_LOG=1 sends
	// them to stderr).
	Log *slog.Logger
}

// DefaultConfig is the production configuration, with health probes every
// second so scenarios see ejections in seconds.
func DefaultConfig() Config {
	h := upstream.DefaultHealthConfig()
	h.Interval, h.Timeout = time.Second, 500*time.Millisecond
	e := vllm.DefaultConfig()
	e.DefaultMaxTokens = 16
	p := proxy.DefaultConfig()
	p.EndpointAddress = true // scenarios match X-Prefixring-Endpoint to engines' host:port
	return Config{Replicas: 3, Engines: 4, Seed: 1, Ring: ring.DefaultConfig(), Gossip: gossip.DefaultConfig(),
		Health: h, Proxy: p, Engine: e}
}

// Cluster is router replicas, engines and the networks between them.
type Cluster struct {
	cfg     Config
	HTTP    *memhttp.Net
	Gossip  *memnet.Network
	log     *slog.Logger
	mu      sync.Mutex
	reps    []*Replica // by index; nil while down
	engines []*Engine
	// crashes[i] counts replica i's crashes, so a client can tell a request
	// cut by one from a lost one.
	crashes []int
	paths   paths // cut network paths from replicas to engines
}

// Engine is one simulated vLLM server on the in-memory network.
type Engine struct {
	Addr, URL string
	Server    *vllm.Server
	ln        *memhttp.Listener
	http      *http.Server
	stop      context.CancelFunc
	done      sync.WaitGroup
}

// Replica is one router replica: the router that `prefixring serve` runs
// (router.New and Run), on the in-memory networks. Bal, Set and Node are
// its balancer, endpoint set and gossip node.
type Replica struct {
	Name, Addr, AdminAddr, GossipAddr string
	Router                            *router.Replica
	Bal                               *ring.Balancer
	Set                               *upstream.Set
	Node                              *gossip.Node
	ln                                *memhttp.Listener
	stop                              context.CancelFunc
	done                              chan error
}

// New builds the networks; Start brings up engines and replicas.
func New(cfg Config) *Cluster {
	log := cfg.Log
	if log == nil && os.Getenv("CHAOS_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cluster{cfg: cfg, HTTP: memhttp.NewNet(), Gossip: memnet.New(cfg.Seed), log: log,
		reps: make([]*Replica, cfg.Replicas), engines: make([]*Engine, cfg.Engines), crashes: make([]int, cfg.Replicas)}
}

// EngineURL is engine i's URL, the endpoint ID the routers use.
func EngineURL(i int) string { return fmt.Sprintf("http://10.1.0.%d:8000", i+1) }

// ReplicaAddr is replica i's HTTP address.
func ReplicaAddr(i int) string { return fmt.Sprintf("10.0.0.%d:8080", i+1) }

func gossipAddr(i int) string { return fmt.Sprintf("10.0.0.%d:7946", i+1) }

// EngineURLs are every engine's URL.
func (c *Cluster) EngineURLs() []string {
	out := make([]string, c.cfg.Engines)
	for i := range out {
		out[i] = EngineURL(i)
	}
	return out
}

// Start starts every engine, then every replica with the full endpoint
// list, and waits until they form one cluster.
func (c *Cluster) Start() error {
	for i := range c.cfg.Engines {
		if err := c.StartEngine(i); err != nil {
			return err
		}
	}
	for i := range c.cfg.Replicas {
		if err := c.StartReplica(i, c.EngineURLs()); err != nil {
			return err
		}
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		full := true
		for _, r := range c.Live() {
			full = full && len(r.Node.Status().Members) == c.cfg.Replicas
		}
		if full {
			return nil
		}
	}
	return fmt.Errorf("chaos: replicas did not form one cluster")
}

// StartRouting starts every engine, then every replica with only the
// first routed engines as its static list (the rest wait for the workers
// API), without waiting for the replicas to form one cluster.
func (c *Cluster) StartRouting(routed int) error {
	for i := range c.cfg.Engines {
		if err := c.StartEngine(i); err != nil {
			return err
		}
	}
	for i := range c.cfg.Replicas {
		if err := c.StartReplica(i, c.EngineURLs()[:routed]); err != nil {
			return err
		}
	}
	return nil
}

// Workers calls replica i's workers API with token (empty: none):
// POST /workers registering url, or DELETE /workers/{url}, and returns the
// status.
func (c *Cluster) Workers(i int, method, url, token string) (int, error) {
	target, body := "http://"+ReplicaAdminAddr(i)+"/workers", io.Reader(nil)
	if method == http.MethodPost {
		body = strings.NewReader(`{"url":"` + url + `","worker_type":"regular"}`)
	} else {
		target += "/" + neturl.QueryEscape(url)
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	tr := c.transport()
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// StartEngine starts (or restarts, at the same address) engine i.
func (c *Cluster) StartEngine(i int) error { return c.startEngineAt(i, EngineURL(i)) }

// startEngineAt starts engine i at url.
func (c *Cluster) startEngineAt(i int, url string) error {
	cfg := c.cfg.Engine
	cfg.Seed = c.cfg.Seed + uint64(i)
	reg := prometheus.NewRegistry()
	s, err := vllm.New(cfg, reg, reg)
	if err != nil {
		return err
	}
	addr := url[len("http://"):]
	ln, err := c.HTTP.Listen(addr)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	e := &Engine{Addr: addr, URL: url, Server: s, ln: ln, http: &http.Server{Handler: s.Handler()}, stop: stop}
	e.done.Go(func() { s.Run(ctx) })
	e.done.Go(func() { _ = e.http.Serve(ln) })
	c.mu.Lock()
	c.engines[i] = e
	c.mu.Unlock()
	return nil
}

// Engine returns engine i, or nil while it is down.
func (c *Cluster) Engine(i int) *Engine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.engines[i]
}

// KillEngine kills engine i: its port refuses, its connections break.
func (c *Cluster) KillEngine(i int) {
	c.mu.Lock()
	e := c.engines[i]
	c.engines[i] = nil
	c.mu.Unlock()
	if e == nil {
		return
	}
	e.ln.Crash()
	_ = e.http.Close()
	e.stop()
	e.done.Wait()
}

// ReplaceEngine replaces engine i as a Kubernetes rolling update does: a
// new engine starts at a new address (generation gen), every live replica's
// endpoint list swaps the old one for it (as discovery would), and the old
// one stops as uvicorn does on SIGTERM: it takes no new connection and
// finishes the requests it has before it exits.
func (c *Cluster) ReplaceEngine(i, gen int) error {
	old := c.Engine(i)
	if err := c.startEngineAt(i, fmt.Sprintf("http://10.%d.0.%d:8000", gen+1, i+1)); err != nil {
		return err
	}
	urls := c.CurrentEngineURLs()
	for _, r := range c.Live() {
		if err := r.Set.SetSource("static", urls); err != nil {
			return err
		}
		if err := r.Set.WaitDispatched(context.Background()); err != nil {
			return err
		}
	}
	if old == nil {
		return nil
	}
	_ = old.ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := old.http.Shutdown(ctx)
	old.stop()
	old.done.Wait()
	return err
}

// CurrentEngineURLs are the URLs of the engines up now, by index.
func (c *Cluster) CurrentEngineURLs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.engines {
		if e != nil {
			out = append(out, e.URL)
		}
	}
	return out
}

// transport is an HTTP transport over the in-memory network.
func (c *Cluster) transport() *http.Transport {
	tr := proxy.NewTransport(c.cfg.Proxy)
	tr.DialContext = c.HTTP.DialContext
	tr.IdleConnTimeout = keepAlive
	return tr
}

// ReplicaAdminAddr is replica i's admin address (metrics, debug routes,
// the workers API).
func ReplicaAdminAddr(i int) string { return fmt.Sprintf("10.0.0.%d:9090", i+1) }

// routerConfig is replica i's configuration: the cluster's, with the
// static endpoints given, gossip on the in-memory network and no drain
// delay (nothing in front of the replicas needs time to notice a drain).
func (c *Cluster) routerConfig(i int, endpoints []string, mt memberlist.NodeAwareTransport) router.Config {
	rc := router.DefaultConfig()
	rc.Ring, rc.Health, rc.Proxy = c.cfg.Ring, c.cfg.Health, c.cfg.Proxy
	rc.Sources = router.Sources{Static: endpoints}
	gc := c.cfg.Gossip
	gc.NodeName, gc.BindAddr, gc.Transport = fmt.Sprintf("r%d", i), gossipAddr(i), mt
	gc.Join = nil
	for j := range c.cfg.Replicas {
		if j != i {
			gc.Join = append(gc.Join, gossipAddr(j))
		}
	}
	gc.Key = gossipKey
	rc.Gossip = &gc
	rc.Workers.Token = workersToken
	rc.DrainDelay = 0
	return rc
}

// gossipKey encrypts the replicas' gossip, as serve requires.
var gossipKey = []byte("chaos-gossip-key-of-32-bytes-abc")

// workersToken is the bearer token of every replica's workers API.
const workersToken = "chaos-admin-token"

// StartReplica starts (or restarts) replica i with endpoints as its
// static list, joining the others, and returns once it serves.
func (c *Cluster) StartReplica(i int, endpoints []string) error {
	return c.StartReplicaWith(i, endpoints, nil)
}

// StartReplicaWith is StartReplica with the replica's configuration
// changed by mutate first (a stranger without the key, another setting).
func (c *Cluster) StartReplicaWith(i int, endpoints []string, mutate func(*router.Config)) error {
	name := fmt.Sprintf("r%d", i)
	log := c.log.With("replica", name)
	mt, err := c.Gossip.Transport(gossipAddr(i))
	if err != nil {
		return err
	}
	ln, err := c.HTTP.Listen(ReplicaAddr(i))
	if err != nil {
		return err
	}
	aln, err := c.HTTP.Listen(ReplicaAdminAddr(i))
	if err != nil {
		_ = ln.Close()
		return err
	}
	rc := c.routerConfig(i, endpoints, mt)
	if mutate != nil {
		mutate(&rc)
	}
	rt, err := router.New(rc, router.Options{
		Log: log, Registry: prometheus.NewRegistry(), Transport: c.replicaTransport(i),
		Listener: ln, AdminListener: aln, Seed: c.cfg.Seed + uint64(i),
	})
	if err != nil {
		_ = ln.Close()
		_ = aln.Close()
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &Replica{Name: name, Addr: ReplicaAddr(i), AdminAddr: ReplicaAdminAddr(i), GossipAddr: gossipAddr(i),
		Router: rt, Bal: rt.Balancer(), Set: rt.Endpoints(), Node: rt.Node(), ln: ln, stop: stop, done: make(chan error, 1)}
	go func() { r.done <- rt.Run(ctx) }()
	select {
	case <-rt.Started():
	case err := <-r.done:
		stop()
		return err
	}
	c.mu.Lock()
	c.reps[i] = r
	c.mu.Unlock()
	return nil
}

// Replica returns replica i, or nil while it is down.
func (c *Cluster) Replica(i int) *Replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reps[i]
}

// Live returns the replicas that are up, in index order.
func (c *Cluster) Live() []*Replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Replica
	for _, r := range c.reps {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// Crashes returns how many times replica i crashed.
func (c *Cluster) Crashes(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashes[i]
}

// CrashReplica kills replica i as SIGKILL would: no leave, its gossip
// address goes silent, its connections break mid-request.
func (c *Cluster) CrashReplica(i int) { c.kill(i, c.Gossip.Crash) }

// BlackHoleReplica kills replica i's host as a power cut or a dropped
// network link would: its gossip address goes silent without resetting
// anything (packets vanish, dials to it hang for their timeout; see
// memnet's BlackHole), its clients are refused, its process stops.
func (c *Cluster) BlackHoleReplica(i int) { c.kill(i, c.Gossip.BlackHole) }

// kill stops replica i without a leave, silencing its gossip address as
// silence does, and breaks its client connections.
func (c *Cluster) kill(i int, silence func(addr string)) {
	c.mu.Lock()
	r := c.reps[i]
	c.reps[i] = nil
	c.crashes[i]++
	c.mu.Unlock()
	if r == nil {
		return
	}
	silence(r.GossipAddr)
	r.ln.Crash()
	r.Router.Close()
	<-r.done
	r.stop()
}

// keying is how a replica keys a body: the key, the group key and the
// shared characters, each of which its table of shared prefixes moves.
type keying struct {
	hash, group uint64
	shared      int
}

// keyingOf returns how live replica i keys chat body b.
func (c *Cluster) keyingOf(i int, b []byte) (keying, error) {
	c.mu.Lock()
	r := c.reps[i]
	c.mu.Unlock()
	if r == nil {
		return keying{}, fmt.Errorf("replica %d is not running", i)
	}
	return r.keying(b)
}

// keying returns how r keys chat body b with its current table.
func (r *Replica) keying(b []byte) (keying, error) {
	k, err := r.Router.Keys().Request(prefix.RouteChat, b, nil)
	return keying{k.Hash, k.Group, k.SharedChars}, err
}

// KeyAgreement is the share of bodies every live replica keys alike: the
// same key, group key and shared characters (the same table of shared
// prefixes read).
func (c *Cluster) KeyAgreement(bodies [][]byte) float64 {
	live := c.Live()
	agreed := 0
	for _, b := range bodies {
		keys := map[keying]bool{}
		for _, r := range live {
			k, err := r.keying(b)
			if err != nil {
				return 0
			}
			keys[k] = true
		}
		if len(keys) <= 1 {
			agreed++
		}
	}
	return float64(agreed) / float64(max(len(bodies), 1))
}

// StopReplica stops replica i cleanly, as SIGTERM does: it stops taking
// connections, lets in-flight requests finish, and leaves the cluster.
func (c *Cluster) StopReplica(i int) {
	c.mu.Lock()
	r := c.reps[i]
	c.reps[i] = nil
	c.mu.Unlock()
	if r == nil {
		return
	}
	r.stop()
	<-r.done
}

// Close stops everything and waits long enough for memberlist's last
// probes and streams to time out, so a synctest bubble ends empty.
func (c *Cluster) Close() {
	for i := range c.cfg.Replicas {
		c.StopReplica(i)
	}
	for i := range c.cfg.Engines {
		c.KillEngine(i)
	}
	time.Sleep(time.Minute)
}

// Probe is where each live replica would send each probe key now, without
// keeping a lease: probe[k][replica name] = endpoint.
func (c *Cluster) Probe(keys []uint64) []map[string]string {
	live := c.Live()
	out := make([]map[string]string, len(keys))
	for k, key := range keys {
		out[k] = map[string]string{}
		for _, r := range live {
			l, err := r.Bal.Acquire(ring.Request{Key: key, Keyed: true})
			if err != nil {
				out[k][r.Name] = "error"
				continue
			}
			l.Release()
			out[k][r.Name] = l.Endpoint
		}
	}
	return out
}

// Agreement is the share of probe keys every live replica sends to the
// same endpoint.
func (c *Cluster) Agreement(keys []uint64) float64 {
	if len(keys) == 0 {
		return 1
	}
	agreed := 0
	for _, m := range c.Probe(keys) {
		var eps []string
		for _, ep := range m {
			eps = append(eps, ep)
		}
		slices.Sort(eps)
		if len(slices.Compact(eps)) <= 1 {
			agreed++
		}
	}
	return float64(agreed) / float64(len(keys))
}

// ProbeKeys are n fixed probe keys.
func ProbeKeys(n int) []uint64 {
	keys := make([]uint64, n)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range keys {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		keys[i] = x
	}
	return keys
}

// Homes returns each probe key's home (its endpoint when none is over the
// bound) as the first live replica sees it.
func (c *Cluster) Homes(keys []uint64) []string {
	live := c.Live()
	out := make([]string, len(keys))
	if len(live) == 0 {
		return out
	}
	for k, key := range keys {
		out[k], _ = live[0].Bal.Home(key)
	}
	return out
}

// Routed reports whether every live replica routes to endpoint id as
// healthy (want true) or does not route to it at all or holds it out
// (want false).
func (c *Cluster) Routed(id string, want bool) bool {
	for _, r := range c.Live() {
		st, _ := r.Bal.Status()
		healthy := false
		for _, e := range st {
			if e.ID == id {
				healthy = e.Healthy
			}
		}
		if healthy != want {
			return false
		}
	}
	return true
}

// Excess is how far the busiest endpoint is above the bound computed from
// the true cluster-wide in-flight counts (every live replica's leases),
// over n routed endpoints; 0 or less means every endpoint is within it.
func (c *Cluster) Excess(n int) int64 {
	loads := map[string]int64{}
	var total int64
	for _, r := range c.Live() {
		for id, k := range r.Bal.Inflight().Counts() {
			loads[id] += k
			total += k
		}
	}
	b := ring.Bound{LoadFactor: c.cfg.Ring.LoadFactor, Min: c.cfg.Ring.MinBound}
	worst := int64(-1 << 62)
	for _, k := range loads {
		worst = max(worst, k-b.Slots(total-1, n))
	}
	return worst
}
