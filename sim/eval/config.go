package eval

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prefixring/prefixring/gossip/core"

	"github.com/prefixring/prefixring/gossip"
	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/fleet"
	"github.com/prefixring/prefixring/sim/workload"
)

// Grid is one sweep: each list is an axis, and every combination runs,
// except that a policy runs once for the values of an axis it does not
// read (the load-only policies ignore c, the floor, the signal, the view,
// the gossip interval and the key), and that one result stands for all of
// them.
type Grid struct {
	// Name says what the grid is for; the report reads its questions'
	// answers from the grids it knows by name (see the Grid* constants).
	Name            string
	Workloads       []string // names of WorkloadNames, or trace:PATH, trace-recorded:PATH
	Policies        []string // names of policy.Names
	Endpoints       []int
	Routers         []int
	RateScales      []float64
	LoadFactors     []float64
	MinBounds       []int64 // the bound's floor, in the signal's unit
	Signals         []ring.Signal
	Views           []core.ViewMode
	GossipIntervals []time.Duration
	Keys            []string // names of KeyDesigns
	// KVBlocks are the fleets: KV cache blocks (16 tokens) per engine, 0
	// for the H100 profile's capacity (about 431k tokens an engine).
	KVBlocks []int
	// Concurrency plays a workload's sessions closed loop, that many at a
	// time (0: the workload's own: open loop at its rate, or the demo's 48).
	Concurrency []int
	// GossipLoss is the probability that one gossip publication, every
	// copy of it, is lost on its way to one other replica
	// (replicas.Config.Loss).
	GossipLoss []float64
}

// The grids of the default study.
const (
	GridPolicies  = "policies"  // every policy, every workload and load, 3 routers
	GridReplicas  = "replicas"  // the per-replica policies at 1 and 8 routers
	GridBound     = "bound"     // c and the floor
	GridSignal    = "signal"    // the load signal, and prefixring before the study
	GridStaleness = "staleness" // gossip view and interval
	GridKeys      = "keys"      // the key designs
	GridDemo      = "demo"      // `make demo`'s shape: 4 engines, closed loop
	GridClosed    = "closed"    // closed-loop conversations and agent loops (--concurrency)
	GridRecorded  = "recorded"  // the trace at its timestamps as written, beside its ticks spread (goal 4)
	GridCustom    = "custom"    // a grid from command-line axes
)

// Config is a study: grids, and what every grid shares.
type Config struct {
	Grids []Grid
	// Seeds: every point runs once per seed (workloads and policies'
	// randomness, gossip loss, the text kinds' token ratios); Seed alone
	// when Seeds is empty.
	Seeds []uint64
	Seed  uint64
	// Requests caps each workload's requests (0: the workload's own; a
	// trace is cut to its first Requests lines).
	Requests int
	// KVBlocks, when above 0, replaces every grid's KVBlocks axis.
	KVBlocks int
	// KVCapacityUnknown hides the engines' KV capacity from the routers,
	// so K is bounded by c·average (ring.Endpoint.KVCapacity); by default
	// they know it, as a router that reads vllm:cache_config_info does.
	KVCapacityUnknown bool
	// KVAverage and KVMinBound are serve's --kv-average and
	// --kv-min-bound: with them K is bounded by c·average on engines whose
	// capacity the routers do not know (ring.Config.KVAverage).
	KVAverage  bool
	KVMinBound int64
	// KVCapacityFactor is serve's --kv-capacity-factor: K's bound on an
	// engine of known capacity, in capacities (0: the default;
	// ring.Config.KVCapacityFactor).
	KVCapacityFactor float64
	// KVLoadFactor is serve's --kv-load-factor (0: the default;
	// ring.Config.KVLoadFactor).
	KVLoadFactor float64
	// PaceThreshold is serve's --pace-threshold (0: the default; below 0:
	// off; ring.PaceConfig.Threshold).
	PaceThreshold float64
	// GroupMemory is serve's --group-memory (0: the default,
	// ring.DefaultGroupMemory; below 0: no cap, serve's 0).
	GroupMemory float64
	// EndpointNames, when set, names the engines of every run (every
	// grid's endpoint count must be its length): the IDs the routers hash,
	// so a real fleet's (serve's canonical URLs) replays where that fleet's
	// routers place keys. Nil: engine-0, engine-1, ...
	EndpointNames []string
	// Records, when set, is a folder where every run writes its
	// per-request records (sim/fleet.Record: engine, decision, arrival,
	// TTFT, cached and computed tokens, session and turn), one JSON object
	// a line, to a file named by the run's point less the axes its policy
	// does not read.
	Records string
	// SlowEngines, by engine index, makes those engines of every run that
	// many times slower (fleet.Config.Slowdown).
	SlowEngines map[int]float64
	// Workers runs that many simulations at once (0: GOMAXPROCS).
	Workers int
	// Progress, when set, is called after each run with done and total.
	Progress func(done, total int)
}

