// Command demo is `make demo`: it starts, on 127.0.0.1, four simulated vLLM
// engines (the calibrated Llama-3.1-8B-on-H100 profile, with a KV cache
// small enough that where a request goes matters) and three prefixring
// replicas that gossip their loads, and drives one workload through the
// replicas in turn, as DNS round-robin spreads clients: conversations that
// share a few system prompts and grow turn by turn. It does so twice, on
// fresh engines each time: with --policy round-robin (what a plain load
// balancer does) and with prefixring's default, then prints both side by
// side. Every process it starts is stopped at the end, also on Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prefixring/prefixring/internal/e2eproc"
	"github.com/prefixring/prefixring/loadgen"
	"github.com/prefixring/prefixring/sim/workload"
)

type options struct {
	bin                     string
	engines, replicas       int
	kvBlocks                int
	conversations, turns    int
	concurrency             int
	thinkScale              float64
	verbose                 bool
	jsonDir                 string
	policies                []string
	maxTokens, systemTokens int
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/prefixring", "the prefixring binary")
	flag.IntVar(&o.engines, "engines", 4, "simulated engines")
	flag.IntVar(&o.replicas, "replicas", 3, "prefixring replicas (gossiping)")
	flag.IntVar(&o.kvBlocks, "kv-blocks", 1000, "KV cache of each engine, in 16-token blocks")
	flag.IntVar(&o.conversations, "conversations", 128, "conversations")
	flag.IntVar(&o.turns, "turns", 6, "turns per conversation")
	flag.IntVar(&o.concurrency, "concurrency", 48, "conversations in flight at once")
	flag.Float64Var(&o.thinkScale, "think-scale", 0.1, "multiplies the user's 2 s mean pause between turns")
	flag.IntVar(&o.maxTokens, "max-tokens", 64, "output tokens per turn")
	flag.IntVar(&o.systemTokens, "system-tokens", 1024, "tokens of each of the 8 shared system prompts")
	flag.StringVar(&o.jsonDir, "json", "", "write each run's report (prefixring load's JSON), its requests (POLICY.samples.jsonl) and its engines' URLs (POLICY.engines) into this directory")
	flag.BoolVar(&o.verbose, "v", false, "show the processes' logs")
	evalOut := flag.String("eval-out", "out/demo-eval", "where the small `prefixring eval` the demo ends with writes its report (empty: skip it)")
	pols := flag.String("policies", "round-robin,chwbl", "policies to compare, in order")
	flag.Parse()
	o.policies = loadgen.SplitList(*pols)
	log.SetFlags(0)
	log.SetPrefix("demo: ")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	w := workload.DefaultMultiTurn(workload.Chat)
	w.Conversations, w.Turns, w.OutputTokens, w.SystemTokens = o.conversations, o.turns, o.maxTokens, o.systemTokens
	fmt.Printf("%d engines (simulated vLLM, Llama-3.1-8B on an H100, %d KV blocks of 16 tokens each), %d gossiping prefixring replicas\n",
		o.engines, o.kvBlocks, o.replicas)
	fmt.Printf("workload: %d conversations x %d turns over %d shared system prompts of %d tokens, %d-token questions and answers, %d at a time, streamed; requests go to the replicas in turn\n\n",
		w.Conversations, w.Turns, w.SystemPrompts, w.SystemTokens, w.OutputTokens, o.concurrency)
	var reps []*loadgen.Report
	for _, pol := range o.policies {
		rep, err := run(ctx, &o, w, pol)
		if err != nil {
			log.Fatalf("--policy %s: %v", pol, err)
		}
		reps = append(reps, rep)
	}
	fmt.Println()
	loadgen.PrintCompare(os.Stdout, reps...)
	if len(reps) == 2 {
		a, b := reps[0], reps[1]
		fmt.Printf("\n%s against %s: TTFT p50 %.0f -> %.0f ms, p99 %.0f -> %.0f ms; cached share of prompt tokens %.2f -> %.2f; %d -> %d of %d later turns on their conversation's engine.\n",
			b.Label, a.Label, a.TTFT.P50, b.TTFT.P50, a.TTFT.P99, b.TTFT.P99, a.Engine.CachedShare, b.Engine.CachedShare, a.Stayed, b.Stayed, b.LaterTurns)
	}
	if *evalOut != "" {
		// The same comparison in the fleet simulator, over every policy and
		// more load and router replicas than real time allows: seconds.
		cmd := exec.CommandContext(ctx, o.bin, "eval", "--out", *evalOut, "--workload", "multi-turn-completions,shared-prefix",
			"--routers", "3", "--rate-scale", "1,2", "--requests", "4000")
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			log.Fatalf("prefixring eval: %v", err)
		}
		fmt.Printf("\nThe same question in the fleet simulator, every policy at 3 router replicas on two more workloads at two loads (prefixring eval, virtual time; the full study: bin/prefixring eval, docs/study.md):\n  %s", out)
	}
	fmt.Printf("\nDone in %.0f s. The same comparison against your own servers or routers:\n"+
		"  bin/prefixring load --url http://ROUTER1,http://ROUTER2 --workload multi-turn --concurrency 48 --stream --json run.json\n"+
		"  bin/prefixring load --compare before.json run.json\n", time.Since(start).Seconds())
}

