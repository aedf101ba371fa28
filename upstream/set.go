package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// State is one endpoint of a [Snapshot]: routable, and healthy or not.
type State struct {
	Endpoint
	Healthy bool
	// KVCapacity is the engine's KV cache capacity in tokens, an
	// operator's or scraped from the engine (see [KVConfig]); 0: unknown.
	KVCapacity int64
}

// Snapshot is an immutable view of the endpoints the replica routes to and
// their health, in ID order. The balancer reads one snapshot at a time, so
// an endpoint's health cannot outlive the endpoint.
type Snapshot struct {
	Endpoints []State
	byID      map[string]int
	// Gen grows with every change.
	Gen uint64
	// This replica's own observations, for the arbiter: what it discovered,
	// what its checks hold out, for failed requests, and what answered its
	// requests lately (see Arbiter).
	discovered, down, failing, served []string
	// Panic: too few endpoints are healthy, so every one is routed as
	// healthy (see HealthConfig.PanicThreshold).
	Panic bool
}

// Get returns endpoint id of the snapshot.
func (s *Snapshot) Get(id string) (State, bool) {
	i, ok := s.byID[id]
	if !ok {
		return State{}, false
	}
	return s.Endpoints[i], true
}

// IDs returns the endpoint IDs in order.
func (s *Snapshot) IDs() []string {
	out := make([]string, len(s.Endpoints))
	for i, e := range s.Endpoints {
		out[i] = e.ID
	}
	return out
}

// Arbiter turns this replica's own observations into the cluster's verdict:
// the gossip node, which hands the verdict back through [Set.ApplyVerdict].
// Vote must not block. gen orders observations: an arbiter keeps the
// highest it has seen. discovered are the endpoints this replica's sources
// name; down, those its checks hold out; failing, those of down held out
// for failed requests (not probes); served, those up that answered its
// requests within HealthConfig.ServedWindow.
type Arbiter interface {
	Vote(gen uint64, discovered, down, failing, served []string)
}

// Set is the one owner of the endpoint set and its health. Sources (static
// lists, DNS, files, a workers API) each set their own list, and the set is
// their union; active probes and passive observations eject and restore
// endpoints; with gossip, an [Arbiter] turns the replica's observations into
// the cluster's verdict, which decides what is routed. Every change builds a
// new [Snapshot], swapped in atomically; subscribers receive snapshots in
// order on one goroutine (see [Set.Run]), so a slow one, such as a ring
// rebuild, never holds up a source, a probe or the gossip loop.
type Set struct {
	cfg     HealthConfig
	log     *slog.Logger
	met     *Metrics
	client  *http.Client
	now     func() time.Time
	arbiter Arbiter

	mu      sync.Mutex
	alive   map[string]*aliveCtx // by ID: routed endpoints and departed ones that still hold tries
	sources map[string][]Endpoint
	local   []Endpoint        // union of the sources, by ID
	checks  map[string]*check // by ID: local or routed endpoints only
	unnamed map[string]bool   // endpoints the verdict names and no local source does
	verdict *verdict          // the arbiter's, nil before the first
	gen     uint64
	// panicking: the last snapshot routed every endpoint as healthy.
	panicking bool
	// faults are the requests (by fingerprint) that answered 5xx lately,
	// for telling a request's fault from an endpoint's (see
	// ObserveServerError).
	faults faultLedger
	// kv is what is known of each discovered or routed endpoint's KV
	// capacity; kvNew wakes the scraper for endpoints that just appeared.
	kv       map[string]*kvEntry
	kvCfg    KVConfig
	kvClient *http.Client
	kvNew    chan struct{}

	snap       atomic.Pointer[Snapshot]
	dispatched atomic.Uint64 // the newest generation the subscribers have seen
	wake       chan struct{}
	subs       []func(old, new *Snapshot)
	probe      chan struct{}
}

// aliveCtx is a context that ends when its endpoint stops answering its
// probes at all (hung or gone), or when it has left the routed set and
// holds no try any more.
type aliveCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	url    *url.URL
	holds  int // tries waiting on the endpoint now (see Set.Hold)
}

// gone is the context of an endpoint that is not alive.
var gone = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

type verdict struct {
	endpoints []string
	down      map[string]bool
}

// Options are a Set's collaborators; all may be zero.
type Options struct {
	// Transport carries probes; nil: http.DefaultTransport.
	Transport http.RoundTripper
	// Metrics records ejections; nil: none.
	Metrics *Metrics
	// Log receives ejections and recoveries; nil: discarded.
	Log *slog.Logger
	// Arbiter, with gossip, decides the routed set from every replica's
	// observations. nil: this replica's observations decide.
	Arbiter Arbiter
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// KV is how the endpoints' KV capacities are learned; zero: they are
	// not ([DefaultKVConfig] scrapes them).
	KV KVConfig
}