// The fleets and the gossip network of the study.
const (
	// SmallKVBlocks is the small-KV fleet's cache per engine (24k tokens),
	// where K binds below overload; the other fleet is the H100 profile's.
	SmallKVBlocks = 1500
	// GossipLatency is a publication's delay to the other replicas.
	GossipLatency = 5 * time.Millisecond
	// DefaultGossipLoss is the share of publications lost on the way to
	// each other replica; the staleness grid adds LossyGossip.
	DefaultGossipLoss = 0.01
	LossyGossip       = 0.2
)

// DefaultSeeds are the seeds the default study reports. prefixring's
// defaults (c, the floors, the signal, the view, the key) were chosen on
// seeds 1 to 5 (the earlier studies ran seed 1, the demo measurements
// seeds 1 to 5); the report runs on others.
var DefaultSeeds = []uint64{11, 12, 13}

// DefaultTraces is where the default study looks for the Mooncake traces
// (relative to the working directory: the repository root sits beside
// shared/ in the development layout).
const DefaultTraces = "../shared/traces/mooncake"

// defaults are prefixring's own settings, the grids' fixed values.
func defaults() Grid {
	rc, gc := ring.DefaultConfig(), gossip.DefaultConfig()
	return Grid{Endpoints: []int{8}, Routers: []int{3}, RateScales: []float64{1},
		LoadFactors: []float64{rc.LoadFactor}, MinBounds: []int64{rc.MinBound}, Signals: []ring.Signal{rc.Signal},
		Views: []core.ViewMode{gc.View}, GossipIntervals: []time.Duration{gc.Interval}, Keys: []string{DefaultKey},
		KVBlocks: []int{0}, Concurrency: []int{0}, GossipLoss: []float64{DefaultGossipLoss}}
}

// CustomGrid is one grid at prefixring's defaults over the built-in
// workloads and every policy, for the command line to change axis by axis.
func CustomGrid() Grid {
	g := defaults()
	g.Name, g.Workloads, g.Policies = GridCustom, slices.Clone(WorkloadNames), slices.Clone(Policies)
	g.RateScales = []float64{0.25, 1, 2, 4}
	return g
}

// DefaultPolicies are the policies of the default study's grids: every
// policy but random (round-robin's twin), session and dualmap (chash's
// twins on these workloads); --full runs every one.
var DefaultPolicies = []string{"round-robin", "least-load", LeastTokens, "p2c", "prefix-key", "chash", "radix", "score", "chwbl-local", "chwbl"}

// DefaultRequests caps each point's requests in the default study (the
// sessions keep their rate, so the load is the rate's, over a shorter run).
const DefaultRequests = 1500

