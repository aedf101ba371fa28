package proc

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prefixring/prefixring/chaos"
)

// Row is one scenario's measured values and the invariants it broke.
type Row struct {
	Scenario string         `json:"scenario"`
	Tally    chaos.Tally    `json:"tally"`
	Figures  map[string]any `json:"figures"`
	Problems []string       `json:"problems,omitempty"`
	Skipped  string         `json:"skipped,omitempty"`
}

// Failed reports a broken invariant.
func (r Row) Failed() bool { return len(r.Problems) > 0 }

type scenario struct {
	name  string
	netns bool // needs namespaces and tc
	run   func(ctx context.Context, c *Cluster, r *Row) error
	// setup adjusts the cluster's configuration for this scenario (nil:
	// the command's).
	setup func(*Config)
}

var scenarios = []scenario{
	{"replica-kill", false, func(ctx context.Context, c *Cluster, r *Row) error { return churn(ctx, c, r, syscall.SIGKILL) }, nil},
	{"replica-term", false, func(ctx context.Context, c *Cluster, r *Row) error { return churn(ctx, c, r, syscall.SIGTERM) }, nil},
	{"engine-death", false, engineDeath, nil},
	{"flapping-engine", false, flapping, nil},
	{"slow-engine", false, slowEngine, nil},
	{"failing-engine", false, failingEngine, nil},
	{"partition", true, partition, requestsSignal},
	{"lossy-gossip", true, lossy(false), lossySetup("shared")},
	{"lossy-gossip-aligned", true, lossy(true), lossySetup("aligned")},
	{"endpoint-skew", false, skew, requestsSignal},
	{"rolling-update", false, rolling, rollingSetup},
	{"poison-prompt", false, poisonPrompt, nil},
	{"keyless-stranger", false, keyless, func(cfg *Config) { cfg.Engines, cfg.Initial = 5, 4 }},
	{"workers-churn", false, workersChurn, func(cfg *Config) { cfg.Engines, cfg.Initial = 7, 4 }},
	{"black-hole", true, blackHole, func(cfg *Config) { cfg.Engines, cfg.Initial = 7, 4 }},
}

// Names lists the scenarios in the order they run.
func Names() []string {
	var out []string
	for _, s := range scenarios {
		out = append(out, s.name)
	}
	return out
}

var probeKeys = chaos.ProbeKeys(200)

// Run runs the named scenarios (all when empty), each on a fresh cluster.
func Run(ctx context.Context, cfg Config, names []string, progress func(string)) ([]Row, error) {
	for _, n := range names {
		if !slices.Contains(Names(), n) {
			return nil, fmt.Errorf("chaos: unknown scenario %q (known: %s)", n, strings.Join(Names(), ", "))
		}
	}
	var rows []Row
	for _, s := range scenarios {
		if len(names) > 0 && !slices.Contains(names, s.name) {
			continue
		}
		row := Row{Scenario: s.name, Figures: map[string]any{}}
		if s.netns && !cfg.Netns {
			row.Skipped = "needs network namespaces (run as root with iproute2)"
			rows = append(rows, row)
			continue
		}
		if progress != nil {
			progress(s.name)
		}
		sc := cfg
		if s.setup != nil {
			s.setup(&sc)
		}
		c, err := Start(sc)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", s.name, err)
		}
		err = s.run(ctx, c, &row)
		c.Close()
		if err != nil {
			return rows, fmt.Errorf("%s: %w", s.name, err)
		}
		rows = append(rows, row)
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
	}
	return rows, nil
}

// load runs the steady load for d against the replicas; the returned
// function waits for it and returns the outcomes.
func load(c *Cluster, d time.Duration, clients int, think time.Duration, streamEvery int) func() []chaos.Outcome {
	return loadOn(c, c.URLs(), d, clients, 6, think, streamEvery)
}

// loadOn runs it against the replicas at urls, over groups system prompts.
func loadOn(c *Cluster, urls []string, d time.Duration, clients, groups int, think time.Duration, streamEvery int) func() []chaos.Outcome {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	cl := chaos.NewClient(urls, tr, c.Crashes)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	done := make(chan struct{})
	go func() { cl.Steady(ctx, clients, groups, 4, streamEvery, think); close(done) }()
	return func() []chaos.Outcome {
		<-done
		cancel()
		tr.CloseIdleConnections()
		return cl.Outcomes()
	}
}

