package ring

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// Config configures a [Balancer].
type Config struct {
	// LoadFactor is c in the bound: an endpoint takes a request while it
	// holds less than ceil(c*(total+w)/n) load, w its weight; >= 1.
	// Default 1.25 (docs/study.md, "Question 2").
	LoadFactor float64
	// MinBound lets every endpoint hold MinBound load whatever the total
	// (see [Bound]), in the Signal's unit; 0 is the textbook bound. Default
	// 16384 tokens: at low load the relative bound would spill a home's
	// second prompt, though an engine prefills 8192 tokens a step
	// (docs/study.md, "Question 2"); under [SignalRequests] use
	// [DefaultMinRequests]. A chat request its key alone places, and a
	// later turn of a held group's chat, have no floor (see
	// [Request.NewKnown]).
	MinBound int64
	// Placement places partitions on endpoints; it must match on every
	// replica of a cluster.
	Placement PlacementConfig
	// Signal is the unit of load; every replica of a cluster must use the
	// same. Default [SignalTokens] (docs/study.md, "Question 2").
	Signal Signal
	// KVMinBound lets every endpoint of unknown KV capacity hold that many
	// KV tokens (K) whatever the total; 0 (the default) is the textbook
	// bound, c·average, with an idle endpoint taking any prompt (see the
	// package's K).
	KVMinBound int64
	// KVAverage bounds K by c·average on endpoints of unknown KV capacity
	// (the textbook CHWBL bound, in KV tokens); without it only a known
	// capacity bounds K. Default false: on the study's workloads with the
	// engines' capacity hidden it spilled 7–46 % of requests that the
	// engines had room for and doubled agentic's mean TTFT (20 → 40 ms at
	// ×1, seed 3; docs/study.md, "K's bound"), while vLLM, SGLang and
	// llama.cpp engines report their capacity (upstream's KV scrape).
	KVAverage bool
	// KVCapacityFactor bounds K on an endpoint of known KV capacity at
	// that many times the capacity; 0 is [DefaultKVCapacityFactor].
	KVCapacityFactor float64
	// KVLoadFactor lets an endpoint of known capacity, when every healthy
	// endpoint's is known, fill beyond KVCapacityFactor up to that many
	// times its share of the fleet's K (its capacity over the fleet's):
	// CHWBL's bound on K, weighted by capacity, of which KVCapacityFactor
	// is the floor. When the fleet's memory is full everywhere, a spill
	// finds no engine with room and only recomputes its history, so a
	// request then stays home unless its home is fuller than the rest.
	// 0 is [DefaultKVLoadFactor]; else at least 1.
	KVLoadFactor float64
	// GroupSpread, when above 0, keeps a shared prefix's requests on as few
	// endpoints as hold its traffic to 1/GroupSpread of each one's fair
	// share: a group key with share s of the requests (Request.GroupShare)
	// goes to about GroupSpread·n·s of the n endpoints, its requests' own
	// keys choosing among them. A rare system prompt is then computed on
	// one engine instead of every engine its requests reach, and a common
	// one still spreads over all. Only a shared part of at least 1024
	// tokens is kept together; a shorter one is placed by the keys alone
	// (docs/study.md, "Short shared parts"). Default 8 (docs/study.md,
	// "The key").
	GroupSpread float64
	// GroupMemory, when above 0 and every healthy endpoint's KV capacity
	// is known, caps a group's spread by the memory its copies take: a
	// group with share s of the requests whose shared part is L tokens
	// goes to at most GroupMemory·s·C/L endpoints, C the fleet's KV
	// capacity in tokens, so its copies take at most GroupMemory of the
	// memory its share of the traffic earns, and all groups' copies
	// together at most GroupMemory of the fleet's. A fleet of small
	// caches then keeps a long system prompt on a few engines instead of
	// a copy on each, leaving room for the conversations' own history;
	// on H100-sized caches it never binds below GroupSpread. Default
	// 0.25 ([DefaultGroupMemory]).
	GroupMemory float64
	// Pace measures each endpoint's pace from its answers, and P's bound
	// reads a much slower endpoint's load at its pace (see [Pace]); the
	// zero value is off. Default [DefaultPaceConfig].
	Pace PaceConfig
}

