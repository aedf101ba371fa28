package eval

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/workload"
)

// WorkloadNames are the built-in workloads of the study, besides
// trace:PATH and trace-recorded:PATH.
var WorkloadNames = []string{"shared-prefix", "multi-turn", "multi-turn-completions", "agentic"}

// ClosedLoopNames are the built-in workloads that run closed loop (a
// fixed number of sessions at a time), outside the default study: "demo"
// is `make demo`'s shape, for --endpoints 4 --kv-blocks 1000 --routers 3.
var ClosedLoopNames = []string{"demo"}

// knownWorkload reports a built-in workload's name.
func knownWorkload(name string) bool {
	return slices.Contains(WorkloadNames, name) || slices.Contains(ClosedLoopNames, name)
}

// Concurrency is the sessions a closed-loop workload keeps in flight (0:
// open loop, each session at its Start).
func Concurrency(name string) int { return builtins[name].concurrency }

// isTrace reports a trace workload: trace:PATH or trace-recorded:PATH.
func isTrace(name string) bool {
	_, _, ok := workload.TraceName(name)
	return ok
}

// Duration is how long the built-in workloads send new sessions.
const Duration = 60 * time.Second

// builtin is a built-in workload: the workload package's shape, and its
// session start rate at rate scale 1.
type builtin struct {
	rate  float64 // sessions per second at rate ×1
	turns int     // requests per session
	// sessions, when above 0, fixes the number of sessions whatever the
	// rate; concurrency runs them closed loop, that many at a time.
	count, concurrency int
	sessions           func(n int, rate float64, seed uint64) ([]workload.Session, error)
	// stream: the clients stream (the router settles P at the first
	// byte); text: the text kinds, whose token ratios the engine's counts
	// depart by (tokens.go).
	stream bool
	text   textMix
}

// builtins are sized so that rate ×1 is a light load on 8 simulated H100
// engines (the calibrated Llama-3.1-8B profile), ×2 about what least-load
// serves before its queues grow, and ×4 twice that (docs/study.md,
// "Workloads").
var builtins = map[string]builtin{
	// SGLang's generated-shared-prefix benchmark shape (64 groups of
	// 2048-token system prompts, 128-token questions, 256 tokens out),
	// with a Zipf(1) skew over groups: hot system prompts.
	"shared-prefix": {rate: 120, turns: 1, stream: true, text: mixedText, sessions: func(n int, rate float64, seed uint64) ([]workload.Session, error) {
		w := workload.DefaultSharedPrefix()
		w.PromptsPerGroup, w.Skew, w.Rate, w.Seed = 1, 1, rate, seed
		w.Groups = 64
		return w.Stream(n)
	}},
	// Conversations of 6 turns over 8 shared ~200-token system prompts,
	// 128-token questions and answers, 2 s mean think time.
	"multi-turn": {rate: 36, turns: 6, stream: true, text: chatText, sessions: multiTurn(workload.Chat)},
	// The same conversations over /v1/completions: one growing prompt.
	"multi-turn-completions": {rate: 36, turns: 6, text: chatText, sessions: multiTurn(workload.Completions)},
	// `make demo`'s conversations (scripts/demo): 128 of 6 turns over 8
	// shared 1024-token system prompts, 128-token questions, 64-token
	// answers, 200 ms mean think time (2 s × --think-scale 0.1), 48 at a
	// time; the rate scale divides the think time.
	"demo": {rate: 1, turns: 6, count: 128, concurrency: 48, stream: true, text: chatText, sessions: func(n int, _ float64, seed uint64) ([]workload.Session, error) {
		w := workload.DefaultMultiTurn(workload.Chat)
		w.Conversations, w.Turns, w.OutputTokens, w.SystemTokens, w.Seed = n, 6, 64, 1024, seed
		w.Think = 200 * time.Millisecond
		return w.Sessions()
	}},
	// Tool loops of 8 steps over 4 tool sets of ~3000 tokens, 300-token
	// tool results, 500 ms mean tool time.
	"agentic": {rate: 16, turns: 9, text: agentText, sessions: func(n int, rate float64, seed uint64) ([]workload.Session, error) {
		w := workload.DefaultAgentic()
		w.Loops, w.Rate, w.Seed = n, rate, seed
		return w.Sessions()
	}},
}