// NewSet returns an empty set checked as cfg says.
func NewSet(cfg HealthConfig, o Options) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := o.KV.Validate(); err != nil {
		return nil, err
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Set{
		cfg: cfg, log: o.Log, met: o.Metrics, now: o.Now, arbiter: o.Arbiter,
		client:  noRedirects(&http.Client{Transport: o.Transport, Timeout: cfg.Timeout}),
		sources: map[string][]Endpoint{}, checks: map[string]*check{}, alive: map[string]*aliveCtx{},
		wake: make(chan struct{}, 1), probe: make(chan struct{}, 1),
		kv: map[string]*kvEntry{}, kvCfg: o.KV, kvNew: make(chan struct{}, 1),
		kvClient: noRedirects(&http.Client{Transport: o.Transport, Timeout: o.KV.Timeout}),
	}
	s.snap.Store(&Snapshot{byID: map[string]int{}})
	return s, nil
}

// noRedirects makes c return a redirect as the answer instead of
// following it. Probes and scrapes go to every endpoint the sources name,
// registered workers included; following a redirect would let an endpoint
// send the router's requests to any address, the cloud metadata service
// the worker policy refuses among them. A redirect is then no healthy
// answer and no capacity (TestProbesAndScrapesFollowNoRedirect).
func noRedirects(c *http.Client) *http.Client {
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// SetArbiter makes a (the gossip node) decide what is routed from every
// replica's observations. Call it before any source is set.
func (s *Set) SetArbiter(a Arbiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.arbiter = a
}

// Subscribe registers fn to receive every new snapshot, with the one it
// replaces, on the set's dispatch goroutine. Call it before [Set.Run].
func (s *Set) Subscribe(fn func(old, new *Snapshot)) { s.subs = append(s.subs, fn) }

// Snapshot returns the current snapshot.
func (s *Set) Snapshot() *Snapshot { return s.snap.Load() }

// URL returns the base URL of endpoint id, or nil if it is not routed.
func (s *Set) URL(id string) *url.URL {
	if e, ok := s.Snapshot().Get(id); ok {
		return e.URL
	}
	return nil
}

// Name returns what clients may see of endpoint id, or "".
func (s *Set) Name(id string) string {
	if e, ok := s.Snapshot().Get(id); ok {
		return e.Name
	}
	return ""
}

// SetSource replaces the endpoints of one source. It changes nothing and
// returns an error if any of them does not parse.
func (s *Set) SetSource(source string, raw []string) error {
	eps := make([]Endpoint, 0, len(raw))
	for _, r := range raw {
		ep, stripped, err := ParseEndpoint(r)
		if err != nil {
			return err
		}
		if stripped {
			s.log.Warn("endpoint given as an OpenAI base URL; using its server root", "given", r, "endpoint", ep.ID)
		}
		eps = append(eps, ep)
	}
	s.mu.Lock()
	if len(eps) == 0 {
		delete(s.sources, source)
	} else {
		s.sources[source] = eps
	}
	s.local = union(s.sources)
	s.rebuildLocked()
	return nil
}

// ApplyVerdict sets the cluster's verdict: the endpoints routed and those of
// them that are down. It returns at once; subscribers see it on the
// dispatch goroutine.
func (s *Set) ApplyVerdict(endpoints, down []string) {
	v := &verdict{endpoints: slices.Clone(endpoints), down: make(map[string]bool, len(down))}
	for _, id := range down {
		v.down[id] = true
	}
	s.mu.Lock()
	s.verdict = v
	s.rebuildLocked()
}

// union merges the sources' lists by ID; the first label named wins.
func union(sources map[string][]Endpoint) []Endpoint {
	names := make([]string, 0, len(sources))
	for n := range sources {
		names = append(names, n)
	}
	slices.Sort(names)
	byID := map[string]Endpoint{}
	for _, n := range names {
		for _, ep := range sources[n] {
			if old, ok := byID[ep.ID]; !ok || (old.Name == old.URL.Host && ep.Name != ep.URL.Host) {
				byID[ep.ID] = ep
			}
		}
	}
	out := make([]Endpoint, 0, len(byID))
	for _, ep := range byID {
		out = append(out, ep)
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// rebuildLocked derives the routed endpoints and their health from the
// sources, the checks and the verdict, prunes the checks of endpoints that
// are neither discovered, routed nor holding tries (so an endpoint that
// leaves and comes back starts afresh), swaps in the snapshot, and wakes
// the dispatcher, which tells the subscribers and the arbiter. It never
// calls out while holding s.mu: the arbiter calls ApplyVerdict with its own
// lock held. It unlocks s.mu.
func (s *Set) rebuildLocked() {
	local := map[string]Endpoint{}
	for _, ep := range s.local {
		local[ep.ID] = ep
	}
	var routed []State
	unnamed := map[string]bool{} // verdict endpoints not routed, warned once each
	if s.arbiter == nil || s.verdict == nil {
		for _, ep := range s.local {
			routed = append(routed, State{Endpoint: ep, Healthy: !s.checks[ep.ID].out(), KVCapacity: s.capacityLocked(ep)})
		}
	} else {
		for _, id := range s.verdict.endpoints {
			// Defence in depth: the cluster may take endpoints out of this
			// replica's set, never put one in that neither its own
			// discovery nor the (authenticated) workers API named. A peer
			// that holds the gossip key cannot point it at its own server.
			ep, ok := local[id]
			if !ok {
				if !s.unnamed[id] {
					s.log.Warn("cluster verdict names an endpoint this replica's discovery does not; not routed", "endpoint", id)
				}
				unnamed[id] = true
				continue
			}
			routed = append(routed, State{Endpoint: ep, Healthy: !s.verdict.down[id], KVCapacity: s.capacityLocked(ep)})
		}
	}
	s.unnamed = unnamed
	observed := map[string]bool{}
	for id := range local {
		observed[id] = true
	}
	for _, e := range routed {
		observed[e.ID] = true
	}
	for id := range observed {
		if s.checks[id] == nil {
			s.checks[id] = &check{}
		}
	}
	s.trackKVLocked(observed)
	s.updateAliveLocked(routed)
	for id := range s.checks {
		// A departed endpoint keeps its checks while tries wait on it
		// (updateAliveLocked reads whether its probes go unanswered).
		// Pruned after updateAliveLocked, not before: one whose alive
		// context that just ended holds nothing now, and if it is
		// discovered again it starts afresh, not silent.
		if !observed[id] && !s.holdsLocked(id) {
			delete(s.checks, id)
		}
	}
	panicking := s.panicLocked(routed)
	s.gen++
	snap := &Snapshot{Endpoints: routed, byID: make(map[string]int, len(routed)), Gen: s.gen,
		discovered: s.localIDs(), down: s.downLocked(observed), Panic: panicking}
	snap.failing, snap.served = s.evidenceLocked(observed, s.now())
	for i, e := range routed {
		snap.byID[e.ID] = i
	}
	s.snap.Store(snap)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// panicLocked applies the panic threshold: when fewer than PanicThreshold
// percent of the routed endpoints are healthy, every one is routed as
// healthy (Envoy's panic mode), since spreading requests over the fleet,
// the ejected included, serves more of them than answering 503 to all.
// It marks routed in place and reports whether it panicked.
func (s *Set) panicLocked(routed []State) bool {
	healthy := 0
	for _, e := range routed {
		if e.Healthy {
			healthy++
		}
	}
	panicking := len(routed) > 0 && healthy*100 < s.cfg.PanicThreshold*len(routed)
	if panicking != s.panicking {
		s.panicking = panicking
		s.met.setPanic(panicking)
		if panicking {
			s.log.Warn("too few healthy endpoints: routing to all (panic threshold)", "healthy", healthy, "endpoints", len(routed),
				"threshold_percent", s.cfg.PanicThreshold)
		} else {
			s.log.Info("enough healthy endpoints again: panic over", "healthy", healthy, "endpoints", len(routed))
		}
	}
	if panicking {
		for i := range routed {
			routed[i].Healthy = true
		}
	}
	return panicking
}

// updateAliveLocked keeps an alive context for every routed endpoint and
// every departed one that still holds tries, and ends the others' and
// those of endpoints whose probes get no answer at all (hung, or the host
// gone). Leaving the set ends nothing: an endpoint that leaves discovery
// takes no new requests and finishes those it has.
func (s *Set) updateAliveLocked(routed []State) {
	ok := make(map[string]*url.URL, len(routed))
	for _, e := range routed {
		ok[e.ID] = e.URL
	}
	for id, a := range s.alive {
		if _, routed := ok[id]; !routed && a.holds > 0 {
			ok[id] = a.url
		}
	}
	for id, a := range s.alive {
		if _, keep := ok[id]; !keep || s.checks[id].silent(s.cfg.FailureThreshold) {
			a.cancel()
			delete(s.alive, id)
		}
	}
	for id, u := range ok {
		if _, has := s.alive[id]; !has && !s.checks[id].silent(s.cfg.FailureThreshold) {
			ctx, cancel := context.WithCancel(context.Background())
			s.alive[id] = &aliveCtx{ctx: ctx, cancel: cancel, url: u}
		}
	}
}

func (s *Set) holdsLocked(id string) bool {
	a := s.alive[id]
	return a != nil && a.holds > 0
}

// drainingLocked reports whether id has left the set (neither discovered
// nor routed) while tries still wait on it.
func (s *Set) drainingLocked(id string) bool {
	if _, routed := s.snap.Load().byID[id]; routed {
		return false
	}
	for _, ep := range s.local {
		if ep.ID == id {
			return false
		}
	}
	return true
}

// Hold returns a context that ends when endpoint id stops answering its
// probes at all (hung, or its host gone), and a release function to call
// once the try no longer waits on it. While held, an endpoint that leaves
// the set keeps being probed and its context lives: its in-flight work
// finishes there. For an endpoint neither routed nor held, or one that
// answers nothing, the context has already ended.
func (s *Set) Hold(id string) (context.Context, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.alive[id]
	if a == nil {
		return gone, func() {}
	}
	a.holds++
	var once sync.Once
	return a.ctx, func() { once.Do(func() { s.release(id, a) }) }
}

// release ends a hold; the last hold of a departed endpoint forgets it.
func (s *Set) release(id string, a *aliveCtx) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a.holds--
	if a.holds > 0 || s.alive[id] != a || !s.drainingLocked(id) {
		return
	}
	a.cancel()
	delete(s.alive, id)
	delete(s.checks, id)
}

func (s *Set) localIDs() []string {
	out := make([]string, len(s.local))
	for i, ep := range s.local {
		out[i] = ep.ID
	}
	return out
}

// downLocked lists the endpoints this replica's own checks hold out, of
// those it discovered or routes (not departed ones still finishing tries).
func (s *Set) downLocked(observed map[string]bool) []string {
	var out []string
	for id, c := range s.checks {
		if c.out() && observed[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func sameRouting(a, b *Snapshot) bool {
	return slices.EqualFunc(a.Endpoints, b.Endpoints, func(x, y State) bool {
		return x.ID == y.ID && x.Healthy == y.Healthy && x.Name == y.Name && x.KVCapacity == y.KVCapacity
	})
}

// Run dispatches snapshots to the subscribers and probes the endpoints
// every interval until ctx ends.
func (s *Set) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.Dispatch(ctx) })
	wg.Go(func() { s.probeLoop(ctx) })
	wg.Go(func() { s.servedLoop(ctx) })
	if s.kvCfg.Scrape {
		wg.Go(func() { s.kvLoop(ctx) })
	}
	wg.Wait()
}

// Dispatch hands each new snapshot to the subscribers, and this replica's
// changed observations to the arbiter, until ctx ends, skipping snapshots
// superseded while the last call ran (the latest always arrives). [Set.Run]
// runs it; a tool that does not probe may run it alone.
func (s *Set) Dispatch(ctx context.Context) {
	last := &Snapshot{byID: map[string]int{}}
	for {
		if cur := s.snap.Load(); cur.Gen != last.Gen {
			if !sameRouting(last, cur) || last.Gen == 0 {
				// Exported here, in the order the subscribers see the
				// snapshots, not when they are built: a subscriber that
				// forgets a departed endpoint's series (the router) would
				// otherwise delete the gauge of one that came back while
				// it ran (TestReturningEndpointKeepsItsCapacityGauge).
				for _, e := range cur.Endpoints {
					s.met.setKVCapacity(e.ID, e.KVCapacity)
				}
				for _, fn := range s.subs {
					fn(last, cur)
				}
			}
			s.mu.Lock()
			a := s.arbiter
			s.mu.Unlock()
			if a != nil && (last.Gen == 0 || !slices.Equal(last.discovered, cur.discovered) ||
				!slices.Equal(last.down, cur.down) || !slices.Equal(last.failing, cur.failing) || !slices.Equal(last.served, cur.served)) {
				a.Vote(cur.Gen, cur.discovered, cur.down, cur.failing, cur.served)
			}
			last = cur
			s.dispatched.Store(cur.Gen)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
	}
}

// WaitDispatched waits until the subscribers have seen the current
// snapshot, or ctx ends: a router opens its listener only once the
// balancer holds the endpoints it was started with.
func (s *Set) WaitDispatched(ctx context.Context) error {
	gen := s.Snapshot().Gen
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for s.dispatched.Load() < gen {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// String describes the snapshot for logs.
func (s *Snapshot) String() string {
	healthy := 0
	for _, e := range s.Endpoints {
		if e.Healthy {
			healthy++
		}
	}
	return fmt.Sprintf("%d endpoints, %d healthy", len(s.Endpoints), healthy)
}

func slicesSortHealth(h []EndpointHealth) {
	slices.SortFunc(h, func(a, b EndpointHealth) int { return strings.Compare(a.ID, b.ID) })
}
