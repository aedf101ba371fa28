package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/loadgen"
	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/sim/eval"
)

func evalCommand() *cli.Command {
	d := eval.DefaultConfig()
	join := func(xs []string) string { return strings.Join(xs, ",") }
	return &cli.Command{
		Name:  "eval",
		Usage: "compare routing policies in the fleet simulator (virtual time) and write a report",
		Description: "Runs every combination of the comma lists given (policies × workloads × engines × router replicas ×\n" +
			"rate scale × load factor × gossip interval) through simulated vLLM engines and writes DIR/results.json,\n" +
			"DIR/report.md (the study's questions answered from the numbers, its goals checked) and DIR/index.html (charts).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workload", Value: join(d.Workloads), Usage: "comma list of shared-prefix (SGLang's benchmark shape, Zipf-skewed groups), multi-turn, multi-turn-completions, agentic (closed loop: each turn after the previous answer, keyed by the production keyer on its JSON body) and trace:PATH (Mooncake format)"},
			&cli.StringFlag{Name: "policies", Value: join(d.Policies), Usage: "comma list of " + join(policy.Names)},
			&cli.StringFlag{Name: "endpoints", Value: joinAny(d.Endpoints), Usage: "comma list of engine counts"},
			&cli.StringFlag{Name: "routers", Value: joinAny(d.Routers), Usage: "comma list of router replica counts (each policy runs that many independent instances; chwbl's gossip)"},
			&cli.StringFlag{Name: "rate-scale", Value: joinAny(d.RateScales), Usage: "comma list of arrival-rate multipliers (shared-prefix: 24 requests/s at 1; 8 overloads 8 engines)"},
			&cli.StringFlag{Name: "load-factor", Value: joinAny(d.LoadFactors), Usage: "comma list of the bound's c"},
			&cli.StringFlag{Name: "gossip-interval", Value: joinAny(d.GossipIntervals), Usage: "comma list of gossip publication intervals"},
			&cli.IntFlag{Name: "requests", Value: d.Requests, Usage: "requests per run (a trace is cut to its first N; 0: all)"},
			&cli.IntFlag{Name: "kv-blocks", Value: d.KVBlocks, Usage: "KV cache blocks (16 tokens) per engine; 0: the H100 profile's capacity"},
			&cli.Uint64Flag{Name: "seed", Value: d.Seed, Usage: "workload and policy seed"},
			&cli.StringFlag{Name: "out", Value: "eval-report", Usage: "report folder"},
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

func runEval(c *cli.Context) error {
	cfg := eval.DefaultConfig()
	var err error
	id := func(s string) (string, error) { return s, nil }
	if cfg.Workloads, err = splitList("workload", c.String("workload"), id); err != nil {
		return err
	}
	if cfg.Policies, err = splitList("policies", c.String("policies"), id); err != nil {
		return err
	}
	if cfg.Endpoints, err = splitList("endpoints", c.String("endpoints"), strconv.Atoi); err != nil {
		return err
	}
	if cfg.Routers, err = splitList("routers", c.String("routers"), strconv.Atoi); err != nil {
		return err
	}
	float := func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
	if cfg.RateScales, err = splitList("rate-scale", c.String("rate-scale"), float); err != nil {
		return err
	}
	if cfg.LoadFactors, err = splitList("load-factor", c.String("load-factor"), float); err != nil {
		return err
	}
	if cfg.GossipIntervals, err = splitList("gossip-interval", c.String("gossip-interval"), time.ParseDuration); err != nil {
		return err
	}
	cfg.Requests, cfg.KVBlocks, cfg.Seed = c.Int("requests"), c.Int("kv-blocks"), c.Uint64("seed")
	if err := cfg.Validate(); err != nil {
		return err
	}
	start := time.Now()
	if loadgen.IsTerminal(os.Stderr) {
		cfg.Progress = func(done, total int) {
			const width = 30
			n := width * done / total
			fmt.Fprintf(os.Stderr, "\r[%s%s] %d/%d runs, %.0f s ", strings.Repeat("#", n), strings.Repeat(".", width-n), done, total, time.Since(start).Seconds())
			if done == total {
				fmt.Fprintln(os.Stderr)
			}
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