// DefaultConfig is the default study, every grid on both fleets (the H100
// profile's KV and SmallKVBlocks) and DefaultSeeds, DefaultRequests a
// point: DefaultPolicies on the built-in workloads at ×0.25, ×1 and ×2
// and on Mooncake's conversation and synthetic traces (when traces holds
// them) at ×1 and ×2, the conversation trace also as recorded
// (GridRecorded), at 3 router replicas; the demo's shape (4 engines, 48
// conversations at a time); multi-turn and agentic closed loop (64
// sessions at a time); prefixring's c and floor at ×2; the gossip
// interval and a lossy network at ×2. full adds every policy, ×4, 1 and 8
// replicas, the load signals, the key designs and wider sweeps, with
// every workload's own requests.
func DefaultConfig(traces string, full bool) Config {
	wls := slices.Clone(WorkloadNames)
	// Mooncake's traces, where traces holds them: the conversation trace,
	// stamped on a 3-second grid, is replayed both with its ticks spread
	// and as recorded; the synthetic one, stamped to the millisecond, with
	// its ticks spread too, which moves the 11 pairs that share one.
	var traceWls []string
	conversation := filepath.Join(traces, "conversation_trace.jsonl")
	hasConversation := fileExists(conversation)
	if hasConversation {
		traceWls = append(traceWls, workload.TracePrefix+conversation)
	}
	if synthetic := filepath.Join(traces, "synthetic_trace.jsonl"); fileExists(synthetic) {
		traceWls = append(traceWls, workload.TracePrefix+synthetic)
	}
	pols := slices.Clone(DefaultPolicies)
	rates := []float64{0.25, 1, 2}
	if full {
		pols, rates = slices.DeleteFunc(slices.Clone(Policies), isFollow), append(rates, 4)
	}
	mk := func(name string, f func(*Grid)) Grid {
		g := defaults()
		g.Name, g.Workloads, g.Policies = name, slices.Clone(wls), []string{"chwbl"}
		g.KVBlocks = []int{0, SmallKVBlocks}
		f(&g)
		return g
	}
	var grids []Grid
	grids = append(grids, mk(GridPolicies, func(g *Grid) {
		g.Policies, g.RateScales = pols, rates
		if full {
			g.Routers = []int{1, 3, 8}
		}
	}))
	if len(traceWls) > 0 {
		// A trace's ×1 is the load it was recorded at; from ×2 on its
		// queues grow.
		grids = append(grids, mk(GridPolicies, func(g *Grid) {
			g.Workloads, g.Policies, g.RateScales = traceWls, pols, []float64{1, 2}
		}))
	}
	if hasConversation {
		grids = append(grids, mk(GridRecorded, func(g *Grid) {
			g.Workloads, g.Policies, g.RateScales = []string{workload.RecordedTracePrefix + conversation}, []string{"round-robin", "chwbl-local", "chwbl"}, []float64{1, 2}
		}))
	}
	grids = append(grids,
		mk(GridDemo, func(g *Grid) {
			g.Workloads, g.Policies, g.Endpoints, g.KVBlocks = []string{"demo"}, pols, []int{4}, []int{DemoKVBlocks, 0}
		}),
		mk(GridClosed, func(g *Grid) {
			g.Workloads, g.Policies, g.Concurrency = []string{"multi-turn", "agentic"}, pols, []int{64}
			if full {
				g.Concurrency = []int{16, 64, 256}
			}
		}),
		// The bound, near capacity (where it decides).
		mk(GridBound, func(g *Grid) {
			g.Policies, g.RateScales, g.LoadFactors = []string{"chwbl", "chwbl-local"}, []float64{2}, []float64{1.1, 1.25, 2}
		}),
		mk(GridBound, func(g *Grid) {
			g.RateScales, g.MinBounds = []float64{2}, []int64{0, 65536}
		}),
		// Staleness: the interval, and a lossy network.
		mk(GridStaleness, func(g *Grid) {
			g.Workloads = []string{"shared-prefix", "multi-turn"}
			g.RateScales, g.GossipLoss = []float64{2}, []float64{DefaultGossipLoss, LossyGossip}
			g.GossipIntervals = []time.Duration{gossip.DefaultConfig().Interval, 100 * time.Millisecond, time.Second}
			if full {
				g.Workloads, g.Views = slices.Clone(wls), []core.ViewMode{core.ViewOverlay, core.ViewShared}
			}
		}))
	if full {
		grids = append(grids,
			mk(GridReplicas, func(g *Grid) {
				g.Policies, g.Routers = []string{"chwbl", "chwbl-local", "radix", "score"}, []int{1, 8}
			}),
			mk(GridSignal, func(g *Grid) {
				g.RateScales, g.Signals, g.MinBounds = rates, []ring.Signal{ring.SignalRequests, SignalEngine}, []int64{ring.DefaultMinRequests}
			}),
			mk(GridKeys, func(g *Grid) { g.Keys, g.RateScales = slices.Clone(KeyDesigns), []float64{1, 2} }))
	}
	cfg := Config{Grids: grids, Seeds: slices.Clone(DefaultSeeds), Requests: DefaultRequests}
	if full {
		cfg.Requests = 0
	}
	return cfg
}

// Validate reports a study that cannot run.
func (c Config) Validate() error {
	if len(c.Grids) == 0 {
		return errors.New("eval: no grid")
	}
	for _, g := range c.Grids {
		if err := g.Validate(); err != nil {
			return fmt.Errorf("%w (grid %s)", err, g.Name)
		}
	}
	if c.KVBlocks > 0 && c.KVBlocks < 64 {
		return errors.New("eval: KV blocks must be 0 (the profile's) or at least 64")
	}
	if c.Requests < 0 || c.KVBlocks < 0 {
		return errors.New("eval: requests and KV blocks must be >= 0")
	}
	if err := c.ring().Validate(); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if c.KVMinBound > 0 && !c.KVAverage {
		return errors.New("eval: a KV min bound bounds nothing without KVAverage")
	}
	for _, i := range slices.Sorted(maps.Keys(c.SlowEngines)) {
		if x := c.SlowEngines[i]; i < 0 || !slowFactorOK(x) {
			return fmt.Errorf("eval: slow engine %d: factor %v (engines from 0, factors finite and at least 1)", i, x)
		}
		for _, g := range c.Grids {
			if n := slices.Min(g.Endpoints); i >= n {
				return fmt.Errorf("eval: slow engine %d is outside grid %s's fleet of %d engines (0 to %d)", i, g.Name, n, n-1)
			}
		}
	}
	if c.EndpointNames != nil {
		for _, g := range c.Grids {
			if slices.ContainsFunc(g.Endpoints, func(n int) bool { return n != len(c.EndpointNames) }) {
				return fmt.Errorf("eval: %d endpoint names, but grid %s runs %v endpoints", len(c.EndpointNames), g.Name, g.Endpoints)
			}
		}
		if err := fleet.CheckNames(c.EndpointNames); err != nil {
			return fmt.Errorf("eval: endpoint names: %w", err)
		}
	}
	return nil
}

