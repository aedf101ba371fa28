package eval

import (
	"cmp"
	"errors"
	"iter"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prefixring/prefixring/gossip"
	"github.com/prefixring/prefixring/gossip/core"

	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/fleet"
	"github.com/prefixring/prefixring/sim/replicas"
	"github.com/prefixring/prefixring/sim/workload"
)

// point is one combination of the axes.
type point struct {
	workload, policy string
	endpoints        int
	routers          int
	rateScale        float64
	loadFactor       float64
	minBound         int64
	signal           ring.Signal
	view             core.ViewMode
	interval         time.Duration
	key              string
	kvBlocks         int
	concurrency      int
	loss             float64
	seed             uint64
	slow             string // Config.SlowEngines, as slowName writes them
}

// points lists every combination of g in axis order, seed by seed, each
// with the point whose result it takes: itself, or the canonical point
// that differs from it only in axes its policy does not read. slow names
// the study's slow engines (slowName), the same in every point.
func points(g Grid, seeds []uint64, slow string) (pts, canon []point) {
	dims := []int{len(seeds), len(g.Workloads), len(g.Policies), len(g.Endpoints), len(g.Routers), len(g.RateScales),
		len(g.LoadFactors), len(g.MinBounds), len(g.Signals), len(g.Views), len(g.GossipIntervals), len(g.Keys),
		len(g.KVBlocks), len(g.Concurrency), len(g.GossipLoss)}
	for ix := range product(dims) {
		pt := point{g.Workloads[ix[1]], g.Policies[ix[2]], g.Endpoints[ix[3]], g.Routers[ix[4]], g.RateScales[ix[5]],
			g.LoadFactors[ix[6]], g.MinBounds[ix[7]], g.Signals[ix[8]], g.Views[ix[9]], g.GossipIntervals[ix[10]],
			g.Keys[ix[11]], g.KVBlocks[ix[12]], g.Concurrency[ix[13]], g.GossipLoss[ix[14]], seeds[ix[0]], slow}
		pts, canon = append(pts, pt), append(canon, pt.canonical())
	}
	return pts, canon
}

// canonical is pt with the axes its policy does not read zeroed.
func (pt point) canonical() point {
	rd := readsOf(pt.policy)
	if !rd.bound { // the baselines count requests or tokens (see runOne)
		pt.loadFactor, pt.minBound, pt.signal = 0, 0, ""
	}
	if !rd.gossip {
		pt.view, pt.interval, pt.loss = "", 0, 0
	}
	if !rd.key {
		pt.key = ""
	}
	return pt
}

// product yields every index tuple below dims, the last index fastest
// (nested loops in dims' order); none when a dimension is 0. The slice
// is reused between yields.
func product(dims []int) iter.Seq[[]int] {
	return func(yield func([]int) bool) {
		if slices.Contains(dims, 0) {
			return
		}
		ix := make([]int, len(dims))
		for {
			if !yield(ix) {
				return
			}
			k := len(ix) - 1
			for ; k >= 0; k-- {
				if ix[k]++; ix[k] < dims[k] {
					break
				}
				ix[k] = 0
			}
			if k < 0 {
				return
			}
		}
	}
}

// seeds returns the seeds the study runs.
func (c Config) seeds() []uint64 {
	if len(c.Seeds) > 0 {
		return c.Seeds
	}
	return []uint64{c.Seed}
}

// Run runs the study and returns one result per combination of each grid,
// grid after grid, in axis order. A combination that several grids share
// (or that differs only in axes its policy ignores) runs once.
func Run(cfg Config) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var all, canon []point
	var grid []string
	for _, g := range cfg.Grids {
		if cfg.KVBlocks > 0 {
			g.KVBlocks = []int{cfg.KVBlocks}
		}
		p, c := points(g, cfg.seeds(), slowName(cfg.SlowEngines))
		all, canon = append(all, p...), append(canon, c...)
		for range p {
			grid = append(grid, g.Name)
		}
	}
	index := map[point]int{} // canonical point -> its run
	var todo []point
	for i, c := range canon {
		if _, ok := index[c]; !ok {
			index[c] = len(todo)
			todo = append(todo, all[i])
		}
	}
	// The longest runs first (traces, then high loads), so that no worker
	// is left with one at the end; results keep their places.
	order := make([]int, len(todo))
	for i := range order {
		order[i] = i
	}
	cost := func(p point) float64 {
		c := p.rateScale
		if isTrace(p.workload) {
			c += 100
		}
		return c
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(cost(todo[b]), cost(todo[a])) })
	wl := &workloads{cache: map[string][]workload.Session{}, cap: cfg.Requests}
	out := make([]Result, len(todo))
	errs := make([]error, len(todo))
	var mu sync.Mutex
	done := 0
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range cmp.Or(cfg.Workers, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := range jobs {
				out[i], errs[i] = runOne(cfg, todo[i], wl)
				mu.Lock()
				done++
				if cfg.Progress != nil {
					cfg.Progress(done, len(todo))
				}
				mu.Unlock()
			}
		})
	}
	for _, i := range order {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	results := make([]Result, len(all))
	for i, pt := range all {
		results[i] = out[index[canon[i]]]
		label(&results[i], pt)
		results[i].Grid = grid[i]
	}
	return results, nil
}

