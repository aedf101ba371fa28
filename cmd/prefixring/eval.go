package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prefixring/prefixring/gossip/core"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/loadgen"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/eval"
	"github.com/prefixring/prefixring/upstream"
)

// gridFlags are the axes of a custom grid; giving any of them replaces the
// default study with one grid.
var gridFlags = []string{"workload", "policies", "endpoints", "routers", "rate-scale", "load-factor", "min-bound",
	"signal", "gossip-view", "gossip-interval", "key", "concurrency", "gossip-loss"}

func evalCommand() *cli.Command {
	d := eval.CustomGrid()
	join := func(xs []string) string { return strings.Join(xs, ",") }
	return &cli.Command{
		Name:  "eval",
		Usage: "compare routing policies in the fleet simulator (virtual time) and write a report",
		Description: "Without axis flags, runs the default study (docs/study.md, about 10 minutes on 2 cores) over seeds " + joinAny(eval.DefaultSeeds) + " and\n" +
			"two fleets (the H100 profile's KV and " + fmt.Sprint(eval.SmallKVBlocks) + " blocks an engine), " + fmt.Sprint(eval.DefaultRequests) + " requests a point: the main policies on every\n" +
			"built-in workload at x0.25, x1 and x2 and on the Mooncake conversation trace (when --traces holds it) at x1 and x2,\n" +
			"the demo's shape, closed loops, prefixring's bound and its gossip's interval and loss (--full: every policy, x4,\n" +
			"1 and 8 replicas, the signals and key designs, the workloads' own sizes). With any axis flag, runs one grid:\n" +
			"every combination of the comma lists given (the others at prefixring's defaults; --full and --traces,\n" +
			"which shape the default study, are then warned about and have no effect). Writes DIR/results.json,\n" +
			"DIR/report.md (the goals checked, in ranges over the seeds) and DIR/index.html (charts).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workload", EnvVars: env("eval-workload"), Value: join(d.Workloads), Usage: "comma list of shared-prefix (SGLang's benchmark shape, Zipf-skewed groups), multi-turn, multi-turn-completions, agentic (closed loop: each turn after the previous answer, keyed by the production keyer on its JSON body) and trace:PATH (Mooncake format; requests that share a timestamp spread over its tick, under the seed) or trace-recorded:PATH (every request at its timestamp as written)"},
			&cli.StringFlag{Name: "policies", EnvVars: env("eval-policies"), Value: join(d.Policies), Usage: "comma list of " + join(eval.Policies) + " (least-tokens: least-load over prompt tokens not yet answered)"},
			&cli.StringFlag{Name: "endpoints", EnvVars: env("eval-endpoints"), Value: joinAny(d.Endpoints), Usage: "comma list of engine counts"},
			&cli.StringFlag{Name: "routers", EnvVars: env("eval-routers"), Value: joinAny(d.Routers), Usage: "comma list of router replica counts (each policy runs that many independent instances; chwbl's gossip)"},
			&cli.StringFlag{Name: "rate-scale", EnvVars: env("eval-rate-scale"), Value: joinAny(d.RateScales), Usage: "comma list of arrival-rate multipliers (built-in workloads: 2 is about what least-load serves, 4 twice that; traces: their own rate times this)"},
			&cli.StringFlag{Name: "load-factor", EnvVars: env("eval-load-factor"), Value: joinAny(d.LoadFactors), Usage: "comma list of the bound's c"},
			&cli.StringFlag{Name: "min-bound", EnvVars: env("eval-min-bound"), Value: joinAny(d.MinBounds), Usage: "comma list of the bound's floor, in the load signal's unit"},
			&cli.StringFlag{Name: "signal", EnvVars: env("eval-signal"), Value: joinAny(d.Signals), Usage: "comma list of load signals: " + joinAny(eval.Signals) + " (engine: what the engines report, requests waiting and running, scraped every 250ms; the study's alternative, not in serve)"},
			&cli.StringFlag{Name: "gossip-view", EnvVars: env("eval-gossip-view"), Value: joinAny(d.Views), Usage: "comma list of gossip views: " + joinAny(core.ViewModes)},
			&cli.StringFlag{Name: "gossip-interval", EnvVars: env("eval-gossip-interval"), Value: joinAny(d.GossipIntervals), Usage: "comma list of gossip publication intervals"},
			&cli.StringFlag{Name: "key", EnvVars: env("eval-key"), Value: joinAny(d.Keys), Usage: "comma list of key designs: " + join(eval.KeyDesigns)},
			&cli.StringFlag{Name: "concurrency", EnvVars: env("eval-concurrency"), Value: joinAny(d.Concurrency), Usage: "comma list of closed-loop session counts: that many conversations or agent loops at a time (0: the workload's own; open loop at its rate, the demo's 48)"},
			&cli.StringFlag{Name: "gossip-loss", EnvVars: env("eval-gossip-loss"), Value: joinAny(d.GossipLoss), Usage: "comma list of the probability that a gossip publication is lost on its way to each other replica"},
			&cli.StringFlag{Name: "seeds", EnvVars: env("eval-seeds"), Usage: "comma list of seeds; every point runs once per seed and the report shows ranges (default: --seed, or for the default study " + joinAny(eval.DefaultSeeds) + ")"},
			&cli.BoolFlag{Name: "full", EnvVars: env("eval-full"), Usage: "the full default study (no effect beside an axis flag): every policy at 1, 3 and 8 router replicas, wider sweeps (docs/study.md gives its run time)"},
			&cli.StringFlag{Name: "traces", EnvVars: env("eval-traces"), Value: eval.DefaultTraces, Usage: "folder holding the Mooncake traces the default study replays (conversation_trace.jsonl, synthetic_trace.jsonl); the study runs without them; no effect beside an axis flag (name a trace in --workload)"},
			&cli.IntFlag{Name: "requests", EnvVars: env("eval-requests"), Usage: "cap on each workload's requests (a trace is cut to its first N; 0: the workload's own)"},
			&cli.StringFlag{Name: "kv-blocks", EnvVars: env("eval-kv-blocks"), Usage: "comma list of KV cache blocks (16 tokens) per engine, the fleets; 0: the H100 profile's capacity (default study: 0 and " + fmt.Sprint(eval.SmallKVBlocks) + ")"},
			&cli.BoolFlag{Name: "kv-capacity-unknown", EnvVars: env("eval-kv-capacity-unknown"), Usage: "hide the engines' KV capacity from the routers (as engines that do not report it): K is then unbounded, or with --kv-average bounded by c·average"},
			&cli.BoolFlag{Name: "kv-average", EnvVars: env("eval-kv-average"), Usage: "as serve's --kv-average: bound K by c·average on engines of unknown KV capacity"},
			&cli.Int64Flag{Name: "kv-min-bound", EnvVars: env("eval-kv-min-bound"), Usage: "as serve's --kv-min-bound: with --kv-average, every engine may hold this many KV tokens whatever the average"},
			&cli.Float64Flag{Name: "kv-capacity-factor", EnvVars: env("eval-kv-capacity-factor"), Value: ring.DefaultKVCapacityFactor, Usage: "as serve's --kv-capacity-factor: bound K on engines of known KV capacity at this many times it"},
			&cli.Float64Flag{Name: "kv-load-factor", EnvVars: env("eval-kv-load-factor"), Value: ring.DefaultKVLoadFactor, Usage: "as serve's --kv-load-factor: an engine may also hold this many times its capacity's share of the fleet's K"},
			&cli.Float64Flag{Name: "pace-threshold", EnvVars: env("eval-pace-threshold"), Value: ring.DefaultPaceConfig().Threshold, Usage: "as serve's --pace-threshold: an engine whose answers take this many times the fleet's median has its load read at its pace; 0: off"},
			&cli.Float64Flag{Name: "group-memory", EnvVars: env("eval-group-memory"), Value: ring.DefaultGroupMemory, Usage: "as serve's --group-memory: where the engines' KV capacity is known, a shared prefix's copies take at most this share of the memory its traffic earns; 0: no cap"},
			&cli.Uint64Flag{Name: "seed", EnvVars: env("eval-seed"), Value: 1, Usage: "workload and policy seed"},
			&cli.StringFlag{Name: "out", EnvVars: env("eval-out"), Value: "eval-report", Usage: "report folder"},
			&cli.StringFlag{Name: "endpoint-urls", EnvVars: env("eval-endpoint-urls"), Usage: "comma list of a real fleet's engines as serve's --endpoints lists them: the simulated engines take their IDs (canonical URLs), which the ring and the group sets hash, so each run places keys as routers in front of that fleet would; sets --endpoints to their number (default: engine-0, engine-1, ...)"},
			&cli.StringFlag{Name: "slow-engines", EnvVars: env("eval-slow-engines"), Usage: "comma list of engine:factor: those engines (by index from 0) take factor times as long for every step in every run, as a degraded GPU or a noisy neighbour would (0:10,3:4: engine 0 ten times slower, engine 3 four times); runs are labelled with it (slow_engines in results.json, the fleet column, the records' file names)"},
			&cli.StringFlag{Name: "records", EnvVars: env("eval-records"), Usage: "also write every run's per-request records (engine, decision, arrival, TTFT, cached and computed tokens, session, turn) as JSON lines to this folder, one file per simulation, named by its point (a policy is simulated once for points that differ only in axes it does not read)"},
		},
		Action: runEval,
	}
}

