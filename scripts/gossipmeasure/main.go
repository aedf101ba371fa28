// Command gossipmeasure runs the gossip measures of docs/gossip-measures.md
// in the fleet simulator: decision agreement, hit rate against router
// replica count with and without gossip, the staleness sweep, and the view
// modes (exact, shared) side by side. The replicas run the production
// balancer, view and merge code (package sim/replicas).
//
//	go run ./scripts/gossipmeasure            # all tables
//	go run ./scripts/gossipmeasure -table sweep
//	go run ./scripts/gossipmeasure -table modes -latency 500us
package main

import (
	"flag"
	"fmt"
	"github.com/prefixring/prefixring/gossip/core"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/fleet"
	"github.com/prefixring/prefixring/sim/replicas"
	"github.com/prefixring/prefixring/sim/workload"
)

var (
	table    = flag.String("table", "all", "agreement, replicas, sweep, modes, bound, factor or all")
	engines  = flag.Int("engines", 8, "simulated vLLM engines")
	requests = flag.Int("requests", 6000, "requests per run")
	rate     = flag.Float64("rate", 40, "arrivals per second")
	kvBlocks = flag.Int("kv-blocks", 6000, "KV cache blocks per engine (16 tokens each)")
	seed     = flag.Uint64("seed", 1, "workload seed")
	skew     = flag.Float64("skew", 1, "Zipf exponent of group popularity (0: uniform)")
	sweepR   = flag.Int("sweep-replicas", 8, "replicas in the staleness sweep")
	modesR   = flag.Int("modes-replicas", 3, "replicas in the view-mode table")
	view     = flag.String("view", "", "view mode of the agreement, replicas and sweep tables: shared, exact or overlay (default: the production default)")
	latency  = flag.Duration("latency", 0, "delivery latency of a publication to the other replicas")
	minBound = flag.Int64("min-bound", ring.DefaultMinRequests, "the bound's floor, requests per endpoint (ring.Config.MinBound)")
	bounds   = flag.String("bounds", "0,2,4,8,16", "floors of the bound table")
	factor   = flag.Float64("load-factor", ring.DefaultConfig().LoadFactor, "the bound's load factor c")
	factors  = flag.String("factors", "1.25,1.5,2,3,4", "load factors of the factor table")
)

func main() {
	flag.Parse()
	w := workload.SharedPrefixTokens{Groups: 64, Skew: *skew, SystemTokens: 4096, UserTokens: 256, OutputTokens: 128,
		Rate: *rate, Requests: *requests, Seed: *seed}
	fmt.Printf("workload: %+v; %d engines (%s, %d KV blocks each); load factor %.2f; key = first 256 tokens\n\n",
		w, *engines, engine.DefaultConfig().Profile.Name, *kvBlocks, ring.DefaultConfig().LoadFactor)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	defer tw.Flush()
	fmt.Fprintln(tw, "table\treplicas\tgossip\tview\tinterval\tagreement\thit rate\thit/hit(1)\tspill+fallback\tmean in-flight/engine\tTTFT p50 ms\tTTFT p99 ms\tover bound\tmax excess\t")
	vm, err := core.ParseViewMode(*view)
	if err != nil {
		log.Fatal(err)
	}
	// hit(1): one router, which sees its own placements at once.
	base := run(w, setup{replicas: 1, gossip: true, view: vm, interval: 100 * time.Millisecond})
	if *table == "agreement" || *table == "all" {
		print(tw, "agreement", run(w, setup{replicas: 3, gossip: true, view: vm, interval: 100 * time.Millisecond}), base)
	}
	if *table == "replicas" || *table == "all" {
		for _, r := range []int{1, 2, 4, 8} {
			print(tw, "replicas", run(w, setup{replicas: r, gossip: true, view: vm, interval: 100 * time.Millisecond}), base)
			print(tw, "replicas", run(w, setup{replicas: r}), base)
		}
	}
	if *table == "sweep" || *table == "all" {
		for _, iv := range []time.Duration{10, 20, 50, 100, 200, 500, 1000, 2000, 5000} {
			print(tw, "sweep", run(w, setup{replicas: *sweepR, gossip: true, view: vm, interval: iv * time.Millisecond}), base)
		}
	}
	if *table == "bound" || *table == "all" {
		for _, f := range strings.Split(*bounds, ",") {
			mb, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				log.Fatal(err)
			}
			*minBound = mb
			print(tw, "bound "+f, run(w, setup{replicas: *modesR, gossip: true, view: vm, interval: 100 * time.Millisecond}), base)
		}
	}
	if *table == "factor" || *table == "all" {
		for _, f := range strings.Split(*factors, ",") {
			c, err := strconv.ParseFloat(f, 64)
			if err != nil {
				log.Fatal(err)
			}
			*factor = c
			print(tw, "c "+f, run(w, setup{replicas: *modesR, gossip: true, view: vm, interval: 100 * time.Millisecond}), base)
		}
	}
	if *table == "modes" || *table == "all" {
		for _, iv := range []time.Duration{10, 20, 50, 100, 200, 500, 1000} {
			for _, m := range []setup{{view: core.ViewExact}, {view: core.ViewShared}, {view: core.ViewOverlay}} {
				m.replicas, m.gossip, m.interval = *modesR, true, iv*time.Millisecond
				print(tw, "modes", run(w, m), base)
			}
		}
	}
}