// endpointIDs names the engines of a run on n of them, as the fleet will.
func (c Config) endpointIDs(n int) []string {
	return fleet.Config{Engines: n, Names: c.EndpointNames}.IDs()
}

// ring is prefixring's ring configuration with the study's KV settings;
// each point sets its own bound.
func (c Config) ring() ring.Config {
	rc := ring.DefaultConfig()
	rc.KVAverage, rc.KVMinBound, rc.KVCapacityFactor, rc.KVLoadFactor = c.KVAverage, c.KVMinBound, c.KVCapacityFactor, c.KVLoadFactor
	if c.GroupMemory != 0 {
		rc.GroupMemory = max(c.GroupMemory, 0)
	}
	if c.PaceThreshold != 0 {
		rc.Pace = rc.Pace.WithThreshold(max(c.PaceThreshold, 0))
	}
	return rc
}

// Validate reports a grid that cannot run.
func (g Grid) Validate() error {
	if len(g.Workloads) == 0 || len(g.Policies) == 0 || len(g.Endpoints) == 0 || len(g.Routers) == 0 ||
		len(g.RateScales) == 0 || len(g.LoadFactors) == 0 || len(g.MinBounds) == 0 || len(g.Signals) == 0 ||
		len(g.Views) == 0 || len(g.GossipIntervals) == 0 || len(g.Keys) == 0 || len(g.KVBlocks) == 0 ||
		len(g.Concurrency) == 0 || len(g.GossipLoss) == 0 {
		return errors.New("eval: every axis needs at least one value")
	}
	for _, p := range g.Policies {
		if !slices.Contains(Policies, p) {
			return fmt.Errorf("eval: unknown policy %q (known: %s)", p, strings.Join(Policies, ", "))
		}
	}
	for _, k := range g.KVBlocks {
		if k < 0 || (k > 0 && k < 64) {
			return fmt.Errorf("eval: %d KV blocks (0: the profile's, or at least 64)", k)
		}
	}
	for _, c := range g.Concurrency {
		if c < 0 {
			return fmt.Errorf("eval: concurrency %d", c)
		}
	}
	for _, l := range g.GossipLoss {
		if !(l >= 0 && l <= 1) {
			return fmt.Errorf("eval: gossip loss %v must be in [0, 1]", l)
		}
	}
	for _, w := range g.Workloads {
		if !knownWorkload(w) && !isTrace(w) {
			return fmt.Errorf("eval: unknown workload %q (known: %s, %s, trace:PATH, trace-recorded:PATH)", w, strings.Join(WorkloadNames, ", "), strings.Join(ClosedLoopNames, ", "))
		}
	}
	for _, k := range g.Keys {
		if _, err := KeyDesign(k); err != nil {
			return err
		}
	}
	for _, n := range g.Endpoints {
		if n < 1 {
			return fmt.Errorf("eval: %d endpoints", n)
		}
	}
	for _, r := range g.Routers {
		if r < 1 {
			return fmt.Errorf("eval: %d routers", r)
		}
	}
	for _, s := range g.RateScales {
		if !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("eval: rate scale %v", s)
		}
	}
	for _, f := range g.LoadFactors {
		if !(f >= 1) || math.IsInf(f, 0) {
			return fmt.Errorf("eval: load factor %v must be >= 1", f)
		}
	}
	for _, m := range g.MinBounds {
		if m < 0 {
			return fmt.Errorf("eval: min bound %d must be >= 0", m)
		}
	}
	for _, s := range g.Signals {
		if s == "" {
			return errors.New("eval: an empty load signal")
		}
		if _, err := ParseSignal(string(s)); err != nil {
			return err
		}
	}
	for _, v := range g.Views {
		if _, err := core.ParseViewMode(string(v)); err != nil || v == "" {
			return fmt.Errorf("eval: gossip view %q (known: %q)", v, core.ViewModes)
		}
	}
	for _, i := range g.GossipIntervals {
		if i <= 0 {
			return fmt.Errorf("eval: gossip interval %v", i)
		}
	}
	return nil
}