func joinAny[T any](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

func splitList[T any](name, s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, fmt.Errorf("--%s %q: %v", name, f, err)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--%s is empty", name)
	}
	return out, nil
}

// evalConfig turns eval's flags into the study to run; warnings name flags
// given that have no effect.
func evalConfig(c *cli.Context) (cfg eval.Config, warnings []string, err error) {
	if err := checkRanges(c, atLeast("requests", 0), atLeast("kv-min-bound", 0),
		paceThresholdRange(), within("kv-capacity-factor", 0, ring.MaxLoadFactor),
		kvLoadFactorRange(), atLeast("group-memory", 0)); err != nil {
		return cfg, nil, err
	}
	cfg = eval.DefaultConfig(c.String("traces"), c.Bool("full"))
	if slices.ContainsFunc(gridFlags, c.IsSet) {
		g, err := customGrid(c)
		if err != nil {
			return cfg, nil, err
		}
		cfg.Grids, cfg.Seeds, cfg.Requests = []eval.Grid{g}, nil, 0
		if !c.IsSet("min-bound") && len(g.Signals) > 1 && slices.Contains(g.Signals, ring.SignalRequests) {
			warnings = append(warnings, fmt.Sprintf("--signal requests beside another signal takes --min-bound %v, a floor of that many requests that the bound never reaches: run requests apart (its floor is then %d) or set --min-bound",
				g.MinBounds, ring.DefaultMinRequests))
		}
		axis := gridFlags[slices.IndexFunc(gridFlags, c.IsSet)]
		for _, f := range []string{"full", "traces"} {
			if c.IsSet(f) {
				warnings = append(warnings, "--"+f+" has no effect beside --"+axis+": it shapes the default study, which an axis flag replaces with one grid")
			}
		}
	}
	cfg.Seed = c.Uint64("seed")
	if c.IsSet("seed") {
		cfg.Seeds = nil
	}
	if c.IsSet("requests") {
		cfg.Requests = c.Int("requests")
	}
	if c.IsSet("seeds") {
		seeds, err := splitList("seeds", c.String("seeds"), func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) })
		if err != nil {
			return cfg, nil, err
		}
		cfg.Seeds = seeds
	}
	if c.IsSet("kv-blocks") {
		kv, err := splitList("kv-blocks", c.String("kv-blocks"), strconv.Atoi)
		if err != nil {
			return cfg, nil, err
		}
		for i := range cfg.Grids {
			cfg.Grids[i].KVBlocks = kv
		}
	}
	cfg.KVCapacityUnknown, cfg.KVAverage, cfg.KVMinBound = c.Bool("kv-capacity-unknown"), c.Bool("kv-average"), c.Int64("kv-min-bound")
	cfg.KVCapacityFactor, cfg.KVLoadFactor = c.Float64("kv-capacity-factor"), c.Float64("kv-load-factor")
	if cfg.PaceThreshold = c.Float64("pace-threshold"); cfg.PaceThreshold == 0 {
		cfg.PaceThreshold = -1 // the flag's 0 is off; the Config's 0 is the default
	}
	if cfg.GroupMemory = c.Float64("group-memory"); cfg.GroupMemory == 0 {
		cfg.GroupMemory = -1 // the flag's 0 is no cap; the Config's 0 is the default
	}
	if c.IsSet("endpoint-urls") {
		ids, err := endpointIDs(c.String("endpoint-urls"))
		if err != nil {
			return cfg, nil, err
		}
		cfg.EndpointNames = ids
		if !c.IsSet("endpoints") {
			for i := range cfg.Grids {
				cfg.Grids[i].Endpoints = []int{len(cfg.EndpointNames)}
			}
		}
	}
	if c.IsSet("slow-engines") {
		if cfg.SlowEngines, err = eval.ParseSlowEngines(c.String("slow-engines")); err != nil {
			return cfg, nil, fmt.Errorf("--slow-engines: %w", err)
		}
	}
	cfg.Records = c.String("records")
	return cfg, warnings, cfg.Validate()
}

