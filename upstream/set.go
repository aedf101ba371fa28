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
}

// Snapshot is an immutable view of the endpoints the replica routes to and
// their health, in ID order. The balancer reads one snapshot at a time, so
// an endpoint's health cannot outlive the endpoint.
type Snapshot struct {
	Endpoints []State
	byID      map[string]int
	// Gen grows with every change.
	Gen uint64
	// This replica's own observations, for the arbiter: what it discovered
	// and what its checks hold out.
	discovered, down []string
	alive            map[string]context.Context
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
// highest it has seen.
type Arbiter interface {
	Vote(gen uint64, discovered, down []string)
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
	alive   map[string]aliveCtx // by ID: ends when the endpoint stops answering or leaves
	sources map[string][]Endpoint
	local   []Endpoint        // union of the sources, by ID
	checks  map[string]*check // by ID: local or routed endpoints only
	verdict *verdict          // the arbiter's, nil before the first
	gen     uint64

	snap       atomic.Pointer[Snapshot]
	dispatched atomic.Uint64 // the newest generation the subscribers have seen
	wake       chan struct{}
	subs       []func(old, new *Snapshot)
	probe      chan struct{}
}

// aliveCtx is a context that ends when its endpoint stops answering its
// probes or leaves the routed set.
type aliveCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
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
}

// NewSet returns an empty set checked as cfg says.
func NewSet(cfg HealthConfig, o Options) (*Set, error) {
	if err := cfg.Validate(); err != nil {
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
		client:  &http.Client{Transport: o.Transport, Timeout: cfg.Timeout},
		sources: map[string][]Endpoint{}, checks: map[string]*check{}, alive: map[string]aliveCtx{},
		wake: make(chan struct{}, 1), probe: make(chan struct{}, 1),
	}
	s.snap.Store(&Snapshot{byID: map[string]int{}})
	return s, nil
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
// are neither discovered nor routed (so an endpoint that leaves and comes
// back starts afresh), swaps in the snapshot, and wakes the dispatcher,
// which tells the subscribers and the arbiter. It never calls out while
// holding s.mu: the arbiter calls ApplyVerdict with its own lock held. It
// unlocks s.mu.
func (s *Set) rebuildLocked() {
	local := map[string]Endpoint{}
	for _, ep := range s.local {
		local[ep.ID] = ep
	}
	var routed []State
	if s.arbiter == nil || s.verdict == nil {
		for _, ep := range s.local {
			routed = append(routed, State{Endpoint: ep, Healthy: !s.checks[ep.ID].out()})
		}
	} else {
		for _, id := range s.verdict.endpoints {
			ep, ok := local[id]
			if !ok {
				var err error
				if ep, err = endpointOf(id); err != nil {
					s.log.Warn("cluster verdict names an endpoint this replica cannot route to", "endpoint", id, "err", err)
					continue
				}
			}
			routed = append(routed, State{Endpoint: ep, Healthy: !s.verdict.down[id]})
		}
	}
	keep := map[string]bool{}
	for id := range local {
		keep[id] = true
	}
	for _, e := range routed {
		keep[e.ID] = true
	}
	for id := range s.checks {
		if !keep[id] {
			delete(s.checks, id)
		}
	}
	for id := range keep {
		if s.checks[id] == nil {
			s.checks[id] = &check{}
		}
	}
	s.updateAliveLocked(routed)
	s.gen++
	snap := &Snapshot{Endpoints: routed, byID: make(map[string]int, len(routed)), Gen: s.gen,
		discovered: s.localIDs(), down: s.downLocked(), alive: make(map[string]context.Context, len(s.alive))}
	for id, a := range s.alive {
		snap.alive[id] = a.ctx
	}
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

// updateAliveLocked ends the alive context of every endpoint that left the
// routed set or that its probes ejected (it answers nothing: hung or gone),
// and starts one for every routed endpoint that lacks one.
func (s *Set) updateAliveLocked(routed []State) {
	ok := make(map[string]bool, len(routed))
	for _, e := range routed {
		if c := s.checks[e.ID]; !c.out() || c.byRequests {
			ok[e.ID] = true
		}
	}
	for id, a := range s.alive {
		if !ok[id] {
			a.cancel()
			delete(s.alive, id)
		}
	}
	for id := range ok {
		if _, has := s.alive[id]; !has {
			ctx, cancel := context.WithCancel(context.Background())
			s.alive[id] = aliveCtx{ctx, cancel}
		}
	}
}

// Alive returns a context that ends when endpoint id stops answering its
// probes (hung or gone) or leaves the routed set; one that has already ended
// if it is neither routed nor answering now.
func (s *Set) Alive(id string) context.Context {
	if ctx, ok := s.Snapshot().alive[id]; ok {
		return ctx
	}
	return gone
}

func (s *Set) localIDs() []string {
	out := make([]string, len(s.local))
	for i, ep := range s.local {
		out[i] = ep.ID
	}
	return out
}

// downLocked lists the endpoints this replica's own checks hold out.
func (s *Set) downLocked() []string {
	var out []string
	for id, c := range s.checks {
		if c.out() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func sameRouting(a, b *Snapshot) bool {
	return slices.EqualFunc(a.Endpoints, b.Endpoints, func(x, y State) bool {
		return x.ID == y.ID && x.Healthy == y.Healthy && x.Name == y.Name
	})
}

// Run dispatches snapshots to the subscribers and probes the endpoints
// every interval until ctx ends.
func (s *Set) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.Dispatch(ctx) })
	wg.Go(func() { s.probeLoop(ctx) })
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
				for _, fn := range s.subs {
					fn(last, cur)
				}
			}
			s.mu.Lock()
			a := s.arbiter
			s.mu.Unlock()
			if a != nil && (last.Gen == 0 || !slices.Equal(last.discovered, cur.discovered) || !slices.Equal(last.down, cur.down)) {
				a.Vote(cur.Gen, cur.discovered, cur.down)
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