// label writes the point's axes into its result.
func label(r *Result, pt point) {
	r.Policy, r.Workload, r.Endpoints, r.Routers = pt.policy, pt.workload, pt.endpoints, pt.routers
	r.RateScale, r.LoadFactor, r.MinBound, r.Signal = pt.rateScale, pt.loadFactor, pt.minBound, string(pt.signal)
	r.View, r.GossipIntervalMS, r.Key = string(pt.view), ms(pt.interval), pt.key
	r.KVBlocks, r.Concurrency, r.GossipLoss, r.Seed = pt.kvBlocks, pt.concurrency, pt.loss, pt.seed
	r.SlowEngines = pt.slow
}

// multi spreads requests over R independent instances of a policy in turn,
// as DNS round-robin spreads clients over router replicas. With spills
// set, it counts a spill a CHWBL pick over the true loads (P and K) of all
// instances would not have made (FalseSpills, of Keyed).
type multi struct {
	ps     []policy.Picker
	bals   []*ring.Balancer
	turn   int
	spills bool
	Keyed  int
	False  int
}

func (m *multi) Acquire(req ring.Request) (ring.Lease, error) {
	i := m.turn % len(m.ps)
	m.turn++
	var trueP, trueKV ring.Loads
	if m.spills && req.Keyed {
		trueP, trueKV = replicas.TrueLoads(m.bals)
	}
	l, err := m.ps[i].Acquire(req)
	if err != nil || !m.spills || !req.Keyed {
		return l, err
	}
	m.Keyed++
	if l.Decision != ring.DecisionHome {
		if _, d, err := m.bals[i].DecideKV(req, trueP, trueKV); err == nil && d == ring.DecisionHome {
			m.False++
		}
	}
	return l, nil
}

// rrStart is where router replica i of a run of seed starts its
// round-robin: a place drawn at random, the same for every run of seed.
// Started in step, replicas that take every third request in turn stay
// in step in virtual time, and send each three consecutive requests to
// one engine for the whole run. Real replicas do not: in two real runs
// of the demo (scripts/demo, 3 replicas that each start at the first
// engine) each replica's own requests took the engines in turn, but the
// replicas' places differed from their first burst on, and 0.32 and 0.35
// of consecutive requests went to the same engine, against 0.67 in step
// in virtual time and 0.33 from random places (seed 1). In step, virtual
// round-robin was harsher than real: on the demo's shape TTFT mean / p50
// / p99 106 / 53 / 547 ms, against 71-86 / 36-41 / 320-561 in 30 real
// runs; from random places 92 / 38 / 467 (docs/study.md, "Round-robin's
// replicas in step").
func rrStart(seed uint64, i int) uint64 {
	return rand.New(rand.NewPCG(seed, 0x7272+uint64(i))).Uint64()
}

// replicaSeed is replica i's seed for the policies that draw (random,
// p2c) or break ties in turn (least-load, least-tokens), mixed so that no
// two (seed, replica) pairs share a stream. Until stop 40 it was seed+i
// (seed s's replica 1 drew what seed s+1's replica 0 did), and least-load
// ignored it: its three replicas broke ties in step.
func replicaSeed(seed uint64, i int) uint64 {
	return rand.New(rand.NewPCG(seed, 0x5eed+uint64(i))).Uint64()
}

// scrapedLoads is SignalEngine's view: the engines' requests waiting and
// running as a scraper read them last, every ScrapeInterval.
type scrapedLoads struct {
	byID  map[string]int64
	total int64
	next  time.Duration
}

