// Package loadgen drives real-time load at OpenAI-compatible servers (a
// router, an engine, several of either) and measures what a client sees:
// time to first token, inter-token latency, end-to-end latency, output
// tokens per second and errors by kind. It plays the sessions of
// sim/workload (the same ones the fleet simulator plays in virtual time),
// checks that every response answers its own request, and can read the
// engines' own prefix-cache counters before and after the run.
//
// `prefixring load` is its command line; the demo and the real-engine
// end-to-end test drive it.
package loadgen

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"strings"
	"time"
)

// Config describes one run.
type Config struct {
	// URLs are the servers' roots (http://host:port). Requests go to them
	// in turn, as DNS round-robin spreads clients; a refused connection
	// moves the request on to the next one.
	URLs []string
	// Model is the model name every request carries; empty: the first
	// model the first URL's /v1/models lists.
	Model string
	// Stream asks for streamed answers (SSE), which TTFT and inter-token
	// latency need; without it TTFT is the whole response time.
	Stream bool
	// Requests stops the run after this many requests have been sent (0:
	// every turn of every session).
	Requests int
	// Concurrency > 0 runs closed-loop: that many sessions at a time, the
	// next starting when one ends. Otherwise the run is open-loop.
	Concurrency int
	// Rate > 0 (open loop) starts sessions as a Poisson process of this
	// many per second, drawn from Seed; 0 keeps the workload's own start
	// times (a trace's timestamps).
	Rate float64
	// ThinkScale multiplies the pauses between a session's turns (0: none).
	ThinkScale float64
	// MaxTokens, when > 0, replaces every turn's output length.
	MaxTokens int
	// Timeout bounds each request, headers and body.
	Timeout time.Duration
	// Seed draws the Poisson starts.
	Seed uint64
	// EngineMetrics are the engines' Prometheus endpoints, scraped before
	// and after the run for their prefix-cache counters (vLLM's and
	// llama.cpp's names are read).
	EngineMetrics []string
	// Progress, when set, receives a one-line progress bar, rewritten in
	// place while the run lasts.
	Progress io.Writer
}

// DefaultConfig returns the defaults of `prefixring load`.
func DefaultConfig() Config {
	return Config{Concurrency: 0, ThinkScale: 1, Timeout: 10 * time.Minute, Seed: 1}
}

// Validate reports a configuration Run cannot use.
func (c *Config) Validate() error {
	var errs []error
	if len(c.URLs) == 0 {
		errs = append(errs, errors.New("at least one URL is needed"))
	}
	for _, u := range c.URLs {
		if err := checkURL(u); err != nil {
			errs = append(errs, err)
		}
	}
	for _, u := range c.EngineMetrics {
		if err := checkURL(u); err != nil {
			errs = append(errs, fmt.Errorf("engine metrics: %w", err))
		}
	}
	if c.Requests < 0 || c.Concurrency < 0 || c.MaxTokens < 0 {
		errs = append(errs, errors.New("requests, concurrency and max tokens must be >= 0"))
	}
	if !(c.Rate >= 0) || math.IsInf(c.Rate, 0) {
		errs = append(errs, fmt.Errorf("rate %v must be a finite number >= 0", c.Rate))
	}
	if c.Rate > 0 && c.Concurrency > 0 {
		errs = append(errs, errors.New("choose --rate (open loop) or --concurrency (closed loop), not both"))
	}
	if !(c.ThinkScale >= 0) || math.IsInf(c.ThinkScale, 0) {
		errs = append(errs, fmt.Errorf("think scale %v must be a finite number >= 0", c.ThinkScale))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("timeout must be > 0"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("loadgen: %w", errors.Join(errs...))
	}
	return nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("URL %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("URL %q: want http(s)://host[:port]", s)
	}
	return nil
}

// SplitList splits a comma-separated flag value, dropping empty items and
// a trailing slash of each.
func SplitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimRight(strings.TrimSpace(f), "/"); f != "" {
			out = append(out, f)
		}
	}
	return out
}
