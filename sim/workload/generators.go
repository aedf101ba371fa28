package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// SharedPrefix is SGLang's "generated shared prefix" benchmark: Groups
// system prompts, each followed by PromptsPerGroup questions of its own, one
// request each. Its defaults are SGLang's (bench_serving.py,
// --dataset-name generated-shared-prefix): 64 groups × 16 prompts, 2048
// system tokens, 128 question tokens, 256 output tokens.
type SharedPrefix struct {
	Groups, PromptsPerGroup                    int
	SystemTokens, QuestionTokens, OutputTokens int
	// Skew > 0 draws each request's group with Zipf weight 1/(k+1)^Skew
	// (hot system prompts); 0 gives every group exactly PromptsPerGroup
	// requests, in random order, as SGLang does.
	Skew float64
	// Rate is the mean arrival rate in requests per second (Poisson); 0
	// sends everything at once.
	Rate float64
	Seed uint64
}

// DefaultSharedPrefix returns SGLang's defaults at 8 requests per second.
func DefaultSharedPrefix() SharedPrefix {
	return SharedPrefix{Groups: 64, PromptsPerGroup: 16, SystemTokens: 2048, QuestionTokens: 128,
		OutputTokens: 256, Rate: 8, Seed: 1}
}

// Validate reports a description Sessions cannot use.
func (w SharedPrefix) Validate() error {
	if w.Groups < 1 || w.PromptsPerGroup < 1 || w.SystemTokens < 0 || w.QuestionTokens < 1 ||
		w.OutputTokens < 1 || w.Skew < 0 || w.Rate < 0 || math.IsNaN(w.Rate) {
		return errors.New("workload: shared-prefix needs groups, prompts per group, question and output tokens >= 1; system tokens, skew and rate >= 0")
	}
	return nil
}

// Sessions returns one single-turn session per request, in arrival order:
// Groups × PromptsPerGroup of them.
func (w SharedPrefix) Sessions() ([]Session, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return w.stream(w.Groups * w.PromptsPerGroup), nil
}

// Stream returns n single-turn sessions in arrival order: with Skew 0, n
// requests spread over the groups as evenly as n allows (in random order);
// with Skew > 0, each request's group drawn by Zipf. PromptsPerGroup is not
// read.
func (w SharedPrefix) Stream(n int) ([]Session, error) {
	w.PromptsPerGroup = max(w.PromptsPerGroup, 1)
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, errors.New("workload: negative request count")
	}
	return w.stream(n), nil
}

func (w SharedPrefix) stream(n int) []Session {
	r := rand.New(rand.NewPCG(w.Seed, 0x5ba7ed))
	groups := make([]int, n)
	if w.Skew == 0 {
		for i := range groups {
			groups[i] = i * w.Groups / max(n, 1)
		}
		r.Shuffle(n, func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
	} else {
		z := newZipf(w.Groups, w.Skew)
		for i := range groups {
			groups[i] = z.draw(r)
		}
	}
	arrivals := poisson(r, n, w.Rate)
	out := make([]Session, n)
	for i, g := range groups {
		out[i] = Session{ID: i, Start: arrivals[i], API: Chat, Group: g,
			System: Words(w.Seed, uint64(g), w.SystemTokens),
			Turns:  []Turn{{User: Words(w.Seed^0xa5, uint64(i), w.QuestionTokens), MaxTokens: w.OutputTokens}}}
	}
	return out
}

// MultiTurn is conversations: each starts with one of SystemPrompts shared
// system prompts and goes on for Turns turns, the user pausing Think (mean
// of an exponential) after each answer. Over API Completions the history is
// one growing prompt string.
type MultiTurn struct {
	Conversations, Turns                   int
	SystemPrompts                          int
	SystemTokens, UserTokens, OutputTokens int
	Think                                  time.Duration
	// Rate is the mean rate of conversation starts per second (Poisson).
	Rate float64
	API  API
	Seed uint64
}

// DefaultMultiTurn returns 64 six-turn chats over 8 system prompts of ~200
// tokens (~800 characters), 128-token questions and answers, 2 s mean think
// time, 2 conversations starting per second.
func DefaultMultiTurn(api API) MultiTurn {
	return MultiTurn{Conversations: 64, Turns: 6, SystemPrompts: 8, SystemTokens: 200, UserTokens: 128,
		OutputTokens: 128, Think: 2 * time.Second, Rate: 2, API: api, Seed: 1}
}

// Validate reports a description Sessions cannot use.
func (w MultiTurn) Validate() error {
	if w.Conversations < 1 || w.Turns < 1 || w.SystemPrompts < 1 || w.SystemTokens < 0 || w.UserTokens < 1 ||
		w.OutputTokens < 1 || w.Think < 0 || !(w.Rate > 0) {
		return errors.New("workload: multi-turn needs conversations, turns, system prompts, user and output tokens >= 1, rate > 0; think and system tokens >= 0")
	}
	return nil
}

// Sessions returns the conversations in start order.
func (w MultiTurn) Sessions() ([]Session, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(w.Seed, 0xc0417))
	starts := poisson(r, w.Conversations, w.Rate)
	out := make([]Session, w.Conversations)
	for c := range out {
		g := r.IntN(w.SystemPrompts)
		s := Session{ID: c, Start: starts[c], API: w.API, Group: g, System: Words(w.Seed, uint64(g), w.SystemTokens)}
		for t := range w.Turns {
			s.Turns = append(s.Turns, Turn{User: Words(w.Seed^0xc0, uint64(c)<<16|uint64(t), w.UserTokens),
				Think: think(r, t, w.Think), MaxTokens: w.OutputTokens})
		}
		out[c] = s
	}
	return out, nil
}