// settle checks invariant 3: with no request in flight, every live
// replica's own and cluster-wide counts return to 0 within two staleness
// expiries.
func settle(ctx context.Context, c *Cluster, r *Row) {
	took, err := Wait(ctx, 10*time.Second, func() bool {
		for _, i := range c.Live() {
			v, err := c.View(i)
			if err != nil || len(v.Loads) > 0 || len(v.Local) > 0 {
				return false
			}
		}
		return true
	})
	r.Figures["loads_zero_after_s"] = took.Seconds()
	if err != nil {
		r.Problems = append(r.Problems, "load left after the run: "+err.Error())
	}
}

func expect(r *Row, ok bool, format string, args ...any) {
	if !ok {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// basic checks invariants 1 and 2 on a tally: nothing lost beyond
// allowed failures, no answer delivered to the wrong request.
func basic(r *Row, outs []chaos.Outcome, allowedFailures int) {
	r.Tally = chaos.Count(outs)
	expect(r, r.Tally.Mismatched == 0, "%d answers went to the wrong request", r.Tally.Mismatched)
	expect(r, r.Tally.Failed <= allowedFailures, "%d requests failed (%v), allowed %d", r.Tally.Failed, r.Tally.FailedByError, allowedFailures)
}

func churn(ctx context.Context, c *Cluster, r *Row, sig syscall.Signal) error {
	wait := load(c, 24*time.Second, 12, 100*time.Millisecond, 5)
	var recovery []float64
	for k := range 3 {
		pause(ctx, 3*time.Second)
		i := k % c.cfg.Replicas
		c.StopReplica(i, sig)
		pause(ctx, 2*time.Second)
		if err := c.StartReplica(i, c.EngineURLs()); err != nil {
			return err
		}
		took, err := Wait(ctx, 10*time.Second, func() bool { a, err := c.Agreement(probeKeys); return err == nil && a >= 0.99 })
		expect(r, err == nil, "agreement not back within 2 push/pull intervals of a restart")
		recovery = append(recovery, took.Seconds())
	}
	outs := wait()
	basic(r, outs, 0)
	if sig == syscall.SIGTERM {
		expect(r, r.Tally.AtCrash == 0, "clean stops cut %d requests", r.Tally.AtCrash)
	}
	r.Figures["agreement_back_max_s"] = slices.Max(recovery)
	settle(ctx, c, r)
	return nil
}

func engineDeath(ctx context.Context, c *Cluster, r *Row) error {
	wait := load(c, 25*time.Second, 12, 100*time.Millisecond, 4)
	pause(ctx, 4*time.Second)
	killed := time.Now()
	c.KillEngine(1)
	ejected, err := Wait(ctx, 10*time.Second, func() bool { return c.Routed(c.EngineURL(1), false) })
	expect(r, err == nil, "dead engine still routed after 10 s")
	pause(ctx, 4*time.Second)
	if err := c.StartEngine(1); err != nil {
		return err
	}
	back, err := Wait(ctx, 20*time.Second, func() bool { return c.Routed(c.EngineURL(1), true) })
	expect(r, err == nil, "returned engine not routed within 20 s (ejection 5 s)")
	outs := wait()
	late, atDeath := 0, 0
	for _, o := range outs {
		switch {
		case o.OK():
		case o.Start.After(killed.Add(2 * time.Second)):
			late++ // started well after the death: should have gone elsewhere
		default:
			atDeath++ // in flight on the engine when it died
		}
	}
	basic(r, outs, atDeath)
	expect(r, late == 0, "%d requests that started after the death failed", late)
	r.Figures["failed_in_flight_at_death"] = atDeath
	r.Figures["ejected_after_s"], r.Figures["back_after_s"] = ejected.Seconds(), back.Seconds()
	settle(ctx, c, r)
	return nil
}

func flapping(ctx context.Context, c *Cluster, r *Row) error {
	wait := load(c, 16*time.Second, 8, 100*time.Millisecond, 0)
	for k := range 12 {
		pause(ctx, time.Second)
		if k%2 == 0 {
			c.KillEngine(2)
		} else if err := c.StartEngine(2); err != nil {
			return err
		}
	}
	c.mu.Lock()
	down := c.engines[2] == nil
	c.mu.Unlock()
	if down {
		if err := c.StartEngine(2); err != nil {
			return err
		}
	}
	outs := wait()
	basic(r, outs, len(outs)/50)
	r.Figures["flaps"] = 12
	settle(ctx, c, r)
	return nil
}

func p99(outs []chaos.Outcome, on func(string) bool) time.Duration {
	var d []time.Duration
	for _, o := range outs {
		if o.OK() && on(o.Endpoint) {
			d = append(d, o.TTFB)
		}
	}
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)*99/100]
}