// SignalEngine is a load signal the study tries and prefixring does not
// ship: each endpoint's load is what its engine reports, requests waiting
// plus running (vLLM's vllm:num_requests_waiting and
// vllm:num_requests_running), scraped every ScrapeInterval by every
// replica alike; nothing is gossiped.
const SignalEngine ring.Signal = "engine"

// ScrapeInterval is how often SignalEngine's scraper reads the engines.
const ScrapeInterval = 250 * time.Millisecond

// Signals are the load signals the study knows.
var Signals = append(slices.Clone(ring.Signals), SignalEngine)

// ParseSignal checks a load signal of the study's.
func ParseSignal(s string) (ring.Signal, error) {
	if ring.Signal(s) == SignalEngine {
		return SignalEngine, nil
	}
	sig, err := ring.ParseSignal(s)
	if err != nil {
		return "", fmt.Errorf("eval: load signal %q (known: %q)", s, Signals)
	}
	return sig, nil
}

// LeastTokens is the study's token-based least-load baseline: least-load
// over the prompt tokens each endpoint has not yet answered (ring's
// SignalTokens, P: a streamed request's until its first token, one not
// streamed until its answer), where least-load counts requests in flight.
const LeastTokens = "least-tokens"

// The study's follow variants of chwbl (docs/study.md, "Conversations
// that spill"): a keyed turn tries first where its key's last turn went
// when that was not its home (policy.Follow). chwbl-follow remembers per
// router replica, as serve would; chwbl-follow-shared gives all replicas
// one memory, the upper bound of sharing it. Measured only on request
// (--policies); the --full study leaves them out.
const (
	ChwblFollow       = "chwbl-follow"
	ChwblFollowShared = "chwbl-follow-shared"
)

func isFollow(p string) bool { return p == ChwblFollow || p == ChwblFollowShared }

// Policies are the policies the study knows: policy.Names, LeastTokens
// and the follow variants.
var Policies = append(slices.Clone(policy.Names), LeastTokens, ChwblFollow, ChwblFollowShared)

// reads says which axes a policy's decisions depend on, beyond the
// workload, the fleet, the routers and the load: a policy runs once for the
// values of the others.
type reads struct{ bound, gossip, key bool }

// bounded reports a policy whose bound can fire (chwbl, chwbl-local).
func bounded(policy string) bool { return readsOf(policy).bound }

func readsOf(policy string) reads {
	switch policy {
	case "chwbl", ChwblFollow, ChwblFollowShared:
		return reads{bound: true, gossip: true, key: true}
	case "chwbl-local":
		return reads{bound: true, key: true}
	case "chash", "dualmap", "prefix-key":
		return reads{key: true}
	}
	return reads{}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// slowFactorOK reports whether x is a slow engine's factor: finite, at
// least 1 (engine.Config.Slowdown, which also takes 0 for none).
func slowFactorOK(x float64) bool { return x >= 1 && !math.IsInf(x, 0) }

// ParseSlowEngines reads slow engines as --slow-engines gives them: a
// comma list of engine:factor, the engine by index from 0, the factor at
// least 1 ("0:10,3:4": engine 0 ten times slower, engine 3 four times).
func ParseSlowEngines(s string) (map[int]float64, error) {
	out := map[int]float64{}
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		is, fs, ok := strings.Cut(f, ":")
		i, ierr := strconv.Atoi(is)
		x, xerr := strconv.ParseFloat(fs, 64)
		switch {
		case !ok || ierr != nil || xerr != nil:
			return nil, fmt.Errorf("eval: slow engine %q is not engine:factor (0:10)", f)
		case i < 0:
			return nil, fmt.Errorf("eval: slow engine %d: engines are numbered from 0", i)
		case !slowFactorOK(x):
			return nil, fmt.Errorf("eval: slow engine %d: factor %v must be finite and at least 1", i, x)
		}
		if _, dup := out[i]; dup {
			return nil, fmt.Errorf("eval: slow engine %d given twice", i)
		}
		out[i] = x
	}
	return out, nil
}

// slowName writes slow engines as ParseSlowEngines reads them, in engine
// order: the label of a run with them ("" for none).
func slowName(m map[int]float64) string {
	var parts []string
	for _, i := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d:%g", i, m[i]))
	}
	return strings.Join(parts, ",")
}