func (s *scrapedLoads) observe(now time.Duration, engines []fleet.Gauges) {
	if now < s.next {
		return
	}
	s.next = now + ScrapeInterval
	s.total = 0
	for _, g := range engines {
		n := int64(g.Waiting + g.Running)
		s.byID[g.ID] = n
		s.total += n
	}
}

func (s *scrapedLoads) Load(id string) int64 { return s.byID[id] }
func (s *scrapedLoads) Total() int64         { return s.total }

func runOne(cfg Config, pt point, wl *workloads) (Result, error) {
	sessions, err := wl.get(pt.workload, pt.rateScale, pt.seed)
	if err != nil {
		return Result{}, err
	}
	ids := cfg.endpointIDs(pt.endpoints)
	rc := cfg.ring()
	rc.LoadFactor, rc.MinBound, rc.Signal = pt.loadFactor, pt.minBound, pt.signal
	name := pt.policy
	if !readsOf(pt.policy).bound {
		rc.Signal = ring.SignalRequests // the baselines count requests, as their real counterparts do
	}
	if pt.policy == LeastTokens {
		name, rc.Signal = "least-load", ring.SignalTokens
	}
	key, err := newCallKey(pt.key, pt.routers)
	if err != nil {
		return Result{}, err
	}
	key.blocks = policy.ReadsBlocks(pt.policy)
	key.sessions = pt.policy == "session"
	rc.GroupSpread = key.design.spread
	var picker policy.Picker
	var rp *replicas.Picker
	var m *multi
	var scraped *scrapedLoads
	if pt.signal == SignalEngine && readsOf(pt.policy).bound {
		rc.Signal, scraped = ring.SignalRequests, &scrapedLoads{byID: map[string]int64{}, next: 0}
	}
	ec := engine.DefaultConfig()
	if pt.kvBlocks > 0 {
		ec.NumBlocks = pt.kvBlocks
	}
	var kvCap int64 // what the routers read from vllm:cache_config_info
	if !cfg.KVCapacityUnknown {
		kvCap = int64(ec.Blocks() * ec.BlockSize)
	}
	var now time.Duration // the virtual time of the pick, for the follow memory's TTL
	var follows []*policy.Follow
	if (pt.policy == "chwbl" || isFollow(pt.policy)) && scraped == nil {
		rcfg := replicas.Config{Replicas: pt.routers, Endpoints: ids, Ring: rc, Gossip: true, KVCapacity: kvCap,
			Interval: publishInterval(pt.interval, pt.routers), Latency: GossipLatency, Loss: pt.loss, Seed: pt.seed, View: pt.view}
		if isFollow(pt.policy) {
			rcfg.Wrap, err = followWrap(pt.policy == ChwblFollowShared, &now, &follows)
			if err != nil {
				return Result{}, err
			}
		}
		rp, err = replicas.New(rcfg)
		if err != nil {
			return Result{}, err
		}
		picker = rp
	} else {
		m = &multi{spills: pt.policy == "chwbl-local"}
		for i := range pt.routers {
			bal, err := ring.NewBalancer(rc)
			if err != nil {
				return Result{}, err
			}
			eps := make([]ring.Endpoint, len(ids))
			for i, id := range ids {
				eps[i] = ring.Endpoint{ID: id, Healthy: true, KVCapacity: kvCap}
			}
			if err := bal.Update(eps); err != nil {
				return Result{}, err
			}
			if scraped != nil {
				bal.SetLoads(scraped)
			}
			var p policy.Picker
			if name == "round-robin" { // each replica from its own place
				p = policy.NewRoundRobin(bal, rrStart(pt.seed, i))
			} else if p, err = policy.New(name, bal, bal, replicaSeed(pt.seed, i)); err != nil {
				return Result{}, err
			}
			m.ps, m.bals = append(m.ps, p), append(m.bals, bal)
		}
		picker = m
	}
	callKey := key.request
	if rp != nil { // the replicas model learns virtual time from the key function
		callKey = func(c *workload.Call, at time.Duration) ring.Request {
			rp.SetNow(at)
			now = at
			return key.request(c, at)
		}
	}
	fc := fleet.Config{Engines: pt.endpoints, Names: ids, Engine: ec, Slowdown: cfg.SlowEngines, Picker: picker,
		Concurrency: cmp.Or(pt.concurrency, Concurrency(pt.workload))}
	if rp != nil {
		fc.Advance = rp.AdvanceTo
	}
	if scraped != nil {
		fc.Observe = scraped.observe
	}
	res, reqs, err := fleet.RunSessions(fc, sessions, callKey)
	if err != nil {
		return Result{}, err
	}
	ideal := func() Ideal { return IdealOf(reqs, ec) }
	if isTrace(pt.workload) { // single-turn sessions: the same requests whatever the policy
		ideal = func() Ideal { return wl.ideal(pt.workload, pt.rateScale, pt.seed, reqs, ec) }
	}
	r := measure(res, reqs, ec.BlockSize, pt.endpoints, fc.Concurrency > 0, ideal)
	if bounded(pt.policy) {
		f := boundFired(res.Records)
		r.BoundFired = &f
	}
	if hasConversations(sessions) {
		s := sameEngineTurns(res.Records)
		r.SameEngineTurns = &s
	}
	label(&r, pt)
	if key.Keyed > 0 {
		a := 1 - float64(key.Split)/float64(key.Keyed)
		r.KeyAgreement = &a
	}
	if rp != nil {
		a, f := rp.Agreement(), rp.FalseSpillRate()
		r.Agreement, r.FalseSpillRate = &a, &f
	}
	if len(follows) > 0 && rp.Keyed > 0 {
		var n int64
		for _, f := range follows {
			n += f.Followed.Load()
		}
		fr := float64(n) / float64(rp.Keyed)
		r.FollowRate = &fr
	}
	if m != nil && m.Keyed > 0 {
		f := float64(m.False) / float64(m.Keyed)
		r.FalseSpillRate = &f
	}
	if cfg.Records != "" {
		if err := writeRecords(cfg.Records, r, res.Records); err != nil {
			return Result{}, err
		}
	}
	return r, nil
}