func slowEngine(ctx context.Context, c *Cluster, r *Row) error {
	slow := strings.TrimPrefix(c.EngineURL(0), "http://")
	others := func(ep string) bool { return ep != slow }
	// Half the requests streamed: their first tokens tell each replica's
	// pace (ring.Pace) how slow the engine is.
	before := load(c, 8*time.Second, 12, 100*time.Millisecond, 2)()
	if err := c.SetFaults(0, `{"latency":"500ms"}`); err != nil {
		return err
	}
	outs := load(c, 12*time.Second, 12, 100*time.Millisecond, 2)()
	basic(r, outs, 0)
	b, a := p99(before, others), p99(outs, others)
	r.Figures["others_p99_ms_before"], r.Figures["others_p99_ms_during"] = b.Milliseconds(), a.Milliseconds()
	r.Figures["slow_p99_ms"] = p99(outs, func(ep string) bool { return ep == slow }).Milliseconds()
	expect(r, a <= 2*b+100*time.Millisecond, "other engines' p99 rose from %v to %v", b, a)
	onSlow := 0
	for _, o := range outs {
		if o.Endpoint == slow {
			onSlow++
		}
	}
	share := float64(onSlow) / float64(max(len(outs), 1))
	r.Figures["slow_share_pct"] = int64(math.Round(100 * share))
	fair := 1 / float64(len(c.EngineURLs()))
	expect(r, share <= 0.8*fair, "the slow engine took %.1f%% of requests, its fair share %.1f%%", 100*share, 100*fair)
	settle(ctx, c, r)
	return nil
}

func failingEngine(ctx context.Context, c *Cluster, r *Row) error {
	wait := load(c, 25*time.Second, 12, 100*time.Millisecond, 0)
	pause(ctx, 3*time.Second)
	if err := c.SetFaults(3, `{"error_rate":1}`); err != nil {
		return err
	}
	ejected, err := Wait(ctx, 10*time.Second, func() bool { return c.Routed(c.EngineURL(3), false) })
	expect(r, err == nil, "failing engine not ejected within 10 s")
	pause(ctx, 4*time.Second)
	if err := c.SetFaults(3, `{"error_rate":0}`); err != nil {
		return err
	}
	back, err := Wait(ctx, 20*time.Second, func() bool { return c.Routed(c.EngineURL(3), true) })
	expect(r, err == nil, "healed engine not back within 20 s")
	outs := wait()
	basic(r, outs, len(outs)/20)
	r.Figures["ejected_after_s"], r.Figures["back_after_s"], r.Figures["failed"] = ejected.Seconds(), back.Seconds(), r.Tally.Failed
	settle(ctx, c, r)
	return nil
}

// requestsSignal runs the replicas with --load-signal requests, where the
// bound is CHWBL's in requests (c 1.25, floor 4, nothing more), what excess
// computes. Under the default tokens signal the counts are prompt tokens
// and the bound adds a request's own weight and a home's slack, which
// /debug/cluster does not show, so an excess the harness computed there
// would mix what the bound allows with what it does not.
func requestsSignal(cfg *Config) {
	cfg.ReplicaArgs = append(slices.Clone(cfg.ReplicaArgs), "--load-signal", "requests")
}