// DefaultGroupMemory is [Config.GroupMemory]'s default, chosen on the
// demo's seeds 1–10 against 0.125, 0.5 and none
// (docs/study.md, "Copies of a shared part").
const DefaultGroupMemory = 0.25

// DefaultKVCapacityFactor is K's bound on an engine of known capacity,
// in capacities. K counts a request's whole prompt from its pick to its
// end, a group's shared part once per engine across all replicas, and not
// the answers being decoded, nor the memory an engine keeps free; at the
// capacity itself engines whose running requests filled their memory
// still queued requests for it, for as long as a decode takes. 0.85 was
// chosen on seeds 1–5 of the demo's shape and the small fleet's grid
// against 0.8, 0.9, 1.0 and 1.25 (docs/study.md, "K's bound").
const DefaultKVCapacityFactor = 0.85

// DefaultKVLoadFactor is K's relative bound ([Config.KVLoadFactor]),
// chosen with DefaultKVCapacityFactor on the same runs against 1.05, 1.15,
// 1.25 and none (docs/study.md, "K's bound").
const DefaultKVLoadFactor = 1.1

// DefaultMinRequests is the floor under [SignalRequests]: the sweep behind
// it is in docs/gossip-measures.md ("The bound's floor").
const DefaultMinRequests = 4

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	return Config{LoadFactor: 1.25, MinBound: 16384, Placement: DefaultPlacement(), Signal: SignalTokens, GroupSpread: 8, GroupMemory: DefaultGroupMemory,
		Pace: DefaultPaceConfig()}
}

// MaxLoadFactor is the largest c the bound takes. Any c at or above the
// number of endpoints already never binds, so nothing is lost; above it
// (inf, 1e18) c·total overflowed the bound's int64 and wrapped it down to
// its floor, the opposite of what was asked.
const MaxLoadFactor = 1000

// Validate reports a configuration the balancer cannot use.
func (c Config) Validate() error {
	if !(c.LoadFactor >= 1 && c.LoadFactor <= MaxLoadFactor) {
		return fmt.Errorf("ring: load factor %v must be between 1 and %v", c.LoadFactor, MaxLoadFactor)
	}
	if c.MinBound < 0 {
		return fmt.Errorf("ring: min bound %d must be >= 0", c.MinBound)
	}
	if _, err := ParseSignal(string(c.Signal)); err != nil {
		return err
	}
	if c.KVMinBound < 0 {
		return fmt.Errorf("ring: KV min bound %d must be >= 0", c.KVMinBound)
	}
	if !(c.KVCapacityFactor >= 0 && c.KVCapacityFactor <= MaxLoadFactor) {
		return fmt.Errorf("ring: KV capacity factor %v must be 0 (the default, %v) or above 0 and at most %v", c.KVCapacityFactor, DefaultKVCapacityFactor, MaxLoadFactor)
	}
	if !(c.KVLoadFactor == 0 || c.KVLoadFactor >= 1 && c.KVLoadFactor <= MaxLoadFactor) {
		return fmt.Errorf("ring: KV load factor %v must be 0 (the default, %v) or between 1 and %v", c.KVLoadFactor, DefaultKVLoadFactor, MaxLoadFactor)
	}
	if !(c.GroupSpread >= 0) || math.IsInf(c.GroupSpread, 0) {
		return fmt.Errorf("ring: group spread %v must be >= 0", c.GroupSpread)
	}
	if !(c.GroupMemory >= 0) || math.IsInf(c.GroupMemory, 0) {
		return fmt.Errorf("ring: group memory %v must be >= 0", c.GroupMemory)
	}
	if err := c.Pace.Validate(); err != nil {
		return err
	}
	return c.Placement.Validate()
}