// run starts fresh engines and replicas running policy, drives the
// workload through them and stops them.
func run(ctx context.Context, o *options, w workload.MultiTurn, policy string) (*loadgen.Report, error) {
	var procs []*e2eproc.Proc
	defer func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(func() { p.Stop(10 * time.Second) })
		}
		wg.Wait()
	}()
	logf := func(name string) func(string) {
		if !o.verbose {
			return nil
		}
		return func(line string) { log.Print(name, ": ", line) }
	}
	engs, err := e2eproc.LaunchEngines(o.bin, o.engines, logf, "--kv-blocks", strconv.Itoa(o.kvBlocks))
	procs = append(procs, engs...)
	if err != nil {
		return nil, err
	}
	var engines []string
	for _, p := range engs {
		engines = append(engines, p.URL)
	}
	reps, err := e2eproc.LaunchReplicas(ctx, o.bin, o.replicas, engines, logf, "--policy", policy)
	procs = append(procs, reps...)
	if err != nil {
		return nil, err
	}
	var routers []string
	for _, p := range reps {
		routers = append(routers, p.URL)
	}
	sessions, err := w.Sessions()
	if err != nil {
		return nil, err
	}
	cfg := loadgen.DefaultConfig()
	cfg.URLs, cfg.EngineMetrics, cfg.Stream = routers, engines, true
	cfg.Concurrency, cfg.ThinkScale = o.concurrency, o.thinkScale
	if loadgen.IsTerminal(os.Stderr) {
		cfg.Progress = os.Stderr
	}
	fmt.Printf("--policy %s: ", policy)
	if cfg.Progress != nil {
		fmt.Println()
	}
	rep, err := loadgen.Run(ctx, cfg, sessions)
	if err != nil {
		return nil, err
	}
	rep.Label, rep.Workload = policy, "multi-turn"
	if ctx.Err() != nil {
		return nil, errors.New("interrupted")
	}
	if rep.Failed() > 0 {
		return nil, fmt.Errorf("%d of %d requests failed: %v", rep.Failed(), rep.Requests, rep.FirstErrors)
	}
	fmt.Printf("%d requests in %.1f s, TTFT p50 %.0f ms\n", rep.Requests, rep.Duration, rep.TTFT.P50)
	if o.jsonDir != "" {
		if err := os.MkdirAll(o.jsonDir, 0o755); err != nil {
			return nil, err
		}
		if err := rep.WriteJSON(filepath.Join(o.jsonDir, policy+".json")); err != nil {
			return nil, err
		}
		if err := rep.WriteSamples(filepath.Join(o.jsonDir, policy+".samples.jsonl")); err != nil {
			return nil, err
		}
		// The engines' URLs, which the ring hashes: `prefixring eval
		// --workload demo --kv-blocks 1000 --seeds 1 --endpoint-urls
		// $(cat POLICY.engines)` replays this run's placement in virtual
		// time.
		if err := os.WriteFile(filepath.Join(o.jsonDir, policy+".engines"), []byte(strings.Join(engines, ",")+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	return rep, nil
}