// Agentic is tool loops: each session sends a long tool preamble (one of
// Toolsets tool lists, as JSON, plus a system prompt) and a task, then Steps
// more turns, each adding the result of the tool the previous answer
// called, so the context grows step by step.
type Agentic struct {
	Loops, Steps                         int
	Toolsets                             int
	ToolTokens, TaskTokens, ResultTokens int
	OutputTokens                         int
	Think                                time.Duration // tool run time, mean
	Rate                                 float64       // session starts per second
	Seed                                 uint64
}

// DefaultAgentic returns 32 sessions of 8 steps over 4 tool sets of ~3000
// tokens, 200-token tasks, 300-token tool results, 64-token tool calls,
// 500 ms mean tool time, 1 session starting per second.
func DefaultAgentic() Agentic {
	return Agentic{Loops: 32, Steps: 8, Toolsets: 4, ToolTokens: 3000, TaskTokens: 200, ResultTokens: 300,
		OutputTokens: 64, Think: 500 * time.Millisecond, Rate: 1, Seed: 1}
}

// Validate reports a description Sessions cannot use.
func (w Agentic) Validate() error {
	if w.Loops < 1 || w.Steps < 1 || w.Toolsets < 1 || w.ToolTokens < 1 || w.TaskTokens < 1 ||
		w.ResultTokens < 1 || w.OutputTokens < 1 || w.Think < 0 || !(w.Rate > 0) {
		return errors.New("workload: agentic needs loops, steps, tool sets and every token count >= 1, rate > 0, think >= 0")
	}
	return nil
}

// Sessions returns the tool loops in start order.
func (w Agentic) Sessions() ([]Session, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(w.Seed, 0xa9e47))
	starts := poisson(r, w.Loops, w.Rate)
	out := make([]Session, w.Loops)
	for i := range out {
		g := r.IntN(w.Toolsets)
		s := Session{ID: i, Start: starts[i], API: Chat, Group: g,
			System: "You are an agent. Call one tool per step; answer when done.",
			Tools:  toolList(w.Seed, g, w.ToolTokens)}
		s.Turns = append(s.Turns, Turn{User: Words(w.Seed^0x7a5c, uint64(i), w.TaskTokens), MaxTokens: w.OutputTokens})
		for step := 1; step <= w.Steps; step++ {
			s.Turns = append(s.Turns, Turn{Role: "tool", User: Words(w.Seed^0x4e5, uint64(i)<<16|uint64(step), w.ResultTokens),
				Think: think(r, step, w.Think), MaxTokens: w.OutputTokens})
		}
		out[i] = s
	}
	return out, nil
}

// toolList is a JSON array of function tools about tokens long, fixed by
// (seed, set).
func toolList(seed uint64, set, tokens int) string {
	type fn struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	}
	type tool struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	const perTool = 150 // description tokens per tool
	var tools []tool
	for i := 0; i*perTool < tokens; i++ {
		tools = append(tools, tool{Type: "function", Function: fn{
			Name:        fmt.Sprintf("tool_%d_%d", set, i),
			Description: Words(seed^0x7001, uint64(set)<<16|uint64(i), min(perTool, tokens-i*perTool)),
			Parameters:  map[string]any{"type": "object", "properties": map[string]any{"query": map[string]string{"type": "string"}}},
		}})
	}
	b, _ := json.Marshal(tools) // strings and maps only: cannot fail
	return string(b)
}

// think draws the pause before turn t: none before the first.
func think(r *rand.Rand, t int, mean time.Duration) time.Duration {
	if t == 0 || mean == 0 {
		return 0
	}
	return time.Duration(r.ExpFloat64() * float64(mean))
}

// poisson returns n arrival times of a Poisson process at rate per second,
// starting at the first gap; rate 0 puts them all at 0.
func poisson(r *rand.Rand, n int, rate float64) []time.Duration {
	out := make([]time.Duration, n)
	var at time.Duration
	for i := range out {
		if rate > 0 {
			at += time.Duration(r.ExpFloat64() / rate * float64(time.Second))
		}
		out[i] = at
	}
	return out
}

// zipf draws k in [0, n) with weight 1/(k+1)^s.
type zipf struct {
	cdf []float64
}

func newZipf(n int, s float64) zipf {
	z := zipf{cdf: make([]float64, n)}
	sum := 0.0
	for k := range z.cdf {
		sum += 1 / math.Pow(float64(k+1), s)
		z.cdf[k] = sum
	}
	return z
}

func (z zipf) draw(r *rand.Rand) int {
	return sort.SearchFloat64s(z.cdf, r.Float64()*z.cdf[len(z.cdf)-1])
}
