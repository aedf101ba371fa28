package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/workload"
)

// Config configures a fleet.
type Config struct {
	// Engines is the number of engines; they are named [Config.IDs].
	Engines int
	// Names, when set, names the engines, Engines of them, distinct: the
	// endpoint IDs the picker routes to and hashes. A real fleet's IDs
	// (serve's canonical URLs) replay its placement. Nil:
	// EndpointIDs(Engines).
	Names []string
	// Engine configures every engine.
	Engine engine.Config
	// Slowdown, by engine index, makes those engines that many times
	// slower than Engine says (engine.Config.Slowdown): a degraded GPU or
	// a noisy neighbour in a fleet of healthy ones.
	Slowdown map[int]float64
	// Picker routes requests. Its endpoints must be [Config.IDs].
	Picker policy.Picker
	// Key gives a request's affinity key; nil leaves every request unkeyed.
	Key workload.KeyFunc
	// Observe, when set, is called before each request is routed with the
	// engines' scheduler gauges, as a scraper of vLLM's /metrics would
	// read them (vllm:num_requests_waiting, vllm:num_requests_running,
	// vllm:kv_cache_usage_perc), in the order of IDs.
	Observe func(now time.Duration, engines []Gauges)
	// Advance, when set, is called with the virtual time before the fleet
	// applies an engine step's end (its first tokens and finished
	// requests, which settle and release leases), so that a picker that
	// models time (sim/replicas' gossip publications) runs what falls due
	// before it first.
	Advance func(now time.Duration)
	// Concurrency > 0 plays RunSessions' sessions closed loop, as `prefixring
	// load --concurrency` does: that many at a time from the start, whatever
	// their Start, the next (in order) starting when one ends. 0: each
	// session starts at its Start.
	Concurrency int
}

// Gauges are one engine's scheduler gauges.
type Gauges struct {
	ID               string
	Waiting, Running int
	KVUsage          float64
}

// Validate reports a fleet that cannot run.
func (c Config) Validate() error {
	if c.Engines <= 0 {
		return errors.New("sim: Engines must be positive")
	}
	if c.Concurrency < 0 {
		return errors.New("sim: Concurrency must be >= 0")
	}
	if c.Picker == nil {
		return errors.New("sim: Picker is required")
	}
	for i, s := range c.Slowdown {
		if i < 0 || i >= c.Engines {
			return fmt.Errorf("sim: slowdown for engine %d, outside a fleet of %d (0 to %d)", i, c.Engines, c.Engines-1)
		}
		ec := c.Engine
		ec.Slowdown = s
		if err := ec.Validate(); err != nil {
			return fmt.Errorf("sim: engine %d: %w", i, err)
		}
	}
	if c.Names != nil {
		if len(c.Names) != c.Engines {
			return fmt.Errorf("sim: %d names for %d engines", len(c.Names), c.Engines)
		}
		if err := CheckNames(c.Names); err != nil {
			return err
		}
	}
	return c.Engine.Validate()
}

// CheckNames reports a name in names that cannot name an engine: empty,
// or another engine's.
func CheckNames(names []string) error {
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if n == "" || seen[n] {
			return fmt.Errorf("sim: engine name %q is empty or repeated", n)
		}
		seen[n] = true
	}
	return nil
}

// IDs are the engines' names: Names, else EndpointIDs(Engines).
func (c Config) IDs() []string {
	if c.Names != nil {
		return c.Names
	}
	return EndpointIDs(c.Engines)
}

// EndpointIDs names n engines "engine-0" ... "engine-<n-1>".
func EndpointIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("engine-%d", i)
	}
	return ids
}

// Record is what happened to one request. Durations are zero for a request
// that was rejected (Err is set).
type Record struct {
	Index           int           `json:"index"`    // position in the workload
	Endpoint        string        `json:"endpoint"` // engine the picker chose
	Decision        string        `json:"decision"` // the picker's decision (home, spill, fallback)
	Arrival         time.Duration `json:"arrival_ns"`
	QueueDelay      time.Duration `json:"queue_delay_ns"` // arrival to first scheduling
	TTFT            time.Duration `json:"ttft_ns"`        // arrival to first token
	E2E             time.Duration `json:"e2e_ns"`         // arrival to last token
	PromptTokens    int           `json:"prompt_tokens"`
	OutputTokens    int           `json:"output_tokens"`
	CachedTokens    int           `json:"cached_tokens"`    // prompt tokens found in the engine's prefix cache
	PrefillComputed int           `json:"prefill_computed"` // tokens computed by prefill, recomputation included
	Preemptions     int           `json:"preemptions"`
	Err             string        `json:"error,omitempty"`
	Keyed           bool          `json:"keyed"` // the picker was given a key
	// Session and Turn place a request of RunSessions in its session;
	// Session is -1 for Run's requests.
	Session int `json:"session"`
	Turn    int `json:"turn"`
}

// Result is a whole run.
type Result struct {
	Records []Record      // in workload order
	End     time.Duration // virtual time when the last request finished
	Steps   int           // engine steps, all engines together
}

// Run replays reqs (in arrival order; ties keep workload order) through the
// fleet and returns one record per request.
func Run(cfg Config, reqs []workload.Request) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f, err := newFleet(cfg, len(reqs))
	if err != nil {
		return nil, err
	}
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(reqs[a].Arrival, reqs[b].Arrival)
	})
	next := 0
	for {
		ei, end := f.nextStepEnd()
		if next < len(order) && (ei < 0 || reqs[order[next]].Arrival <= end) {
			f.arrive(order[next], &reqs[order[next]])
			next++
			continue
		}
		if ei < 0 {
			break
		}
		f.endStep(ei, end)
	}
	return &Result{Records: f.records, End: f.now, Steps: f.steps}, nil
}
