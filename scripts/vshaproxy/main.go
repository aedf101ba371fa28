// Command vshaproxy is `make vs-haproxy`: prefixring against HAProxy 2.6 in
// real time (the study's goal 5, docs/vs-haproxy.md). It starts, on 127.0.0.1, eight simulated
// vLLM engines (`prefixring sim`, the default Llama-3.1-8B-on-H100 profile
// and KV cache) and in front of them one system at a time:
//
//   - prefixring ×1 and ×3 (the default policy, the replicas gossiping
//     under a fresh --gossip-key),
//   - HAProxy CHWBL ×1 and ×3 (independent haproxy processes, no shared
//     state: `balance hash req.body,bytes(0,N)`, `hash-type consistent`,
//     `hash-balance-factor 125`),
//   - HAProxy round-robin ×1, the floor.
//
// It drives each workload through the system's replicas in turn, as DNS
// round-robin spreads clients (streamed, so TTFT is the client's): the
// closed-loop multi-turn chat workload and the Mooncake conversation trace
// at its own timestamps, rate-scaled. Every system runs on fresh engines,
// the same workload seed within a round, and each round starts with the
// next system so that drift on the machine hits all of them alike. It
// prints TTFT (mean, p50, p95, p99) ranges over the rounds with the
// engines' hit rate, spread and preemptions, and writes every run as JSON.
// Every process it starts is stopped at the end, also on Ctrl-C.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/prefixring/prefixring/internal/e2eproc"
	"github.com/prefixring/prefixring/loadgen"
	"github.com/prefixring/prefixring/sim/workload"
)

type options struct {
	bin, haproxy     string
	engines          int
	kvBlocks         int
	rounds           int
	systems          []system
	workloads        []string
	hashBytes        int
	policy           string
	serveFlags       []string
	seed             uint64
	requests         int
	conversations    int
	concurrency      int
	thinkScale       float64
	trace            string
	traceRequests    int
	traceRateScale   float64
	traceRecorded    bool
	out              string
	verbose          bool
	haproxyTimeoutS  int
	requestTimeout   time.Duration
	printHAProxyConf string
}

// system is one router set-up: prefixring, haproxy (CHWBL) or haproxy-rr,
// with its replica count.
type system struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Replicas int    `json:"replicas"`
}

var systemRe = regexp.MustCompile(`^(prefixring|haproxy|haproxy-rr)-x([1-9][0-9]?)$`)