// Balancer hands out leases on endpoints. Its pick reads one immutable
// snapshot through an atomic pointer and takes no lock; changes to the
// endpoint set, health or loads build a new snapshot off to the side and
// swap it in. A new placement (the expensive part: buraksezer/consistent
// builds it in O(n² · replicas)) is built with no lock held, so picks,
// health changes and other readers never wait for it.
type Balancer struct {
	cfg      Config
	inflight *Inflight
	pace     *Pace      // nil: off
	mu       sync.Mutex // serializes snapshot swaps; never held while a ring is built
	snap     atomic.Pointer[snapshot]
	gen      atomic.Uint64 // generations handed to Update
	applied  uint64        // the newest generation swapped in; guarded by mu
	unkeyed  atomic.Uint64 // spreads ties of unkeyed requests
}

type snapshot struct {
	ring     *Ring // nil until the first endpoint set
	state    *State
	healthy  []bool  // by ring index
	capacity []int64 // KV capacity in tokens by ring index; nil: none known
	loads    Loads   // P
	kv       Loads   // K
}

// Endpoint is one endpoint of an update: its ID, whether it may take
// requests, and its engine's KV capacity in tokens where known (0:
// unknown), which bounds K there: vLLM's vllm:cache_config_info
// num_gpu_blocks × block_size (see upstream.ParseKVCapacity). The fleet
// simulator sets it, and prefixring serve from each engine's metrics or
// --kv-capacity.
type Endpoint struct {
	ID         string
	Healthy    bool
	KVCapacity int64
}

// NewBalancer returns a balancer with no endpoints; requests fail with
// ErrNoEndpoints until [Balancer.Update] is called.
func NewBalancer(cfg Config) (*Balancer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Balancer{cfg: cfg, inflight: NewInflight(), pace: NewPace(cfg.Pace)}
	b.snap.Store(&snapshot{loads: b.inflight, kv: b.inflight.KV()})
	return b, nil
}

// Inflight returns this replica's own counters.
func (b *Balancer) Inflight() *Inflight { return b.inflight }

// Pace returns the balancer's measure of its endpoints' pace (nil: off):
// its leases' [Lease.FirstToken] and [Lease.WholeAnswer] feed it.
func (b *Balancer) Pace() *Pace { return b.pace }

// SetEndpoints replaces the endpoint set with ids, all healthy.
func (b *Balancer) SetEndpoints(ids []string) error {
	eps := make([]Endpoint, len(ids))
	for i, id := range ids {
		eps[i] = Endpoint{ID: id, Healthy: true}
	}
	return b.Update(eps)
}