// followWrap returns what wraps each replica's balancer in a follow
// policy: each with its own memory, or with shared one memory for all;
// the memories read the virtual time at *now, and *follows collects the
// policies for their counts.
func followWrap(shared bool, now *time.Duration, follows *[]*policy.Follow) (func(int, *ring.Balancer) replicas.Acquirer, error) {
	cfg := policy.DefaultFollowConfig()
	one, err := policy.NewFollowMemory(cfg)
	if err != nil {
		return nil, err
	}
	clock := func() time.Time { return time.Unix(0, 0).Add(*now) }
	return func(_ int, b *ring.Balancer) replicas.Acquirer {
		mem := one
		if !shared {
			mem, _ = policy.NewFollowMemory(cfg) // cfg is valid: one was built from it
		}
		f := policy.NewFollow(b, mem, clock)
		*follows = append(*follows, f)
		return f
	}, nil
}

// boundFired is the share of keyed picks whose home the bound refused
// (every endpoint is healthy in the simulator, so a keyed request not at
// its home left it because it was over its P or K bound).
func boundFired(recs []fleet.Record) float64 {
	keyed, fired := 0, 0
	for _, r := range recs {
		if r.Err != "" || !r.Keyed {
			continue
		}
		keyed++
		if r.Decision != "home" {
			fired++
		}
	}
	if keyed == 0 {
		return 0
	}
	return float64(fired) / float64(keyed)
}

// hasConversations reports sessions of more than one turn.
func hasConversations(ss []workload.Session) bool {
	for _, s := range ss {
		if len(s.Turns) > 1 {
			return true
		}
	}
	return false
}

// sameEngineTurns is the share of the turns of multi-turn sessions that
// went to their session's most used engine.
func sameEngineTurns(recs []fleet.Record) float64 {
	per := map[int]map[string]int{}
	turns := map[int]int{}
	for _, r := range recs {
		if r.Session < 0 || r.Err != "" {
			continue
		}
		if per[r.Session] == nil {
			per[r.Session] = map[string]int{}
		}
		per[r.Session][r.Endpoint]++
		turns[r.Session]++
	}
	var top, all int
	for s, m := range per {
		if turns[s] < 2 {
			continue
		}
		best := 0
		for _, n := range m {
			best = max(best, n)
		}
		top += best
		all += turns[s]
	}
	if all == 0 {
		return 0
	}
	return float64(top) / float64(all)
}

// publishInterval is how often each of routers replicas publishes a changed
// entry when it would every interval: gossip's publish rate spaces the
// publications of a large cluster (gossip.Config.PublishEvery).
func publishInterval(interval time.Duration, routers int) time.Duration {
	c := gossip.DefaultConfig()
	c.Interval = interval
	return interval * time.Duration(c.PublishEvery(routers))
}
