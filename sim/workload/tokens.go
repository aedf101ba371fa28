// Package workload generates synthetic request streams for the fleet
// simulator (package sim) and the routing studies.
package workload

import (
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// SharedPrefixTokens describes, at the token level (for the fleet simulator
// alone), groups of prompts that share a long system prompt,
// each followed by a user message of its own: the agent and chat-assistant
// traffic prefix affinity is for.
type SharedPrefixTokens struct {
	// Groups is the number of distinct system prompts.
	Groups int
	// Skew is the Zipf exponent of group popularity: group k is drawn with
	// weight 1/(k+1)^Skew. 0 draws groups uniformly.
	Skew float64
	// SystemTokens is the length of each group's system prompt.
	SystemTokens int
	// UserTokens is the length of each request's own suffix.
	UserTokens int
	// OutputTokens is each request's output length.
	OutputTokens int
	// Rate is the mean arrival rate in requests per second (Poisson).
	Rate float64
	// Requests is the number of requests to generate.
	Requests int
	// Seed makes the stream reproducible.
	Seed uint64
}

// Validate reports a description Generate cannot use.
func (w SharedPrefixTokens) Validate() error {
	if w.Groups < 1 || w.SystemTokens < 1 || w.UserTokens < 0 || w.OutputTokens < 1 ||
		!(w.Rate > 0) || w.Requests < 0 || w.Skew < 0 {
		return errors.New("workload: need groups, system tokens, output tokens and rate > 0; skew, user tokens, requests >= 0")
	}
	return nil
}

// Generate returns the requests in arrival order and each one's group.
func (w SharedPrefixTokens) Generate() ([]Request, []int, error) {
	if err := w.Validate(); err != nil {
		return nil, nil, err
	}
	r := rand.New(rand.NewPCG(w.Seed, 0x5eed))
	cdf := make([]float64, w.Groups)
	sum := 0.0
	for k := range cdf {
		sum += 1 / math.Pow(float64(k+1), w.Skew)
		cdf[k] = sum
	}
	reqs := make([]Request, w.Requests)
	groups := make([]int, w.Requests)
	var at time.Duration
	for i := range reqs {
		at += time.Duration(r.ExpFloat64() / w.Rate * float64(time.Second))
		g := sort.SearchFloat64s(cdf, r.Float64()*sum)
		toks := make([]uint32, 0, w.SystemTokens+w.UserTokens)
		toks = appendTokens(toks, w.Seed, uint64(g), w.SystemTokens)
		toks = appendTokens(toks, w.Seed^0xffff, uint64(i)|1<<40, w.UserTokens)
		reqs[i] = Request{Arrival: at, InputLen: len(toks), OutputLen: w.OutputTokens, Tokens: toks}
		groups[i] = g
	}
	return reqs, groups, nil
}

// appendTokens appends n token ids determined by (seed, stream).
func appendTokens(dst []uint32, seed, stream uint64, n int) []uint32 {
	r := rand.New(rand.NewPCG(seed, stream))
	for range n {
		dst = append(dst, uint32(r.IntN(128000)))
	}
	return dst
}
