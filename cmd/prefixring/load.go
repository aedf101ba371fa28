package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/loadgen"
	"github.com/prefixring/prefixring/sim/workload"
)

func loadCommand() *cli.Command {
	d := loadgen.DefaultConfig()
	return &cli.Command{
		Name:  "load",
		Usage: "drive a workload at OpenAI-compatible URLs in real time and measure TTFT, inter-token latency, throughput and cache hits",
		Description: "Plays the study's workloads (" + strings.Join(workload.Names, ", ") + ", trace:PATH, trace-recorded:PATH) against one or more URLs,\n" +
			"spread over them in turn as DNS round-robin would. Closed loop with --concurrency, open loop otherwise\n" +
			"(Poisson at --rate sessions per second, or the workload's own start times). Every request carries an\n" +
			"X-Request-Id; a server that echoes it (vLLM with --enable-request-id-headers, prefixring sim) has each\n" +
			"answer checked against its request. Exits 1 when any request failed.\n\n" +
			"   prefixring load --url http://127.0.0.1:8080 --workload multi-turn --concurrency 8 --stream\n" +
			"   prefixring load --compare before.json after.json",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "url", EnvVars: env("load-url"), Usage: "comma-separated server roots (http://host:port); required"},
			&cli.StringFlag{Name: "workload", EnvVars: env("load-workload"), Value: "multi-turn", Usage: "workload: " + strings.Join(workload.Names, ", ") + ", trace:PATH (Mooncake format; requests that share a timestamp spread over its tick) or trace-recorded:PATH (every request at its timestamp)"},
			&cli.IntFlag{Name: "requests", EnvVars: env("load-requests"), Usage: "stop after this many requests (0: the whole workload)"},
			&cli.IntFlag{Name: "concurrency", EnvVars: env("load-concurrency"), Usage: "closed loop: sessions in flight at once"},
			&cli.Float64Flag{Name: "rate", EnvVars: env("load-rate"), Usage: "open loop: sessions started per second, Poisson (0: the workload's own start times)"},
			&cli.Float64Flag{Name: "rate-scale", EnvVars: env("load-rate-scale"), Value: 1, Usage: "multiply the workload's own start rate (trace replay speed)"},
			&cli.Float64Flag{Name: "think-scale", EnvVars: env("load-think-scale"), Value: d.ThinkScale, Usage: "multiply the pauses between a conversation's turns (0: none)"},
			&cli.BoolFlag{Name: "stream", EnvVars: env("load-stream"), Usage: "stream the answers (needed for TTFT and inter-token latency)"},
			&cli.StringFlag{Name: "model", EnvVars: env("load-model"), Value: d.Model, Usage: "model name in every request (default: the first one the first URL's /v1/models lists)"},
			&cli.IntFlag{Name: "max-tokens", EnvVars: env("load-max-tokens"), Usage: "output tokens per request (0: the workload's)"},
			&cli.Uint64Flag{Name: "seed", EnvVars: env("load-seed"), Value: d.Seed, Usage: "seed of the workload and the Poisson starts"},
			&cli.DurationFlag{Name: "timeout", EnvVars: env("load-timeout"), Value: d.Timeout, Usage: "limit of one request"},
			&cli.StringFlag{Name: "engine-metrics", EnvVars: env("load-engine-metrics"), Usage: "comma-separated Prometheus URLs (or roots) of the engines, scraped before and after for their prefix-cache counters (vLLM or llama.cpp names)"},
			&cli.StringFlag{Name: "json", EnvVars: env("load-json"), Usage: "write the report as JSON to this file"},
			&cli.StringFlag{Name: "samples", EnvVars: env("load-samples"), Usage: "write every request's measurements to this file, one JSON object a line (session, turn, endpoint, start, TTFT, tokens)"},
			&cli.StringFlag{Name: "label", EnvVars: env("load-label"), Usage: "the run's name in tables and JSON"},
			&cli.BoolFlag{Name: "progress", EnvVars: env("load-progress"), Value: loadgen.IsTerminal(os.Stderr), DefaultText: "on a terminal", Usage: "draw a progress bar on stderr"},
			&cli.BoolFlag{Name: "compare", EnvVars: env("load-compare"), Usage: "print the JSON reports named as arguments side by side, and run nothing"},
		},
		Action: runLoad,
	}
}

// loadConfig turns load's flags into the run's configuration.
func loadConfig(c *cli.Context) (loadgen.Config, error) {
	cfg := loadgen.DefaultConfig()
	if err := checkRanges(c, atLeast("requests", 0), atLeast("concurrency", 0), atLeast("max-tokens", 0),
		atLeast("rate", 0), atLeast("think-scale", 0), positive("timeout")); err != nil {
		return cfg, err
	}
	if c.String("url") == "" {
		return cfg, errors.New("--url is needed: the server roots to drive")
	}
	cfg.URLs, cfg.EngineMetrics = loadgen.SplitList(c.String("url")), loadgen.SplitList(c.String("engine-metrics"))
	cfg.Model, cfg.Stream = c.String("model"), c.Bool("stream")
	cfg.Requests, cfg.Concurrency, cfg.Rate = c.Int("requests"), c.Int("concurrency"), c.Float64("rate")
	cfg.ThinkScale, cfg.MaxTokens, cfg.Timeout, cfg.Seed = c.Float64("think-scale"), c.Int("max-tokens"), c.Duration("timeout"), c.Uint64("seed")
	if c.Bool("progress") {
		cfg.Progress = os.Stderr
	}
	return cfg, cfg.Validate()
}

func runLoad(c *cli.Context) error {
	if c.Bool("compare") {
		if c.NArg() < 2 {
			return errors.New("--compare needs two or more report files")
		}
		var reps []*loadgen.Report
		for _, p := range c.Args().Slice() {
			r, err := loadgen.ReadReport(p)
			if err != nil {
				return err
			}
			if r.Label == "" {
				r.Label = p
			}
			reps = append(reps, r)
		}
		loadgen.PrintCompare(os.Stdout, reps...)
		return nil
	}
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (report files go with --compare)", c.Args().Slice())
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	sessions, err := workload.Named(c.String("workload"), cfg.Seed, c.Float64("rate-scale"))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := loadgen.Run(ctx, cfg, sessions)
	if rep != nil {
		rep.Label, rep.Workload = c.String("label"), c.String("workload")
		rep.Print(os.Stdout)
		for kind, msg := range rep.FirstErrors {
			fmt.Fprintf(os.Stderr, "first %s error: %s\n", kind, msg)
		}
		if p := c.String("json"); p != "" {
			if werr := rep.WriteJSON(p); werr != nil {
				return werr
			}
		}
		if p := c.String("samples"); p != "" {
			if werr := rep.WriteSamples(p); werr != nil {
				return werr
			}
		}
	}
	if err != nil {
		return err
	}
	if n := rep.Failed(); n > 0 {
		return cli.Exit(fmt.Sprintf("prefixring load: %d of %d requests failed", n, rep.Requests), 1)
	}
	return nil
}