// setup is one configuration of the replicas.
type setup struct {
	replicas int
	gossip   bool
	view     core.ViewMode
	interval time.Duration
}

type result struct {
	setup
	over              float64
	maxExcess         int64
	agreement, hit    float64
	offHome, inflight float64
	p50, p99          time.Duration
}

func run(w workload.SharedPrefixTokens, su setup) result {
	reqs, _, err := w.Generate()
	if err != nil {
		log.Fatal(err)
	}
	// The bound counts requests here: this script's workload carries
	// token ids and no request bodies, and its tables are in requests.
	rc := ring.DefaultConfig()
	rc.Signal, rc.MinBound, rc.LoadFactor = ring.SignalRequests, *minBound, *factor
	p, err := replicas.New(replicas.Config{Replicas: su.replicas, Endpoints: fleet.EndpointIDs(*engines),
		Ring: rc, Gossip: su.gossip, Interval: su.interval, Latency: *latency,
		View: su.view})
	if err != nil {
		log.Fatal(err)
	}
	ec := engine.DefaultConfig()
	ec.NumBlocks = *kvBlocks
	res, err := fleet.Run(fleet.Config{Engines: *engines, Engine: ec, Picker: p, Key: p.Key(workload.PrefixKey(256)), Advance: p.AdvanceTo}, reqs)
	if err != nil {
		log.Fatal(err)
	}
	var cached, prompt, off int
	var ttft []time.Duration
	var busy time.Duration
	for _, r := range res.Records {
		if r.Err != "" {
			continue
		}
		cached += r.CachedTokens
		prompt += r.PromptTokens
		if r.Decision != "home" {
			off++
		}
		ttft = append(ttft, r.TTFT)
	}
	slices.Sort(ttft)
	for _, r := range res.Records {
		busy += r.E2E
	}
	return result{
		setup: su, agreement: p.Agreement(), over: p.OverBound(), maxExcess: p.MaxExcess,
		hit: float64(cached) / float64(prompt), offHome: float64(off) / float64(len(ttft)),
		inflight: float64(busy) / float64(res.End) / float64(*engines),
		p50:      ttft[len(ttft)/2], p99: ttft[len(ttft)*99/100],
	}
}

func print(tw *tabwriter.Writer, name string, r, base result) {
	iv, vm := "-", "-"
	if r.gossip {
		iv, vm = r.interval.String(), string(r.view)
	}
	fmt.Fprintf(tw, "%s\t%d\t%v\t%s\t%s\t%.4f\t%.4f\t%.4f\t%.4f\t%.1f\t%.0f\t%.0f\t%.4f\t%d\t\n", name, r.replicas, r.gossip, vm, iv,
		r.agreement, r.hit, r.hit/base.hit, r.offHome, r.inflight,
		float64(r.p50)/float64(time.Millisecond), float64(r.p99)/float64(time.Millisecond), r.over, r.maxExcess)
	tw.Flush()
}