// excess is the busiest endpoint's in-flight count over the bound computed
// from every live replica's own counts (c 1.25, floor 4: the defaults
// under --load-signal requests, which the scenarios that read it set).
func excess(c *Cluster) int64 {
	loads := map[string]int64{}
	var total int64
	for _, i := range c.Live() {
		v, err := c.View(i)
		if err != nil {
			continue
		}
		for id, n := range v.Local {
			loads[id] += n
			total += n
		}
	}
	slots := max(int64(math.Ceil(1.25*float64(total)/float64(c.cfg.Engines))), 4)
	worst := int64(math.MinInt64)
	for _, n := range loads {
		worst = max(worst, n-slots)
	}
	return worst
}

func partition(ctx context.Context, c *Cluster, r *Row) error {
	wait := load(c, 45*time.Second, 24, 50*time.Millisecond, 0)
	pause(ctx, 5*time.Second)
	var ex []int64
	if err := c.Partition([]int{0, 1}, []int{2}); err != nil {
		return err
	}
	stop := chaos.Sample(200*time.Millisecond, func() { ex = append(ex, excess(c)) })
	pause(ctx, 30*time.Second)
	stop()
	// The cut is real: memberlist on the lone side has declared the others
	// dead by now.
	if v, err := c.View(2); err == nil {
		r.Figures["r2_members_in_split"] = len(v.Members)
		expect(r, len(v.Members) < c.cfg.Replicas, "the partition did not split the membership (r2 sees %d members)", len(v.Members))
	}
	c.Heal()
	healed, err := Wait(ctx, 10*time.Second, func() bool { a, err := c.Agreement(probeKeys); return err == nil && a >= 0.99 })
	expect(r, err == nil, "agreement not back within 2 push/pull intervals of the heal")
	outs := wait()
	basic(r, outs, 0)
	expect(r, r.Tally.OK == r.Tally.Requests, "a side stopped serving: %d of %d ok", r.Tally.OK, r.Tally.Requests)
	r.Figures["agreement_back_s"], r.Figures["excess_max_during"] = healed.Seconds(), slices.Max(ex)
	settle(ctx, c, r)
	return nil
}

func skew(ctx context.Context, c *Cluster, r *Row) error {
	wait := load(c, 30*time.Second, 24, 50*time.Millisecond, 0)
	var base, ex []int64
	stop := chaos.Sample(200*time.Millisecond, func() { base = append(base, excess(c)) })
	pause(ctx, 6*time.Second)
	stop()
	c.StopReplica(2, syscall.SIGTERM)
	if err := c.StartReplica(2, c.EngineURLs()[:c.cfg.Engines-1]); err != nil {
		return err
	}
	stop = chaos.Sample(200*time.Millisecond, func() { ex = append(ex, excess(c)) })
	pause(ctx, 15*time.Second)
	stop()
	outs := wait()
	basic(r, outs, 0)
	r.Figures["excess_max_equal_lists"], r.Figures["excess_max_skewed"] = slices.Max(base), slices.Max(ex)
	settle(ctx, c, r)
	return nil
}

// pause sleeps d or until ctx ends (an interrupt cuts the scenario short,
// and Run then removes everything).
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Table formats rows as the run's summary.
func Table(rows []Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s %8s %6s %8s %5s %6s %5s  %s\n", "scenario", "requests", "ok", "at-crash", "cut", "failed", "wrong", "figures / problems")
	for _, r := range rows {
		if r.Skipped != "" {
			fmt.Fprintf(&b, "%-20s skipped: %s\n", r.Scenario, r.Skipped)
			continue
		}
		keys := make([]string, 0, len(r.Figures))
		for k := range r.Figures {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var figs []string
		for _, k := range keys {
			v := r.Figures[k]
			if f, ok := v.(float64); ok {
				v = fmt.Sprintf("%.2f", f)
			}
			figs = append(figs, fmt.Sprintf("%s=%v", k, v))
		}
		t := r.Tally
		fmt.Fprintf(&b, "%-20s %8d %6d %8d %5d %6d %5d  %s\n", r.Scenario, t.Requests, t.OK, t.AtCrash, t.CutStreams, t.Failed, t.Mismatched, strings.Join(figs, " "))
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "%-20s INVARIANT BROKEN: %s\n", "", p)
		}
	}
	return b.String()
}
