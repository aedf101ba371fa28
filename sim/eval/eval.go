// Package eval runs the routing study in the fleet simulator: every
// combination of workload, policy, engines, router replicas, rate scale,
// load factor and gossip interval, each a deterministic virtual-time run
// of the production balancer, policies and gossip view over simulated vLLM
// engines. Report writes results.json, report.md and index.html.
package eval

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/fleet"
	"github.com/prefixring/prefixring/sim/replicas"
	"github.com/prefixring/prefixring/sim/workload"
)

// Config is a sweep: each list is one axis; every combination runs.
type Config struct {
	Workloads       []string // shared-prefix or trace:PATH
	Policies        []string // names of policy.Names
	Endpoints       []int
	Routers         []int
	RateScales      []float64
	LoadFactors     []float64
	GossipIntervals []time.Duration
	Seed            uint64
	// Requests caps each workload's length (0: the workload's own).
	Requests int
	// KVBlocks per engine (0: the profile's capacity).
	KVBlocks int
	// KeyTokens is how many leading prompt tokens the affinity key reads
	// (the production key's 4096 characters are about 1024 tokens).
	KeyTokens int
	// Workers runs that many simulations at once (0: GOMAXPROCS).
	Workers int
	// Progress, when set, is called after each run with done and total.
	Progress func(done, total int)
}

// DefaultConfig is the small study `prefixring eval` runs by default.
func DefaultConfig() Config {
	return Config{
		Workloads: []string{"shared-prefix"}, Policies: slices.Clone(policy.Names),
		Endpoints: []int{8}, Routers: []int{1, 3, 8}, RateScales: []float64{1, 4, 8},
		LoadFactors: []float64{ring.DefaultConfig().LoadFactor, 2}, GossipIntervals: []time.Duration{100 * time.Millisecond},
		Seed: 1, Requests: 3000, KVBlocks: 6000, KeyTokens: 1024,
	}
}

// Validate reports a sweep that cannot run.
func (c Config) Validate() error {
	if len(c.Workloads) == 0 || len(c.Policies) == 0 || len(c.Endpoints) == 0 || len(c.Routers) == 0 ||
		len(c.RateScales) == 0 || len(c.LoadFactors) == 0 || len(c.GossipIntervals) == 0 {
		return errors.New("eval: every axis needs at least one value")
	}
	for _, p := range c.Policies {
		if !slices.Contains(policy.Names, p) {
			return fmt.Errorf("eval: unknown policy %q (known: %s)", p, strings.Join(policy.Names, ", "))
		}
	}
	for _, w := range c.Workloads {
		if !slices.Contains(workload.Names, w) && !strings.HasPrefix(w, "trace:") {
			return fmt.Errorf("eval: unknown workload %q (known: %s, trace:PATH)", w, strings.Join(workload.Names, ", "))
		}
	}
	for _, n := range c.Endpoints {
		if n < 1 {
			return fmt.Errorf("eval: %d endpoints", n)
		}
	}
	for _, r := range c.Routers {
		if r < 1 {
			return fmt.Errorf("eval: %d routers", r)
		}
	}
	for _, s := range c.RateScales {
		if !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("eval: rate scale %v", s)
		}
	}
	for _, f := range c.LoadFactors {
		if !(f >= 1) {
			return fmt.Errorf("eval: load factor %v must be >= 1", f)
		}
	}
	for _, g := range c.GossipIntervals {
		if g <= 0 {
			return fmt.Errorf("eval: gossip interval %v", g)
		}
	}
	if c.KeyTokens < 1 {
		return errors.New("eval: key tokens must be >= 1")
	}
	return nil
}

