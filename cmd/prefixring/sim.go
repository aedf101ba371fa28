package main

import (
	"errors"
	"fmt"
	"net"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/vllm"
	"github.com/urfave/cli/v2"
)

func simFlags() []cli.Flag {
	d := vllm.DefaultConfig()
	e := d.Engine
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8000", EnvVars: env("sim-listen"), Usage: "address of a single simulated server (not with --count or --base-port)"},
		&cli.IntFlag{Name: "count", Value: 1, EnvVars: env("sim-count"), Usage: "number of simulated servers, on 127.0.0.1 from --base-port up"},
		&cli.IntFlag{Name: "base-port", Value: 8000, EnvVars: env("sim-base-port"), Usage: "port of the first server with --count"},
		&cli.StringFlag{Name: "model", Value: d.Model, EnvVars: env("sim-model"), Usage: "served model name (the model_name label)"},
		&cli.StringFlag{Name: "profile", Value: e.Profile.Name, EnvVars: env("sim-profile"), Usage: "model-on-GPU cost profile: " + strings.Join(profileNames(), ", ")},
		&cli.IntFlag{Name: "block-size", Value: e.BlockSize, EnvVars: env("sim-block-size"), Usage: "KV block size in tokens"},
		&cli.IntFlag{Name: "kv-blocks", EnvVars: env("sim-kv-blocks"), Usage: "KV cache capacity in blocks (0: derived from the profile's GPU memory)"},
		&cli.IntFlag{Name: "max-num-seqs", Value: e.MaxNumSeqs, EnvVars: env("sim-max-num-seqs"), Usage: "largest running batch"},
		&cli.IntFlag{Name: "max-num-batched-tokens", Value: e.MaxNumBatchedTokens, EnvVars: env("sim-max-num-batched-tokens"), Usage: "tokens computed per step (chunked prefill budget)"},
		&cli.IntFlag{Name: "max-model-len", Value: e.MaxModelLen, EnvVars: env("sim-max-model-len"), Usage: "largest prompt plus output, in tokens"},
		&cli.IntFlag{Name: "default-max-tokens", Value: d.DefaultMaxTokens, EnvVars: env("sim-default-max-tokens"), Usage: "output length of requests that set no max_tokens"},
		&cli.DurationFlag{Name: "latency", EnvVars: env("sim-latency"), Usage: "fault: latency added before each request reaches the engine"},
		&cli.Float64Flag{Name: "error-rate", EnvVars: env("sim-error-rate"), Usage: "fault: fraction of requests answered with a 500"},
		&cli.Float64Flag{Name: "hang-rate", EnvVars: env("sim-hang-rate"), Usage: "fault: fraction of requests never answered"},
		&cli.Float64Flag{Name: "close-rate", EnvVars: env("sim-close-rate"), Usage: "fault: fraction of responses cut off abruptly"},
		&cli.IntFlag{Name: "close-after-tokens", EnvVars: env("sim-close-after-tokens"), Usage: "fault: tokens sent before a cut-off"},
		&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: env("sim-log-level"), Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: env("sim-log-format"), Usage: "text or json"},
		&cli.Uint64Flag{Name: "seed", EnvVars: env("sim-seed"), Usage: "seed of the fault dice (server i uses seed+i)"},
	}
}

// simCommand runs simulated vLLM servers: prefixring's default backend.
func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "run simulated vLLM servers (OpenAI API, vLLM metrics, prefix caching) on loopback",
		Description: "Each server is a simulated vLLM engine driven by the wall clock: see docs/engine.md. " +
			"Fault knobs can be changed at run time with PUT /admin/faults.",
		Flags:  simFlags(),
		Action: runSim,
	}
}

func profileNames() []string {
	var names []string
	for n := range engine.Profiles() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func simConfig(c *cli.Context) (vllm.Config, error) {
	cfg := vllm.DefaultConfig()
	if err := checkRanges(c, atLeast("block-size", 1), atLeast("kv-blocks", 0), atLeast("max-num-seqs", 1),
		atLeast("max-num-batched-tokens", 1), atLeast("max-model-len", 1), atLeast("default-max-tokens", 1),
		atLeast("latency", 0), within("error-rate", 0, 1), within("hang-rate", 0, 1), within("close-rate", 0, 1),
		atLeast("close-after-tokens", 0)); err != nil {
		return cfg, err
	}
	if c.String("model") == "" {
		return cfg, errors.New("--model is empty")
	}
	p, ok := engine.Profiles()[c.String("profile")]
	if !ok {
		return cfg, fmt.Errorf("--profile %q: want one of %s", c.String("profile"), strings.Join(profileNames(), ", "))
	}
	cfg.Engine.Profile = p
	cfg.Engine.BlockSize = c.Int("block-size")
	cfg.Engine.NumBlocks = c.Int("kv-blocks")
	cfg.Engine.MaxNumSeqs = c.Int("max-num-seqs")
	cfg.Engine.MaxNumBatchedTokens = c.Int("max-num-batched-tokens")
	cfg.Engine.MaxModelLen = c.Int("max-model-len")
	cfg.Model = c.String("model")
	cfg.DefaultMaxTokens = c.Int("default-max-tokens")
	cfg.Faults = vllm.Faults{
		Latency: c.Duration("latency"), ErrorRate: c.Float64("error-rate"), HangRate: c.Float64("hang-rate"),
		CloseRate: c.Float64("close-rate"), CloseAfterTokens: c.Int("close-after-tokens"),
	}
	cfg.Seed = c.Uint64("seed")
	if err := cfg.Validate(); err != nil {
		// Past the ranges above, what is left is a block the profile's
		// memory cannot hold.
		return cfg, fmt.Errorf("--profile %s, --block-size %d: %w", p.Name, cfg.Engine.BlockSize, err)
	}
	return cfg, nil
}

// simAddrs lists the addresses to serve: --listen, or --count ports.
func simAddrs(c *cli.Context) ([]string, error) {
	if !c.IsSet("count") && !c.IsSet("base-port") {
		return []string{c.String("listen")}, nil
	}
	if c.IsSet("listen") {
		return nil, errors.New("give --listen, or --count and --base-port, not both")
	}
	n, base := c.Int("count"), c.Int("base-port")
	if n < 1 || base < 1 || base+n-1 > 65535 {
		return nil, fmt.Errorf("--count %d from --base-port %d: out of range", n, base)
	}
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", base+i)
	}
	return addrs, nil
}

func runSim(c *cli.Context) error {
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	cfg, err := simConfig(c)
	if err != nil {
		return err
	}
	addrs, err := simAddrs(c)
	if err != nil {
		return err
	}
	var lns []net.Listener
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return err
		}
		lns = append(lns, ln)
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return vllm.ServeAll(ctx, cfg, lns, log)
}
