package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/chaos/proc"
)

func chaosCommand() *cli.Command {
	return &cli.Command{
		Name:  "chaos",
		Usage: "run the chaos scenarios on real processes (this binary's serve and sim) and print what they measured",
		Description: "Starts engines (prefixring sim) and three gossiping replicas (prefixring serve) for each scenario, drives\n" +
			"shared-prefix multi-turn traffic through the replicas as a DNS round-robin client would, injects the\n" +
			"scenario's fault (SIGKILL/SIGTERM, dead, flapping, slow or failing engines, a gossip partition, lossy\n" +
			"gossip, skewed endpoint lists, a rolling update of the engines, a poison prompt, a keyless stranger, workers\n" +
			"churned through the workers API, a black-holed replica host) and checks the invariants. As root with\n" +
			"iproute2 and nftables, each replica runs in a network namespace of its own, where the gossip links are cut\n" +
			"or degraded and a host black-holed; everything created is removed at the end, also on Ctrl-C. Exits 1 when\n" +
			"an invariant broke.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "scenario", EnvVars: env("chaos-scenario"), Usage: "comma list of scenarios (default all): " + strings.Join(proc.Names(), ", ")},
			&cli.StringFlag{Name: "netns", EnvVars: env("chaos-netns"), Value: "auto", Usage: "auto (when root with iproute2), on or off"},
			&cli.StringFlag{Name: "json", EnvVars: env("chaos-json"), Usage: "also write the rows as JSON to this file"},
			&cli.BoolFlag{Name: "v", EnvVars: env("chaos-v"), Usage: "show the processes' logs"},
		},
		Action: runChaos,
	}
}

func runChaos(c *cli.Context) error {
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	cfg := proc.Config{Bin: bin, Replicas: 3, Engines: 4}
	switch c.String("netns") {
	case "on":
		if err := proc.CanNetns(); err != nil {
			return fmt.Errorf("--netns on: %v", err)
		}
		cfg.Netns = true
	case "auto":
		if err := proc.CanNetns(); err == nil {
			cfg.Netns = true
		} else {
			fmt.Fprintf(c.App.ErrWriter, "chaos: no network namespaces (%v): the partition, lossy-gossip, lossy-gossip-aligned and black-hole scenarios are skipped\n", err)
		}
	case "off":
	default:
		return fmt.Errorf("--netns %q: want auto, on or off", c.String("netns"))
	}
	if c.Bool("v") {
		cfg.Log = func(line string) { fmt.Fprintln(c.App.ErrWriter, line) }
	}
	var names []string
	for _, n := range strings.Split(c.String("scenario"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rows, err := proc.Run(ctx, cfg, names, func(name string) { fmt.Fprintf(c.App.ErrWriter, "chaos: %s...\n", name) })
	fmt.Fprint(c.App.Writer, proc.Table(rows))
	if p := c.String("json"); p != "" {
		b, _ := json.MarshalIndent(rows, "", "  ")
		if werr := os.WriteFile(p, append(b, '\n'), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.Failed() {
			return cli.Exit("chaos: an invariant broke", 1)
		}
	}
	return nil
}
