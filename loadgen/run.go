package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prefixring/prefixring/sim/workload"
)

// Run plays sessions against cfg.URLs and reports what it measured. It
// returns early, with what it measured so far, when ctx ends; it returns
// an error only for a configuration it cannot use or engine metrics it
// cannot read.
func Run(ctx context.Context, cfg Config, sessions []workload.Session) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(sessions) == 0 {
		return nil, fmt.Errorf("loadgen: the workload has no sessions")
	}
	if cfg.Model == "" {
		m, err := firstModel(ctx, cfg.URLs)
		if err != nil {
			return nil, err
		}
		cfg.Model = m
	}
	before, err := scrapeAll(ctx, cfg.EngineMetrics)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, s := range sessions {
		total += len(s.Turns)
	}
	if cfg.Requests > 0 {
		total = min(total, cfg.Requests)
	}
	r := &runner{cfg: &cfg, sessions: sessions, budget: int64(cfg.Requests), total: total, t0: time.Now()}
	if cfg.Requests == 0 {
		r.budget = math.MaxInt64
	}
	r.caller = &caller{cfg: &cfg, client: newClient(&cfg)}
	stopProgress := r.progress()
	if cfg.Concurrency > 0 {
		r.closedLoop(ctx)
	} else {
		r.openLoop(ctx)
	}
	stopProgress()
	r.caller.client.CloseIdleConnections()
	rep := summarize(&cfg, r.samples, time.Since(r.t0))
	rep.Sessions = len(sessions)
	if len(cfg.EngineMetrics) > 0 {
		after, err := scrapeAll(context.WithoutCancel(ctx), cfg.EngineMetrics)
		if err != nil {
			return rep, err
		}
		rep.Engine = after.minus(before)
	}
	return rep, nil
}

func newClient(cfg *Config) *http.Client {
	conns := max(cfg.Concurrency, 64)
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil, // the URLs are the targets, whatever the environment says
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns * len(cfg.URLs),
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}}
}

type runner struct {
	cfg      *Config
	caller   *caller
	sessions []workload.Session
	budget   int64 // requests still to send
	total    int   // requests the run means to send
	t0       time.Time
	sent     atomic.Int64
	failed   atomic.Int64

	mu      sync.Mutex
	samples []Sample
}

// take claims one request of the budget.
func (r *runner) take() bool { return atomic.AddInt64(&r.budget, -1) >= 0 }

func (r *runner) closedLoop(ctx context.Context) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(r.sessions) || ctx.Err() != nil || atomic.LoadInt64(&r.budget) <= 0 {
					return
				}
				r.session(ctx, &r.sessions[i], false)
			}
		})
	}
	wg.Wait()
}

func (r *runner) openLoop(ctx context.Context) {
	starts := make([]time.Duration, len(r.sessions))
	if r.cfg.Rate > 0 {
		rng := rand.New(rand.NewPCG(r.cfg.Seed, 0x10ad))
		var t float64
		for i := range starts {
			starts[i] = time.Duration(t * float64(time.Second))
			t += rng.ExpFloat64() / r.cfg.Rate
		}
	} else {
		for i, s := range r.sessions {
			starts[i] = s.Start
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range r.sessions {
		// The loop claims each session's first request before waiting for
		// its start, so that once the budget is spent it stops at once
		// rather than wait for a start that would send nothing.
		if !r.take() || !sleepUntil(ctx, r.t0.Add(starts[i])) {
			return
		}
		wg.Go(func() { r.session(ctx, &r.sessions[i], true) })
	}
}

// sleepUntil waits for t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// session plays s's turns in order, each after the previous answer and
// its think time. A failed turn ends the session: its later turns would
// carry a history the server never produced. claimed: the caller took
// the first turn's request from the budget.
func (r *runner) session(ctx context.Context, s *workload.Session, claimed bool) {
	answers := make([]string, 0, len(s.Turns))
	prevPrompt := 0
	for k := range s.Turns {
		if k > 0 && r.cfg.ThinkScale > 0 {
			if !sleepUntil(ctx, time.Now().Add(time.Duration(float64(s.Turns[k].Think)*r.cfg.ThinkScale))) {
				return
			}
		}
		if ctx.Err() != nil || !(k == 0 && claimed) && !r.take() {
			return
		}
		c := s.Call(k, answers)
		if r.cfg.MaxTokens > 0 {
			c.MaxTokens = r.cfg.MaxTokens
		}
		id := fmt.Sprintf("prefixring-load-%d-%d-%d", r.cfg.Seed, s.ID, k)
		smp, answer := r.caller.do(ctx, &c, id, r.t0)
		// Each turn carries the whole history, so a response to this
		// turn reports more prompt tokens than the previous turn's.
		if smp.Err == "" && k > 0 && smp.PromptTokens > 0 && prevPrompt > 0 && smp.PromptTokens <= prevPrompt {
			smp.Err, smp.Detail = ErrMismatch, fmt.Sprintf("turn %d reports %d prompt tokens, turn %d reported %d: not this conversation's answer",
				k, smp.PromptTokens, k-1, prevPrompt)
		}
		prevPrompt = smp.PromptTokens
		r.sent.Add(1)
		if smp.Err != "" {
			r.failed.Add(1)
		}
		r.mu.Lock()
		r.samples = append(r.samples, smp)
		r.mu.Unlock()
		if smp.Err != "" {
			return
		}
		answers = append(answers, answer)
	}
}

// firstModel asks the URLs, in turn, for /v1/models and returns the first
// model listed.
func firstModel(ctx context.Context, urls []string) (string, error) {
	var errs []error
	for _, u := range urls {
		m, err := listModel(ctx, u)
		if err == nil {
			return m, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("loadgen: no --model given and none listed: %w", errors.Join(errs...))
}

func listModel(ctx context.Context, u string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s/v1/models: status %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("%s/v1/models lists no model", u)
	}
	return list.Data[0].ID, nil
}
