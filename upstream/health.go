package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// HealthSink receives health decisions: the balancer directly, or the
// gossip layer, which combines every replica's observations first.
type HealthSink interface {
	SetHealthy(id string, healthy bool)
}

// HealthConfig configures active probes and passive ejection.
type HealthConfig struct {
	// Interval between active probes of each endpoint. Default 5s.
	Interval time.Duration
	// Timeout of one probe. Default 2s.
	Timeout time.Duration
	// Path probed on each endpoint. Default /health (vLLM, SGLang and
	// llama.cpp all serve it).
	Path string
	// FailureThreshold is how many consecutive failures (probes, or
	// requests that failed to connect or got 502/503/504) eject an
	// endpoint. Default 3. One successful probe brings it back.
	FailureThreshold int
}

// DefaultHealthConfig returns the documented defaults.
func DefaultHealthConfig() HealthConfig {
	return HealthConfig{Interval: 5 * time.Second, Timeout: 2 * time.Second, Path: "/health", FailureThreshold: 3}
}

// Validate reports a configuration the checker cannot run with.
func (c HealthConfig) Validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("health interval %v must be > 0", c.Interval)
	case c.Timeout <= 0:
		return fmt.Errorf("health timeout %v must be > 0", c.Timeout)
	case c.FailureThreshold < 1:
		return fmt.Errorf("health failure threshold %d must be >= 1", c.FailureThreshold)
	}
	return nil
}

// Health probes endpoints and ejects the ones that fail. Ejecting takes an
// endpoint out of the candidate set without changing the placement, so
// only its own keys move, and they come home when it recovers.
type Health struct {
	cfg     HealthConfig
	sink    HealthSink
	client  *http.Client
	log     *slog.Logger
	metrics *Metrics

	mu    sync.Mutex
	state map[string]*healthState // by endpoint ID
}

type healthState struct {
	url     *url.URL
	fails   int
	ejected bool
	lastErr string
}

// NewHealth returns a checker that reports to sink; transport carries the
// probes (nil: a default one). metrics may be nil.
func NewHealth(cfg HealthConfig, sink HealthSink, transport http.RoundTripper, m *Metrics, log *slog.Logger) (*Health, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if transport == nil {
		transport = http.DefaultTransport
	}
	return &Health{
		cfg: cfg, sink: sink, log: log, metrics: m,
		client: &http.Client{Transport: transport, Timeout: cfg.Timeout},
		state:  map[string]*healthState{},
	}, nil
}

// SetTargets makes the checker probe exactly these endpoints. New ones
// start healthy; the first failing probes eject them.
func (h *Health) SetTargets(e *Endpoints, ids []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := make(map[string]*healthState, len(ids))
	for _, id := range ids {
		if s := h.state[id]; s != nil {
			next[id] = s
		} else {
			next[id] = &healthState{url: e.URL(id)}
		}
	}
	h.state = next
}

// Run probes every endpoint each interval until ctx ends.
func (h *Health) Run(ctx context.Context) {
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	for {
		h.ProbeAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ProbeAll probes every endpoint once, concurrently, and waits.
func (h *Health) ProbeAll(ctx context.Context) {
	h.mu.Lock()
	targets := make(map[string]*url.URL, len(h.state))
	for id, s := range h.state {
		targets[id] = s.url
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for id, u := range targets {
		wg.Go(func() {
			if err := h.probe(ctx, u); err != nil {
				h.failure(id, "probe", err)
			} else {
				h.recovered(id)
			}
		})
	}
	wg.Wait()
}

func (h *Health) probe(ctx context.Context, u *url.URL) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.JoinPath(h.cfg.Path).String(), nil)
	if err != nil {
		return err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// ObserveSuccess records a request that an endpoint answered.
func (h *Health) ObserveSuccess(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.state[id]; s != nil && !s.ejected {
		s.fails = 0
	}
}

// ObserveFailure records a request that failed on an endpoint: passive
// ejection after FailureThreshold in a row.
func (h *Health) ObserveFailure(id string, err error) { h.failure(id, "passive", err) }

func (h *Health) failure(id, reason string, err error) {
	if errors.Is(err, context.Canceled) {
		return // we gave up, not the endpoint
	}
	h.mu.Lock()
	s := h.state[id]
	if s == nil {
		h.mu.Unlock()
		return
	}
	s.fails++
	s.lastErr = err.Error()
	eject := !s.ejected && s.fails >= h.cfg.FailureThreshold
	if eject {
		s.ejected = true
	}
	h.mu.Unlock()
	if eject {
		h.log.Warn("endpoint ejected", "endpoint", id, "reason", reason, "err", err)
		h.metrics.ejected(id, reason)
		h.sink.SetHealthy(id, false)
	}
}

func (h *Health) recovered(id string) {
	h.mu.Lock()
	s := h.state[id]
	if s == nil {
		h.mu.Unlock()
		return
	}
	back := s.ejected
	s.fails, s.ejected, s.lastErr = 0, false, ""
	h.mu.Unlock()
	if back {
		h.log.Info("endpoint healthy again", "endpoint", id)
		h.sink.SetHealthy(id, true)
	}
}