func multiTurn(api workload.API) func(int, float64, uint64) ([]workload.Session, error) {
	return func(n int, rate float64, seed uint64) ([]workload.Session, error) {
		w := workload.DefaultMultiTurn(api)
		w.Conversations, w.Rate, w.Seed = n, rate, seed
		return w.Sessions()
	}
}

// Workload returns the sessions of a study workload at a rate scale, under
// seed, with at most requests requests when requests > 0. Each session
// says whether it streams and its text's token ratio (tokens.go). A built-in
// workload starts sessions at its rate times rateScale for [Duration], and
// its think times are divided by rateScale, so every request comes
// rateScale times as often; a trace (trace:PATH, Mooncake format) is
// replayed at its own timestamps divided by rateScale, those it shares
// among requests spread over their tick under seed (workload.SpreadTicks)
// unless it is named trace-recorded:PATH.
func Workload(name string, rateScale float64, seed uint64, requests int) ([]workload.Session, error) {
	if isTrace(name) {
		// The whole trace is read and spread, so that its first N are a
		// prefix of it.
		reqs, err := workload.ReadTrace(name, seed)
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		if requests > 0 && len(reqs) > requests {
			reqs = reqs[:requests]
		}
		ss, err := workload.TraceSessions(reqs, rateScale)
		for i := range ss {
			ss[i].Stream = true // a chat service's clients stream
		}
		return ss, err
	}
	b, ok := builtins[name]
	if !ok {
		return nil, fmt.Errorf("eval: unknown workload %q (known: %s, trace:PATH, trace-recorded:PATH)", name, strings.Join(WorkloadNames, ", "))
	}
	rate := b.rate * rateScale
	n := max(1, int(math.Round(rate*Duration.Seconds())))
	if b.count > 0 {
		n = b.count
	}
	if requests > 0 {
		n = max(1, min(n, requests/b.turns))
	}
	ss, err := b.sessions(n, rate, seed)
	if err != nil {
		return nil, err
	}
	for i := range ss {
		for k := range ss[i].Turns {
			ss[i].Turns[k].Think = time.Duration(float64(ss[i].Turns[k].Think) / rateScale)
		}
		ss[i].Stream = b.stream
	}
	scaleTokens(ss, b.text, seed)
	return ss, nil
}

// workloads builds each (workload, rate scale) once per sweep: traces are
// large, and every policy replays the same sessions.
type workloads struct {
	mu     sync.Mutex
	cache  map[string][]workload.Session
	ideals map[string]Ideal
	cap    int
}

// ideal returns IdealOf(reqs, cfg) for a workload whose requests do not
// depend on the policy, computed once per KV capacity (every run's engines
// price steps alike; the capacity decides which requests they refuse).
func (w *workloads) ideal(name string, rateScale float64, seed uint64, reqs []workload.Request, cfg engine.Config) Ideal {
	id := fmt.Sprint(name, "@", rateScale, "#", seed, "/", cfg.Blocks())
	w.mu.Lock()
	v, ok := w.ideals[id]
	w.mu.Unlock()
	if ok {
		return v
	}
	v = IdealOf(reqs, cfg)
	w.mu.Lock()
	if w.ideals == nil {
		w.ideals = map[string]Ideal{}
	}
	w.ideals[id] = v
	w.mu.Unlock()
	return v
}

func (w *workloads) get(name string, rateScale float64, seed uint64) ([]workload.Session, error) {
	id := fmt.Sprint(name, "@", rateScale, "#", seed)
	w.mu.Lock()
	defer w.mu.Unlock()
	if ss, ok := w.cache[id]; ok {
		return ss, nil
	}
	ss, err := Workload(name, rateScale, seed, w.cap)
	if err != nil {
		return nil, err
	}
	w.cache[id] = ss
	return slices.Clip(ss), nil
}