// Update replaces the endpoint set and its health in one step, so the
// health of an endpoint never outlives it. Endpoints keep their in-flight
// counts across the change. An unhealthy endpoint stays in the placement
// but leaves the candidate set: other endpoints' keys stay where they are,
// and its own keys come home when it recovers.
//
// When the set changes, the new placement is built with no lock held; if a
// later Update was swapped in meanwhile, this one is dropped, so an older
// build finishing late never replaces a newer state.
func (b *Balancer) Update(eps []Endpoint) error {
	gen := b.gen.Add(1)
	health := make(map[string]bool, len(eps))
	kvCap := map[string]int64{}
	ids := make([]string, 0, len(eps))
	for _, e := range eps {
		if _, dup := health[e.ID]; !dup {
			ids = append(ids, e.ID)
		}
		health[e.ID] = health[e.ID] || e.Healthy
		if e.KVCapacity > 0 {
			kvCap[e.ID] = e.KVCapacity
		}
	}
	slices.Sort(ids)
	r := b.snap.Load().ring
	if r == nil || !slices.Equal(r.ids, ids) {
		var err error
		if r, err = NewRing(ids, b.cfg.Placement); err != nil && !errors.Is(err, ErrNoEndpoints) {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if gen < b.applied {
		return nil // superseded while we built
	}
	b.applied = gen
	b.inflight.Track(ids)
	b.pace.Forget(ids)
	next := *b.snap.Load()
	next.ring, next.healthy, next.capacity = r, nil, nil
	if r != nil {
		next.healthy = make([]bool, r.Len())
		for i, id := range r.ids {
			next.healthy[i] = health[id]
		}
		if len(kvCap) > 0 {
			next.capacity = make([]int64, r.Len())
			for i, id := range r.ids {
				next.capacity[i] = kvCap[id]
			}
		}
	}
	b.swap(next)
	return nil
}

// SetLoads replaces what P's bound reads (by default this replica's own
// counters). The gossip layer sets a cluster-wide view here.
func (b *Balancer) SetLoads(l Loads) {
	b.mu.Lock()
	defer b.mu.Unlock()
	next := *b.snap.Load()
	next.loads = l
	b.swap(next)
}

// SetKVLoads replaces what K's bound reads (by default this replica's own
// K, [Inflight.KV]). The gossip layer sets a cluster-wide view here.
func (b *Balancer) SetKVLoads(l Loads) {
	b.mu.Lock()
	defer b.mu.Unlock()
	next := *b.snap.Load()
	next.kv = l
	b.swap(next)
}

// swap builds the state of s and stores it; b.mu must be held.
func (b *Balancer) swap(s snapshot) {
	s.state = nil
	if s.ring != nil {
		s.state = b.newState(&s, s.loads, s.kv)
	}
	b.snap.Store(&s)
}

// newState is the state of a pick over s reading loads (P) and kv (K).
func (b *Balancer) newState(s *snapshot, loads, kv Loads) *State {
	st := NewState(s.ring, s.healthy, loads, b.cfg.bound())
	st.pace, st.quietP = b.pace, b.cfg.Signal.quietLoad()
	st.kv = kvState{loads: kv, cap: s.capacity, capTotal: capTotal(s.capacity, s.healthy), groups: b.inflight, average: b.cfg.KVAverage,
		bound:     Bound{LoadFactor: b.cfg.LoadFactor, Min: b.cfg.KVMinBound, Own: 1},
		capFactor: cmp.Or(b.cfg.KVCapacityFactor, DefaultKVCapacityFactor), capLoad: cmp.Or(b.cfg.KVLoadFactor, DefaultKVLoadFactor)}
	return st
}

// capTotal is the KV capacity of the healthy endpoints, 0 unless every
// healthy endpoint's is known.
func capTotal(capacity []int64, healthy []bool) int64 {
	var t int64
	for i, c := range capacity {
		if healthy != nil && !healthy[i] {
			continue
		}
		if c <= 0 {
			return 0
		}
		// Saturate: engines may report up to 2^62 tokens each, and a sum
		// wrapped around would turn K's relative bound and GroupMemory's
		// cap off, or make them read a tiny fleet.
		t += min(c, math.MaxInt64-t)
	}
	return t
}

// Acquire picks an endpoint for req and counts the request on it. Release
// the lease when the request ends.
func (b *Balancer) Acquire(req Request) (Lease, error) { return b.acquire(req, false) }

// acquire picks over the current snapshot: its state, or with local a
// state whose bound reads this balancer's own counts.
func (b *Balancer) acquire(req Request, local bool) (Lease, error) {
	s := b.snap.Load()
	if s.ring == nil {
		return Lease{}, ErrNoEndpoints
	}
	if !req.Keyed {
		req.Key = b.unkeyed.Add(1)
	}
	pw, settle := b.cfg.weights(req, s.state.nHealthy, s.state.kv.capTotal)
	st := s.state
	if local {
		st = b.newState(s, b.inflight, b.inflight.KV())
	}
	i, d, asHome, err := s.ring.place(req, pw, st)
	if err != nil {
		return Lease{}, err
	}
	// The lease counts what the pick's bound weighed: the new tokens where
	// the endpoint was bounded as the home (the home, or a followed
	// endpoint), the whole prompt elsewhere. Settle and Release then give
	// back exactly that.
	w, tokens := pw.p, pw.tokens
	if asHome && pw.homeP > 0 {
		w = pw.homeP
	}
	if asHome && pw.homeTokens > 0 {
		tokens = pw.homeTokens
	}
	l := b.lease(req, s.ring.ids[i], d, w, settle, tokens, pw)
	if l.h.pace != nil {
		// A busy endpoint's answers time its queue, not its pace.
		l.h.quiet = st.quiet(s.ring, i)
	}
	return l, nil
}

// lease counts req on id: w in P until Settle lowers it to settle, and
// its K until Release. Its first token is measured against tokens.
func (b *Balancer) lease(req Request, id string, d Decision, w, settle, tokens int64, pw weights) Lease {
	kv := kvHold{own: pw.kv}
	if pw.kvShared > 0 {
		kv.group, kv.shared = req.Group, pw.kvShared
	}
	h := b.inflight.acquire(id, w, settle, kv)
	h.pace, h.tokens = b.pace, tokens
	return Lease{Endpoint: id, Decision: d, h: h}
}

// Peek returns where Acquire would send req now, counting nothing: what
// /debug/pick shows and what the simulator's replicas compare, neither of
// which may move the loads it looks at. An unkeyed request is peeked as
// the next unkeyed Acquire would break its ties.
func (b *Balancer) Peek(req Request) (string, Decision, error) {
	s := b.snap.Load()
	if s.ring == nil {
		return "", DecisionFallback, ErrNoEndpoints
	}
	if !req.Keyed {
		req.Key = b.unkeyed.Load() + 1
	}
	return b.decide(s, req, s.state)
}

// Decide returns where req would go if P's bound read loads (K's reads
// what it reads now), counting nothing: what a replica with that view of
// the cluster's load would decide.
func (b *Balancer) Decide(req Request, loads Loads) (string, Decision, error) {
	s := b.snap.Load()
	return b.decideWith(s, req, loads, s.kv)
}

// DecideKV is [Balancer.Decide] with K's bound reading kv (nil: K bounds
// nothing): what a replica with that view of both would decide. The
// simulator asks it with the true cluster-wide loads, to tell the spills
// that a stale view of K caused.
func (b *Balancer) DecideKV(req Request, loads, kv Loads) (string, Decision, error) {
	return b.decideWith(b.snap.Load(), req, loads, kv)
}

func (b *Balancer) decideWith(s *snapshot, req Request, loads, kv Loads) (string, Decision, error) {
	if s.ring == nil {
		return "", DecisionFallback, ErrNoEndpoints
	}
	if !req.Keyed {
		req.Key = 0
	}
	return b.decide(s, req, b.newState(s, loads, kv))
}

// decide is a pick of req over s's ring in state st, counting nothing.
func (b *Balancer) decide(s *snapshot, req Request, st *State) (string, Decision, error) {
	pw, _ := b.cfg.weights(req, st.nHealthy, st.kv.capTotal)
	i, d, err := s.ring.pick(req, pw, st)
	if err != nil {
		return "", d, err
	}
	return s.ring.ids[i], d, nil
}

// Home returns where key goes when no endpoint is over the bound: its
// first usable candidate. It counts nothing; chaos tests read it to see
// which keys an endpoint change moved.
func (b *Balancer) Home(key uint64) (string, bool) { return b.HomeExcluding(key, nil) }

// HomeExcluding is [Balancer.Home] skipping the endpoints in exclude (a
// retry's earlier tries): an unbounded consistent hash.
func (b *Balancer) HomeExcluding(key uint64, exclude []string) (string, bool) {
	s := b.snap.Load()
	if s.ring == nil {
		return "", false
	}
	parts := uint64(len(s.ring.owner))
	for step := uint64(0); step < parts; step++ {
		if i := int(s.ring.owner[(key%parts+step)%parts]); s.state.usable(s.ring, i, exclude) {
			return s.ring.ids[i], true
		}
	}
	// No owner of a partition is usable: the first usable of those that
	// own none (more endpoints than partitions), as Candidates lists them.
	for i, id := range s.ring.ids {
		if s.state.usable(s.ring, i, exclude) {
			return id, true
		}
	}
	return "", false
}

// AcquireLocal is [Balancer.Acquire] with the bound reading this
// balancer's own in-flight counts, whatever cluster-wide view it was given:
// CHWBL as a replica without shared counts runs it (HAProxy, KubeAI at N
// replicas), for comparison.
func (b *Balancer) AcquireLocal(req Request) (Lease, error) { return b.acquire(req, true) }

// EndpointStatus is one endpoint as /debug/ring shows it.
type EndpointStatus struct {
	ID            string `json:"id"`
	Healthy       bool   `json:"healthy"`
	Load          int64  `json:"load"`           // what the bound reads, in the signal's unit
	LocalLoad     int64  `json:"local_load"`     // this replica's own leases' load
	LocalRequests int64  `json:"local_requests"` // this replica's own in-flight requests
	Partitions    int    `json:"partitions"`     // partitions owned
	// KV is K as its bound reads it: prompt tokens held in KV, in tokens;
	// KVCapacity bounds it where known (0: unknown).
	KV         int64 `json:"kv"`
	KVCapacity int64 `json:"kv_capacity,omitempty"`
	// Pace is the factor f at which the bound reads Load, as
	// f·(Load + overhead) − overhead: 1 unless this replica measured the
	// endpoint as slow ([Pace]).
	Pace float64 `json:"pace"`
}

// Status returns every endpoint of the current snapshot, in ID order, and
// the bound a request would meet now.
func (b *Balancer) Status() ([]EndpointStatus, int64) {
	s := b.snap.Load()
	if s.ring == nil {
		return nil, 0
	}
	out := make([]EndpointStatus, s.ring.Len())
	for i, id := range s.ring.ids {
		out[i] = EndpointStatus{
			ID: id, Healthy: s.state.Healthy(i), Load: s.state.load(id),
			LocalLoad: b.inflight.Load(id), LocalRequests: b.inflight.Requests(id), Partitions: s.ring.owned[i],
			Pace: b.pace.Factor(id),
		}
		if s.kv != nil {
			out[i].KV = s.kv.Load(id)
		}
		if i < len(s.capacity) {
			out[i].KVCapacity = s.capacity[i]
		}
	}
	return out, s.state.Bound()
}

// Candidate is an endpoint a request may go to, with the load the bound
// reads for it (cluster-wide when gossip sets the loads).
type Candidate struct {
	ID   string
	Load int64
}

// Candidates appends to dst the endpoints a request that already tried
// exclude may go to now (healthy, not excluded), in ID order, with their
// loads: what a policy other than the ring's chooses from.
func (b *Balancer) Candidates(exclude []string, dst []Candidate) []Candidate {
	s := b.snap.Load()
	if s.ring == nil {
		return dst
	}
	for i, id := range s.ring.ids {
		if s.state.usable(s.ring, i, exclude) {
			dst = append(dst, Candidate{ID: id, Load: s.state.load(id)})
		}
	}
	return dst
}

// AcquireOn counts req on endpoint id, chosen by a policy other than the
// ring's (one of [Balancer.Candidates]), with decision d. Release the
// lease when the request ends; its count is gossiped like any other.
func (b *Balancer) AcquireOn(req Request, id string, d Decision) Lease {
	pw, settle := b.cfg.weights(req, 0, 0)
	l := b.lease(req, id, d, pw.p, settle, pw.tokens, pw)
	if s := b.snap.Load(); l.h.pace != nil && s.ring != nil {
		if i, ok := slices.BinarySearch(s.ring.ids, id); ok {
			l.h.quiet = s.state.quiet(s.ring, i) // as Acquire's leases: see quietness
		}
	}
	return l
}