func runEval(c *cli.Context) error {
	cfg, warnings, err := evalConfig(c)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintln(c.App.ErrWriter, "prefixring eval: warning:", w)
	}
	if cfg.Records != "" {
		if err := os.MkdirAll(cfg.Records, 0o755); err != nil {
			return err
		}
	}
	start := time.Now()
	if loadgen.IsTerminal(os.Stderr) {
		var bar *progressbar.ProgressBar
		cfg.Progress = func(done, total int) {
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("runs"),
					progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(true),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
			}
			_ = bar.Set(done)
		}
	}
	results, err := eval.Run(cfg)
	if err != nil {
		return err
	}
	out := c.String("out")
	if err := eval.WriteReport(out, results, "prefixring "+strings.Join(os.Args[1:], " ")); err != nil {
		return err
	}
	abs, _ := filepath.Abs(out)
	fmt.Fprintf(c.App.Writer, "%d runs in %.0f s; report: %s (results.json, report.md)\n", len(results), time.Since(start).Seconds(), filepath.Join(abs, "index.html"))
	return nil
}

// endpointIDs are the IDs serve gives the endpoints of list (its
// --endpoints syntax).
func endpointIDs(list string) ([]string, error) {
	var ids []string
	for raw := range strings.SplitSeq(list, ",") {
		ep, _, err := upstream.ParseEndpoint(raw)
		if err != nil {
			return nil, fmt.Errorf("--endpoint-urls: %w", err)
		}
		ids = append(ids, ep.ID)
	}
	return ids, nil
}