func parseSystem(s string) (system, error) {
	m := systemRe.FindStringSubmatch(s)
	if m == nil {
		return system{}, fmt.Errorf("system %q: want prefixring-xN, haproxy-xN or haproxy-rr-xN", s)
	}
	n, _ := strconv.Atoi(m[2])
	return system{Name: s, Kind: m[1], Replicas: n}, nil
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/prefixring", "the prefixring binary (engines and routers)")
	flag.StringVar(&o.haproxy, "haproxy", "haproxy", "the haproxy binary (Debian 12's is 2.6)")
	flag.IntVar(&o.engines, "engines", 8, "simulated engines")
	flag.IntVar(&o.kvBlocks, "kv-blocks", 0, "KV cache of each engine in 16-token blocks (0: the H100 profile's)")
	flag.IntVar(&o.rounds, "runs", 2, "runs of every system on every workload (rounds; each starts with the next system)")
	sys := flag.String("systems", "prefixring-x1,haproxy-x1,prefixring-x3,haproxy-x3,haproxy-rr-x1", "systems to compare: prefixring-xN, haproxy-xN (CHWBL), haproxy-rr-xN (round-robin)")
	wls := flag.String("workloads", "multi-turn,trace", "workloads: multi-turn (closed loop) and trace (the Mooncake conversation trace, open loop)")
	flag.IntVar(&o.hashBytes, "hash-bytes", 600, "HAProxy CHWBL hashes the body's first this many bytes")
	flag.StringVar(&o.policy, "policy", "", "prefixring's --policy (empty: its default)")
	serveFlags := flag.String("serve-flags", "", "more flags for every prefixring replica, space-separated (e.g. \"--gossip-interval 100ms\")")
	flag.Uint64Var(&o.seed, "seed", 1, "workload seed of the first round (round r uses seed+r)")
	flag.IntVar(&o.requests, "requests", 0, "cap every run at this many requests (0: the whole multi-turn workload, --trace-requests of the trace)")
	flag.IntVar(&o.conversations, "conversations", 128, "multi-turn: conversations (6 turns each)")
	flag.IntVar(&o.concurrency, "concurrency", 48, "multi-turn: conversations in flight at once (closed loop)")
	flag.Float64Var(&o.thinkScale, "think-scale", 0.1, "multi-turn: multiplies the user's 2 s mean pause between turns")
	flag.StringVar(&o.trace, "trace", "../shared/traces/mooncake/conversation_trace.jsonl", "the Mooncake conversation trace")
	flag.IntVar(&o.traceRequests, "trace-requests", 1000, "trace: replay its first this many requests")
	flag.Float64Var(&o.traceRateScale, "trace-rate-scale", 2, "trace: replay speed (2: its timestamps halved; 1000 requests take about 165 s)")
	flag.BoolVar(&o.traceRecorded, "trace-recorded", false, "trace: replay every request at its timestamp as written (default: a timestamp's requests spread over its tick, under the run's seed)")
	flag.IntVar(&o.haproxyTimeoutS, "haproxy-timeout", 600, "HAProxy's client, server and queue timeouts, in seconds")
	flag.DurationVar(&o.requestTimeout, "timeout", 5*time.Minute, "limit of one request at the client")
	flag.StringVar(&o.out, "out", "out/vs-haproxy", "directory for results.json and every run's load report")
	flag.BoolVar(&o.verbose, "v", false, "show the processes' logs")
	flag.StringVar(&o.printHAProxyConf, "print-haproxy-config", "", "print the HAProxy config of this system (haproxy-x1 or haproxy-rr-x1) for example ports, and exit")
	flag.Parse()
	o.serveFlags = strings.Fields(*serveFlags)
	log.SetFlags(0)
	log.SetPrefix("vs-haproxy: ")

	if o.printHAProxyConf != "" {
		s, err := parseSystem(o.printHAProxyConf)
		if err != nil || s.Kind == "prefixring" {
			log.Fatalf("--print-haproxy-config %q: want haproxy-x1 or haproxy-rr-x1", o.printHAProxyConf)
		}
		var eps []string
		for i := range o.engines {
			eps = append(eps, fmt.Sprintf("http://127.0.0.1:%d", 8000+i))
		}
		fmt.Print(haproxyConfig(&o, s.Kind, 8080, eps))
		return
	}
	for _, s := range loadgen.SplitList(*sys) {
		ps, err := parseSystem(s)
		if err != nil {
			log.Fatal(err)
		}
		o.systems = append(o.systems, ps)
	}
	o.workloads = loadgen.SplitList(*wls)
	for _, w := range o.workloads {
		if w != "multi-turn" && w != "trace" {
			log.Fatalf("workload %q: want multi-turn or trace", w)
		}
	}
	asked := false
	flag.Visit(func(f *flag.Flag) { asked = asked || f.Name == "workloads" })
	var note string
	var err error
	if o.workloads, note, err = checkTrace(o.workloads, o.trace, asked); err != nil {
		log.Fatal(err)
	}
	if note != "" {
		fmt.Println(note)
	}
	if len(o.systems) == 0 || len(o.workloads) == 0 || o.rounds < 1 || o.engines < 1 || o.hashBytes < 1 {
		log.Fatal("need systems, workloads, --runs >= 1, --engines >= 1 and --hash-bytes >= 1")
	}
	if slices.ContainsFunc(o.systems, func(s system) bool { return s.Kind != "prefixring" }) {
		if _, err := exec.LookPath(o.haproxy); err != nil {
			log.Fatalf("%s not found: apt-get install haproxy (Debian 12: 2.6)", o.haproxy)
		}
	}
	if err := os.MkdirAll(filepath.Join(o.out, "runs"), 0o755); err != nil {
		log.Fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	hv := haproxyVersion(o.haproxy)
	fmt.Printf("%d simulated engines (vLLM, Llama-3.1-8B on an H100, KV %s); %s; %d runs of each system, alternating\n",
		o.engines, kvString(o.kvBlocks), hv, o.rounds)
	var results []result
	for r := range o.rounds {
		for _, wl := range o.workloads {
			n := len(o.systems)
			for i := range n {
				s := o.systems[(i+r)%n]
				res, err := runOne(ctx, &o, s, wl, r)
				if err != nil {
					log.Fatalf("run %d, %s, %s: %v", r+1, wl, s.Name, err)
				}
				results = append(results, res)
			}
		}
	}
	sum := summarize(&o, results)
	fmt.Println()
	printTable(os.Stdout, &o, sum)
	doc := struct {
		Date     string    `json:"date"`
		Command  string    `json:"command"`
		HAProxy  string    `json:"haproxy"`
		Engines  int       `json:"engines"`
		KVBlocks int       `json:"kv_blocks"`
		Load     string    `json:"load_average_at_end"`
		Summary  []summary `json:"summary"`
		Runs     []result  `json:"runs"`
	}{time.Now().UTC().Format(time.RFC3339), strings.Join(os.Args, " "), hv, o.engines, o.kvBlocks, loadAvg(), sum, results}
	b, _ := json.MarshalIndent(doc, "", "  ")
	p := filepath.Join(o.out, "results.json")
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\nDone in %.0f s; %s and %s/runs/*.json written.\n", time.Since(start).Seconds(), p, o.out)
}

// checkTrace looks for the Mooncake trace before any run: it lives in
// shared/, beside the repository, not in it. Missing, it is dropped from
// the default workloads with a note, and refused when -workloads asked for
// it, so that neither case dies at the first trace run, after every
// system's multi-turn runs.
func checkTrace(workloads []string, trace string, asked bool) ([]string, string, error) {
	if !slices.Contains(workloads, "trace") {
		return workloads, "", nil
	}
	_, err := os.Stat(trace)
	switch {
	case err == nil:
		return workloads, "", nil
	case asked || len(workloads) == 1:
		return nil, "", fmt.Errorf("the trace workload: %v (give -trace PATH)", err)
	}
	kept := slices.DeleteFunc(slices.Clone(workloads), func(w string) bool { return w == "trace" })
	return kept, fmt.Sprintf("no Mooncake trace at %s (-trace): running %s alone", trace, strings.Join(kept, ",")), nil
}

func kvString(blocks int) string {
	if blocks == 0 {
		return "the profile's"
	}
	return fmt.Sprintf("%d blocks of 16 tokens", blocks)
}

func haproxyVersion(bin string) string {
	out, err := exec.Command(bin, "-v").Output()
	if err != nil {
		return "haproxy: " + err.Error()
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// result is one run of one system on one workload.
type result struct {
	Workload string         `json:"workload"`
	System   string         `json:"system"`
	Run      int            `json:"run"`
	Seed     uint64         `json:"seed"`
	Requests int            `json:"requests"`
	OK       int            `json:"ok"`
	Errors   map[string]int `json:"errors"`
	TTFT     loadgen.Dist   `json:"ttft_ms"`
	E2E      loadgen.Dist   `json:"e2e_ms"`
	// Hit is the engines' prefix-cache hit rate over the run (their own
	// counters: hits / queried prompt tokens).
	Hit float64 `json:"hit"`
	// EngineRequests are the requests each engine completed, in engine
	// order; Imbalance the largest over the mean.
	EngineRequests []float64 `json:"engine_requests"`
	Imbalance      float64   `json:"imbalance"`
	Preemptions    float64   `json:"preemptions"`
	// Decisions are prefixring's routing decisions summed over its
	// replicas (home, spill, fallback); SpillShare spill over all.
	Decisions  map[string]float64 `json:"decisions,omitempty"`
	SpillShare float64            `json:"spill_share"`
	// SimLagMs is the engines' mean step lateness on the wall clock
	// (prefixring_sim_step_lag_seconds): large values mean the machine
	// could not keep the simulated engines in real time.
	SimLagMs float64 `json:"sim_lag_ms"`
	// EngineTTFTMs is the engines' own mean TTFT over the run, from their
	// arrival to their first token (vllm:time_to_first_token_seconds);
	// PathMs the client's mean TTFT less it: what the way through the
	// router and back costs a request, on this machine's busy cores.
	EngineTTFTMs float64 `json:"engine_ttft_mean_ms"`
	PathMs       float64 `json:"path_ms"`
	// NewConns counts the requests the load generator sent on a connection
	// opened for them rather than one from its keep-alive pool.
	NewConns int     `json:"new_conns"`
	Duration float64 `json:"duration_s"`
	Report   string  `json:"report"`
}

// runOne starts fresh engines and system s in front of them, drives
// workload wl through s and stops every process.
func runOne(ctx context.Context, o *options, s system, wl string, round int) (res result, err error) {
	var procs []*e2eproc.Proc
	var tmp string
	defer func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(func() { p.Stop(10 * time.Second) })
		}
		wg.Wait()
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
	}()
	logf := func(name string) func(string) {
		if !o.verbose {
			return nil
		}
		return func(line string) { log.Print(name, ": ", line) }
	}
	var kv []string
	if o.kvBlocks > 0 {
		kv = []string{"--kv-blocks", strconv.Itoa(o.kvBlocks)}
	}
	engs, err := e2eproc.LaunchEngines(o.bin, o.engines, logf, kv...)
	procs = append(procs, engs...)
	if err != nil {
		return res, err
	}
	var engines []string
	for _, p := range engs {
		engines = append(engines, p.URL)
	}
	if ctx.Err() != nil {
		return res, errors.New("interrupted")
	}
	var urls, admins []string
	switch s.Kind {
	case "prefixring":
		var extra []string
		if o.policy != "" {
			extra = []string{"--policy", o.policy}
		}
		extra = append(extra, o.serveFlags...)
		reps, err := e2eproc.LaunchReplicas(ctx, o.bin, s.Replicas, engines, logf, extra...)
		procs = append(procs, reps...)
		if err != nil {
			return res, err
		}
		for _, p := range reps {
			urls, admins = append(urls, p.URL), append(admins, p.Admin)
		}
	default:
		if tmp, err = os.MkdirTemp("", "vs-haproxy-"); err != nil {
			return res, err
		}
		for i := range s.Replicas {
			port, err := freePort()
			if err != nil {
				return res, err
			}
			cfg := filepath.Join(tmp, fmt.Sprintf("haproxy-%d.cfg", i))
			if err := os.WriteFile(cfg, []byte(haproxyConfig(o, s.Kind, port, engines)), 0o644); err != nil {
				return res, err
			}
			if out, err := exec.Command(o.haproxy, "-c", "-q", "-f", cfg).CombinedOutput(); err != nil {
				return res, fmt.Errorf("haproxy rejected %s: %v: %s", cfg, err, out)
			}
			name := fmt.Sprintf("haproxy-%d", i)
			// -db: foreground, no daemon; stopped like the others.
			p, _, err := e2eproc.Launch(o.haproxy, name, []string{"-db", "-f", cfg}, logf(name))
			if p != nil {
				procs = append(procs, p)
			}
			if err != nil {
				return res, err
			}
			u := fmt.Sprintf("http://127.0.0.1:%d", port)
			if err := waitHTTP(ctx, u+"/v1/models", p); err != nil {
				return res, fmt.Errorf("%s: %w", name, err)
			}
			urls = append(urls, u)
		}
	}

	seed := o.seed + uint64(round)
	var sessions []workload.Session
	cfg := loadgen.DefaultConfig()
	cfg.URLs, cfg.EngineMetrics, cfg.Stream, cfg.Seed, cfg.Timeout = urls, engines, true, seed, o.requestTimeout
	cfg.Requests = o.requests
	switch wl {
	case "multi-turn":
		w := workload.DefaultMultiTurn(workload.Chat)
		w.Conversations, w.Seed = o.conversations, seed
		if sessions, err = w.Sessions(); err != nil {
			return res, err
		}
		cfg.Concurrency, cfg.ThinkScale = o.concurrency, o.thinkScale
	case "trace":
		// The trace is one stream of requests: every round replays the
		// same ones, the seed drawing where in its tick each arrives.
		name := workload.TracePrefix + o.trace
		if o.traceRecorded {
			name = workload.RecordedTracePrefix + o.trace
		}
		if sessions, err = workload.Named(name, seed, o.traceRateScale); err != nil {
			return res, err
		}
		if cfg.Requests == 0 {
			cfg.Requests = o.traceRequests
		}
	}
	if loadgen.IsTerminal(os.Stderr) {
		cfg.Progress = os.Stderr
	}
	before, err := scrapeEngines(ctx, engines)
	if err != nil {
		return res, err
	}
	fmt.Printf("run %d, %s, %s: ", round+1, wl, s.Name)
	if cfg.Progress != nil {
		fmt.Println()
	}
	rep, err := loadgen.Run(ctx, cfg, sessions)
	if err != nil {
		return res, err
	}
	if ctx.Err() != nil {
		return res, errors.New("interrupted")
	}
	after, err := scrapeEngines(ctx, engines)
	if err != nil {
		return res, err
	}
	rep.Label, rep.Workload = s.Name, wl
	res = result{Workload: wl, System: s.Name, Run: round + 1, Seed: seed, Requests: rep.Requests, OK: rep.OK,
		Errors: rep.Errors, TTFT: rep.TTFT, E2E: rep.E2E, Duration: rep.Duration}
	if rep.Engine != nil {
		res.Hit = rep.Engine.CachedShare
	}
	var steps, lag, sumReq, firsts, ttft float64
	for i := range engines {
		d := after[i].minus(before[i])
		res.EngineRequests = append(res.EngineRequests, d.requests)
		res.Preemptions += d.preemptions
		steps, lag, sumReq = steps+d.steps, lag+d.lag, sumReq+d.requests
		firsts, ttft = firsts+d.firsts, ttft+d.ttft
		if d.requests > res.Imbalance {
			res.Imbalance = d.requests
		}
	}
	if sumReq > 0 {
		res.Imbalance /= sumReq / float64(len(engines))
	}
	if steps > 0 {
		res.SimLagMs = lag / steps * 1000
	}
	if firsts > 0 {
		res.EngineTTFTMs = ttft / firsts * 1000
		res.PathMs = rep.TTFT.Mean - res.EngineTTFTMs
	}
	res.NewConns = rep.NewConns
	if s.Kind == "prefixring" {
		if res.Decisions, err = scrapeDecisions(ctx, admins); err != nil {
			return res, err
		}
		var all float64
		for _, v := range res.Decisions {
			all += v
		}
		if all > 0 {
			res.SpillShare = res.Decisions["spill"] / all
		}
	}
	res.Report = filepath.Join(o.out, "runs", fmt.Sprintf("%s-%s-run%d.json", wl, s.Name, round+1))
	if err := rep.WriteJSON(res.Report); err != nil {
		return res, err
	}
	if err := rep.WriteSamples(strings.TrimSuffix(res.Report, ".json") + ".samples.jsonl"); err != nil {
		return res, err
	}
	fmt.Printf("%d/%d ok in %.0f s: TTFT mean %.0f ms (engines' %.0f ms, path %.1f ms), p95 %.0f ms; hit %.3f; engines max/mean %.2f; preemptions %.0f; spill %.3f; new connections %d; sim lag %.1f ms\n",
		rep.OK, rep.Requests, rep.Duration, rep.TTFT.Mean, res.EngineTTFTMs, res.PathMs, rep.TTFT.P95, res.Hit, res.Imbalance, res.Preemptions, res.SpillShare, res.NewConns, res.SimLagMs)
	return res, nil
}

// haproxyConfig is the configuration of one HAProxy replica listening on
// 127.0.0.1:port: kind "haproxy" is CHWBL over the body's first
// o.hashBytes bytes, "haproxy-rr" round-robin.
func haproxyConfig(o *options, kind string, port int, engines []string) string {
	var b strings.Builder
	t := o.haproxyTimeoutS
	fmt.Fprintf(&b, "global\n\tmaxconn 4096\n\n")
	fmt.Fprintf(&b, "defaults\n\tmode http\n\ttimeout connect 5s\n\ttimeout client %ds\n\ttimeout server %ds\n\ttimeout queue %ds\n\ttimeout http-request 60s\n\ttimeout http-keep-alive 60s\n\n", t, t, t)
	fmt.Fprintf(&b, "frontend fe\n\tbind 127.0.0.1:%d\n\toption http-no-delay\n\tdefault_backend engines\n\n", port)
	fmt.Fprintf(&b, "backend engines\n\toption http-no-delay\n")
	if kind == "haproxy-rr" {
		fmt.Fprintf(&b, "\tbalance roundrobin\n")
	} else {
		fmt.Fprintf(&b, "\toption http-buffer-request\n\tbalance hash req.body,bytes(0,%d)\n\thash-type consistent\n\thash-balance-factor 125\n", o.hashBytes)
	}
	for i, e := range engines {
		fmt.Fprintf(&b, "\tserver e%d %s check inter 5s\n", i, strings.TrimPrefix(e, "http://"))
	}
	return b.String()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitHTTP waits up to 30 s for u to answer 200, or p to exit.
func waitHTTP(ctx context.Context, u string, p *e2eproc.Proc) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if exited, xerr := p.Exit(0); exited {
			return fmt.Errorf("exited: %v", xerr)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not answer 200 within 30 s", u)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// engineCounters is what one engine's metrics say: steps and their
// summed lateness, first tokens and their summed TTFT (seconds).
type engineCounters struct {
	requests, preemptions, steps, lag, firsts, ttft float64
}

func (a engineCounters) minus(b engineCounters) engineCounters {
	return engineCounters{a.requests - b.requests, a.preemptions - b.preemptions, a.steps - b.steps, a.lag - b.lag,
		a.firsts - b.firsts, a.ttft - b.ttft}
}

func scrapeEngines(ctx context.Context, engines []string) ([]engineCounters, error) {
	var out []engineCounters
	for _, e := range engines {
		fams, err := scrape(ctx, e+"/metrics")
		if err != nil {
			return nil, err
		}
		var c engineCounters
		c.requests = sumFamily(fams, "vllm:request_success_total", nil)
		c.preemptions = sumFamily(fams, "vllm:num_preemptions_total", nil)
		c.steps, c.lag = histogram(fams, "prefixring_sim_step_lag_seconds")
		c.firsts, c.ttft = histogram(fams, "vllm:time_to_first_token_seconds")
		out = append(out, c)
	}
	return out, nil
}

// histogram sums a histogram family's sample counts and sums over its
// series (0, 0 when the family is missing).
func histogram(fams families, name string) (count, sum float64) {
	f, ok := fams[name]
	if !ok {
		return 0, 0
	}
	for _, m := range f.GetMetric() {
		if h := m.GetHistogram(); h != nil {
			count += float64(h.GetSampleCount())
			sum += h.GetSampleSum()
		}
	}
	return count, sum
}

// scrapeDecisions sums prefixring_requests_total by decision over the
// replicas' admin listeners.
func scrapeDecisions(ctx context.Context, admins []string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, a := range admins {
		fams, err := scrape(ctx, a+"/metrics")
		if err != nil {
			return nil, err
		}
		sumFamily(fams, "prefixring_requests_total", func(labels map[string]string, v float64) {
			out[labels["decision"]] += v
		})
	}
	return out, nil
}

type families = map[string]*dto.MetricFamily

func scrape(ctx context.Context, u string) (families, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d", u, resp.StatusCode)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return fams, nil
}

// sumFamily sums a counter or gauge family's values, calling each (when
// set) with every series' labels and value.
func sumFamily(fams families, name string, each func(map[string]string, float64)) float64 {
	f, ok := fams[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		var v float64
		switch {
		case m.GetCounter() != nil:
			v = m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			v = m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			v = m.GetUntyped().GetValue()
		}
		sum += v
		if each != nil {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			each(labels, v)
		}
	}
	return sum
}

// rng is a range over runs.
type rng struct {
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func rangeOf(v []float64) rng {
	if len(v) == 0 {
		return rng{}
	}
	r := rng{Min: math.Inf(1), Max: math.Inf(-1)}
	for _, x := range v {
		r.Min, r.Max, r.Mean = min(r.Min, x), max(r.Max, x), r.Mean+x
	}
	r.Mean /= float64(len(v))
	return r
}

// summary is one system on one workload over its runs.
type summary struct {
	Workload    string `json:"workload"`
	System      string `json:"system"`
	Runs        int    `json:"runs"`
	Mean        rng    `json:"ttft_mean_ms"`
	P50         rng    `json:"ttft_p50_ms"`
	P95         rng    `json:"ttft_p95_ms"`
	P99         rng    `json:"ttft_p99_ms"`
	Hit         rng    `json:"hit"`
	Imbalance   rng    `json:"imbalance"`
	Preemptions rng    `json:"preemptions"`
	Spill       rng    `json:"spill_share"`
	Path        rng    `json:"path_ms"`
	NewConns    rng    `json:"new_conns"`
	Errors      int    `json:"errors"`
	// VsHAProxy, for prefixring-xN beside haproxy-xN: the ratio of the
	// runs' average TTFT mean and p95 to HAProxy's, and whether both are
	// <= 1 (the study's goal 5).
	VsHAProxy *verdict `json:"vs_haproxy,omitempty"`
}

type verdict struct {
	Against   string  `json:"against"`
	MeanRatio float64 `json:"mean_ratio"`
	P95Ratio  float64 `json:"p95_ratio"`
	// Errors and TheirErrors are the failed requests of prefixring's runs
	// and of HAProxy's: a failed request has no TTFT, so a system that
	// failed its slowest requests would look faster. More than HAProxy's
	// is a miss whatever the ratios.
	Errors      int  `json:"errors"`
	TheirErrors int  `json:"their_errors"`
	Met         bool `json:"met"`
}

func summarize(o *options, results []result) []summary {
	var out []summary
	for _, wl := range o.workloads {
		for _, s := range o.systems {
			var mean, p50, p95, p99, hit, imb, pre, spill, path, conns []float64
			sm := summary{Workload: wl, System: s.Name}
			for _, r := range results {
				if r.Workload != wl || r.System != s.Name {
					continue
				}
				sm.Runs++
				mean, p50, p95, p99 = append(mean, r.TTFT.Mean), append(p50, r.TTFT.P50), append(p95, r.TTFT.P95), append(p99, r.TTFT.P99)
				hit, imb, pre, spill = append(hit, r.Hit), append(imb, r.Imbalance), append(pre, r.Preemptions), append(spill, r.SpillShare)
				path, conns = append(path, r.PathMs), append(conns, float64(r.NewConns))
				sm.Errors += r.Requests - r.OK
			}
			sm.Mean, sm.P50, sm.P95, sm.P99 = rangeOf(mean), rangeOf(p50), rangeOf(p95), rangeOf(p99)
			sm.Hit, sm.Imbalance, sm.Preemptions, sm.Spill = rangeOf(hit), rangeOf(imb), rangeOf(pre), rangeOf(spill)
			sm.Path, sm.NewConns = rangeOf(path), rangeOf(conns)
			out = append(out, sm)
		}
	}
	for i := range out {
		s, _ := parseSystem(out[i].System)
		if s.Kind != "prefixring" {
			continue
		}
		want := fmt.Sprintf("haproxy-x%d", s.Replicas)
		for _, h := range out {
			if h.Workload == out[i].Workload && h.System == want && h.Mean.Mean > 0 && h.P95.Mean > 0 {
				v := &verdict{Against: want, MeanRatio: out[i].Mean.Mean / h.Mean.Mean, P95Ratio: out[i].P95.Mean / h.P95.Mean,
					Errors: out[i].Errors, TheirErrors: h.Errors}
				v.Met = v.MeanRatio <= 1 && v.P95Ratio <= 1 && v.Errors <= v.TheirErrors
				out[i].VsHAProxy = v
			}
		}
	}
	return out
}

func fmtRange(r rng, prec int) string {
	if r.Min == r.Max {
		return strconv.FormatFloat(r.Min, 'f', prec, 64)
	}
	return strconv.FormatFloat(r.Min, 'f', prec, 64) + "–" + strconv.FormatFloat(r.Max, 'f', prec, 64)
}

func printTable(w io.Writer, o *options, sum []summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tsystem\truns\tTTFT mean ms\tp50\tp95\tp99\tpath ms\tnew conns\thit\tengines max/mean\tpreemptions\tspill\terrors\tvs HAProxy (mean, p95)\t")
	for _, s := range sum {
		vs := "-"
		if v := s.VsHAProxy; v != nil {
			met := "met"
			switch {
			case v.Errors > v.TheirErrors:
				met = fmt.Sprintf("missed (errors %d > %d)", v.Errors, v.TheirErrors)
			case !v.Met:
				met = "missed"
			}
			vs = fmt.Sprintf("%.2f×, %.2f× %s: %s", v.MeanRatio, v.P95Ratio, v.Against, met)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n", s.Workload, s.System, s.Runs,
			fmtRange(s.Mean, 0), fmtRange(s.P50, 0), fmtRange(s.P95, 0), fmtRange(s.P99, 0), fmtRange(s.Path, 1), fmtRange(s.NewConns, 0), fmtRange(s.Hit, 2),
			fmtRange(s.Imbalance, 2), fmtRange(s.Preemptions, 0), fmtRange(s.Spill, 3), s.Errors, vs)
	}
	_ = tw.Flush()
}