// Result is one run; JSON names are the study's interface.
type Result struct {
	Policy           string  `json:"policy"`
	Workload         string  `json:"workload"`
	Endpoints        int     `json:"endpoints"`
	Routers          int     `json:"routers"`
	RateScale        float64 `json:"rate_scale"`
	LoadFactor       float64 `json:"load_factor"`
	GossipIntervalMS float64 `json:"gossip_interval_ms"`
	Requests         int     `json:"requests"`
	Errors           int     `json:"errors"`
	HitRate          float64 `json:"hit_rate"`
	IdealHitRate     float64 `json:"ideal_hit_rate"`
	TTFTMeanMS       float64 `json:"ttft_mean_ms"`
	TTFTP50MS        float64 `json:"ttft_p50_ms"`
	TTFTP95MS        float64 `json:"ttft_p95_ms"`
	TTFTP99MS        float64 `json:"ttft_p99_ms"`
	E2EP50MS         float64 `json:"e2e_p50_ms"`
	E2EP99MS         float64 `json:"e2e_p99_ms"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	PrefillTokens    int64   `json:"prefill_tokens"`
	QueueDepthMean   float64 `json:"queue_depth_mean"`
	QueueDepthMax    int     `json:"queue_depth_max"`
	Imbalance        float64 `json:"imbalance"`
	SpillRate        float64 `json:"spill_rate"`
	// Agreement is the share of keyed requests every router replica would
	// have sent to the same endpoint (chwbl and chwbl-local runs, which
	// the replicas model measures; null for the others).
	Agreement *float64 `json:"agreement"`
	// SameEngineTurns is the share of conversations' turns that went to
	// their conversation's most used engine (null for workloads without
	// conversations).
	SameEngineTurns *float64 `json:"same_engine_turns"`
	// TTFTsMS are the sorted TTFTs, for the CDF chart; not in results.json.
	TTFTsMS []float64 `json:"-"`
}

// point is one combination of the axes.
type point struct {
	workload, policy string
	endpoints        int
	routers          int
	rateScale        float64
	loadFactor       float64
	interval         time.Duration
}

// Run runs the sweep and returns one result per combination, in axis order.
func Run(cfg Config) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var pts []point
	for _, w := range cfg.Workloads {
		for _, p := range cfg.Policies {
			for _, e := range cfg.Endpoints {
				for _, r := range cfg.Routers {
					for _, s := range cfg.RateScales {
						for _, f := range cfg.LoadFactors {
							for _, g := range cfg.GossipIntervals {
								pts = append(pts, point{w, p, e, r, s, f, g})
							}
						}
					}
				}
			}
		}
	}
	wl := &workloads{cache: map[string][]workload.Request{}}
	out := make([]Result, len(pts))
	errs := make([]error, len(pts))
	workers := cmp.Or(cfg.Workers, runtime.GOMAXPROCS(0))
	var mu sync.Mutex
	done := 0
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				out[i], errs[i] = runOne(cfg, pts[i], wl)
				mu.Lock()
				done++
				if cfg.Progress != nil {
					cfg.Progress(done, len(pts))
				}
				mu.Unlock()
			}
		})
	}
	for i := range pts {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return out, errors.Join(errs...)
}

// workloads loads each workload once (traces are large) and scales it.
type workloads struct {
	mu    sync.Mutex
	cache map[string][]workload.Request
}

func (w *workloads) get(cfg Config, name string, rateScale float64) ([]workload.Request, error) {
	w.mu.Lock()
	base, ok := w.cache[name]
	w.mu.Unlock()
	if !ok {
		var err error
		if base, err = loadWorkload(cfg, name); err != nil {
			return nil, err
		}
		w.mu.Lock()
		w.cache[name] = base
		w.mu.Unlock()
	}
	out := slices.Clone(base)
	for i := range out {
		out[i].Arrival = time.Duration(float64(out[i].Arrival) / rateScale)
	}
	return out, nil
}

// loadWorkload returns a workload's requests at rate scale 1: shared-prefix
// is SGLang's benchmark shape (64 groups of 2048-token system prompts, 128
// own tokens, 256 out) with a Zipf(1) skew over groups, at 24 requests/s.
func loadWorkload(cfg Config, name string) ([]workload.Request, error) {
	if path, ok := strings.CutPrefix(name, "trace:"); ok {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		defer f.Close()
		reqs, err := workload.LoadMooncake(f)
		if err != nil {
			return nil, fmt.Errorf("eval: %s: %w", path, err)
		}
		if cfg.Requests > 0 && len(reqs) > cfg.Requests {
			reqs = reqs[:cfg.Requests]
		}
		return reqs, nil
	}
	w := workload.SharedPrefixTokens{Groups: 64, Skew: 1, SystemTokens: 2048, UserTokens: 128, OutputTokens: 256,
		Rate: 24, Requests: cmp.Or(cfg.Requests, 4000), Seed: cfg.Seed}
	reqs, _, err := w.Generate()
	return reqs, err
}

// multi spreads requests over R independent instances of a policy in turn,
// as DNS round-robin spreads clients over router replicas.
type multi struct {
	ps   []policy.Picker
	turn int
}

func (m *multi) Acquire(req ring.Request) (ring.Lease, error) {
	p := m.ps[m.turn%len(m.ps)]
	m.turn++
	return p.Acquire(req)
}

// sessionWorkload reports a closed-loop workload: conversations or agent
// loops, played turn by turn.
func sessionWorkload(name string) bool {
	return name != "shared-prefix" && !strings.HasPrefix(name, "trace:")
}

func runOne(cfg Config, pt point, wl *workloads) (Result, error) {
	var reqs []workload.Request
	var sessions []workload.Session
	var err error
	if sessionWorkload(pt.workload) {
		if sessions, err = workload.Named(pt.workload, cfg.Seed, pt.rateScale); err != nil {
			return Result{}, err
		}
	} else if reqs, err = wl.get(cfg, pt.workload, pt.rateScale); err != nil {
		return Result{}, err
	}
	ids := fleet.EndpointIDs(pt.endpoints)
	rc := ring.DefaultConfig()
	rc.LoadFactor = pt.loadFactor
	key := workload.PrefixKey(cfg.KeyTokens)
	callKey, err := productionKey()
	if err != nil {
		return Result{}, err
	}
	var picker policy.Picker
	var rp *replicas.Picker
	switch pt.policy {
	case "chwbl":
		rp, err = replicas.New(replicas.Config{Replicas: pt.routers, Endpoints: ids, Ring: rc, Gossip: true,
			Interval: pt.interval, Latency: 500 * time.Microsecond})
		if err != nil {
			return Result{}, err
		}
		picker, key = rp, rp.Key(key)
		// The replicas model learns virtual time from the key function.
		inner := callKey
		callKey = func(c *workload.Call, at time.Duration) (uint64, bool) {
			rp.SetNow(at)
			return inner(c, at)
		}
	default:
		m := &multi{}
		for i := range pt.routers {
			bal, err := ring.NewBalancer(rc)
			if err != nil {
				return Result{}, err
			}
			if err := bal.SetEndpoints(ids); err != nil {
				return Result{}, err
			}
			p, err := policy.New(pt.policy, bal, bal, cfg.Seed+uint64(i))
			if err != nil {
				return Result{}, err
			}
			m.ps = append(m.ps, p)
		}
		picker = m
	}
	ec := engine.DefaultConfig()
	if cfg.KVBlocks > 0 {
		ec.NumBlocks = cfg.KVBlocks
	}
	fc := fleet.Config{Engines: pt.endpoints, Engine: ec, Picker: picker, Key: key}
	var res *fleet.Result
	if sessions != nil {
		res, reqs, err = fleet.RunSessions(fc, sessions, callKey)
	} else {
		res, err = fleet.Run(fc, reqs)
	}
	if err != nil {
		return Result{}, err
	}
	r := measure(res, reqs, ec.BlockSize, pt.endpoints)
	if sessions != nil {
		s := sameEngineTurns(res.Records)
		r.SameEngineTurns = &s
	}
	r.Policy, r.Workload, r.Endpoints, r.Routers = pt.policy, pt.workload, pt.endpoints, pt.routers
	r.RateScale, r.LoadFactor, r.GossipIntervalMS = pt.rateScale, pt.loadFactor, float64(pt.interval)/float64(time.Millisecond)
	if rp != nil {
		a := rp.Agreement()
		r.Agreement = &a
	}
	return r, nil
}

// productionKey keys a rendered request with the router's own keyer
// (prefix.Keyer, default configuration) on the JSON body a client sends.
func productionKey() (fleet.CallKey, error) {
	k, err := prefix.New(prefix.DefaultConfig())
	if err != nil {
		return nil, err
	}
	return func(c *workload.Call, _ time.Duration) (uint64, bool) {
		body, err := c.Body("meta-llama/Llama-3.1-8B-Instruct", false)
		if err != nil {
			return 0, false
		}
		route := prefix.RouteChat
		if c.API == workload.Completions {
			route = prefix.RouteCompletions
		}
		key, ok, err := k.Key(route, body)
		return key, ok && err == nil
	}, nil
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