// customGrid is one grid from the axis flags.
func customGrid(c *cli.Context) (eval.Grid, error) {
	g := eval.CustomGrid()
	var err error
	id := func(s string) (string, error) { return s, nil }
	float := func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
	for _, step := range []func() error{
		func() error { g.Workloads, err = splitList("workload", c.String("workload"), id); return err },
		func() error { g.Policies, err = splitList("policies", c.String("policies"), id); return err },
		func() error {
			g.Endpoints, err = splitList("endpoints", c.String("endpoints"), strconv.Atoi)
			return err
		},
		func() error { g.Routers, err = splitList("routers", c.String("routers"), strconv.Atoi); return err },
		func() error { g.RateScales, err = splitList("rate-scale", c.String("rate-scale"), float); return err },
		func() error {
			g.LoadFactors, err = splitList("load-factor", c.String("load-factor"), float)
			return err
		},
		func() error {
			g.MinBounds, err = splitList("min-bound", c.String("min-bound"), func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) })
			return err
		},
		func() error { g.Signals, err = splitList("signal", c.String("signal"), eval.ParseSignal); return err },
		func() error {
			g.Views, err = splitList("gossip-view", c.String("gossip-view"), core.ParseViewMode)
			return err
		},
		func() error {
			g.GossipIntervals, err = splitList("gossip-interval", c.String("gossip-interval"), time.ParseDuration)
			return err
		},
		func() error { g.Keys, err = splitList("key", c.String("key"), id); return err },
		func() error {
			g.Concurrency, err = splitList("concurrency", c.String("concurrency"), strconv.Atoi)
			return err
		},
		func() error {
			g.GossipLoss, err = splitList("gossip-loss", c.String("gossip-loss"), float)
			return err
		},
	} {
		if err := step(); err != nil {
			return g, err
		}
	}
	// The floor is in the signal's unit: serve's default under requests
	// is 4, and tokens' 16384 would be a floor no count of requests
	// reaches, a bound that never fires.
	if !c.IsSet("min-bound") && slices.Equal(g.Signals, []ring.Signal{ring.SignalRequests}) {
		g.MinBounds = []int64{ring.DefaultMinRequests}
	}
	return g, nil
}
