package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// HealthConfig configures active probes and passive ejection.
type HealthConfig struct {
	// Interval between active probes of each endpoint. Default 5s.
	Interval time.Duration
	// Timeout of one probe: an endpoint that accepts the connection and
	// never answers (hung) fails its probes this late. Default 2s.
	Timeout time.Duration
	// Path probed on each endpoint. Default /health (vLLM, SGLang and
	// llama.cpp all serve it).
	Path string
	// FailureThreshold is how many consecutive failed probes, or
	// consecutive failed requests (connection errors, timeouts, 5xx), eject
	// an endpoint. The two are counted apart: a passing probe does not
	// excuse failing requests. Default 3.
	FailureThreshold int
	// BaseEjection is how long an endpoint ejected by failed requests stays
	// out at least, times the number of times it was ejected in a row
	// (Envoy's outlier detection does the same): a server that answers its
	// health probe but fails requests would otherwise come back at every
	// probe and fail FailureThreshold more. Default 30s. An endpoint ejected
	// by its probes returns at its first passing probe.
	BaseEjection time.Duration
	// MaxEjection caps the ejection time; an endpoint that stays in this
	// long is forgiven its earlier ejections. Default 5m.
	MaxEjection time.Duration
}

// DefaultHealthConfig returns the documented defaults.
func DefaultHealthConfig() HealthConfig {
	return HealthConfig{Interval: 5 * time.Second, Timeout: 2 * time.Second, Path: "/health", FailureThreshold: 3,
		BaseEjection: 30 * time.Second, MaxEjection: 5 * time.Minute}
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
	case c.BaseEjection < 0 || c.MaxEjection < c.BaseEjection:
		return fmt.Errorf("ejection times: need 0 <= base (%v) <= max (%v)", c.BaseEjection, c.MaxEjection)
	}
	return nil
}

// check is one endpoint's health as this replica's own checks see it.
type check struct {
	pfails     int // consecutive failed probes
	rfails     int // consecutive failed requests
	ejected    bool
	until      time.Time // passive ejections: not back before this
	ejections  int       // passive ejections in a row
	inSince    time.Time // back in since
	lastErr    string
	byRequests bool
}

func (c *check) out() bool { return c != nil && c.ejected }

// ObserveSuccess records a request that endpoint id answered.
func (s *Set) ObserveSuccess(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.checks[id]; c != nil && !c.ejected {
		c.rfails = 0
	}
}

// ObserveFailure records a request that failed on endpoint id: passive
// ejection after FailureThreshold in a row.
func (s *Set) ObserveFailure(id string, err error) { s.failure(id, "passive", err) }

func (s *Set) failure(id, reason string, err error) {
	if errors.Is(err, context.Canceled) {
		return // we gave up, not the endpoint
	}
	now := s.now()
	s.mu.Lock()
	c := s.checks[id]
	if c == nil || c.ejected {
		if c != nil {
			c.lastErr = err.Error()
		}
		s.mu.Unlock()
		return
	}
	fails := &c.pfails
	if reason == "passive" {
		fails = &c.rfails
	}
	*fails++
	c.lastErr = err.Error()
	if *fails < s.cfg.FailureThreshold {
		s.mu.Unlock()
		return
	}
	c.ejected, c.byRequests = true, reason == "passive"
	if c.byRequests {
		if !c.inSince.IsZero() && now.Sub(c.inSince) >= s.cfg.MaxEjection {
			c.ejections = 0 // it behaved for long enough
		}
		c.ejections++
		c.until = now.Add(min(s.cfg.BaseEjection*time.Duration(c.ejections), s.cfg.MaxEjection))
	}
	s.log.Warn("endpoint ejected", "endpoint", id, "reason", reason, "err", err, "until", c.until)
	s.met.ejected(id, reason)
	s.rebuildLocked()
}

// recovered records a passing probe: an ejected endpoint returns, once its
// ejection time is over.
func (s *Set) recovered(id string) {
	now := s.now()
	s.mu.Lock()
	c := s.checks[id]
	if c == nil || !c.ejected || now.Before(c.until) {
		if c != nil && !c.ejected {
			c.pfails = 0 // a passing probe says nothing of the requests
		}
		s.mu.Unlock()
		return
	}
	c.pfails, c.rfails, c.ejected, c.lastErr, c.inSince = 0, 0, false, "", now
	s.log.Info("endpoint healthy again", "endpoint", id)
	s.rebuildLocked()
}

func (s *Set) probeLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.ProbeAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ProbeAll probes every endpoint this replica discovered or routes to,
// concurrently, and waits.
func (s *Set) ProbeAll(ctx context.Context) {
	s.mu.Lock()
	targets := map[string]*url.URL{}
	for _, ep := range s.local {
		targets[ep.ID] = ep.URL
	}
	for _, e := range s.Snapshot().Endpoints {
		targets[e.ID] = e.URL
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for id, u := range targets {
		wg.Go(func() {
			if err := s.probeOne(ctx, u); err != nil {
				if ctx.Err() == nil {
					s.failure(id, "probe", err)
				}
			} else {
				s.recovered(id)
			}
		})
	}
	wg.Wait()
}

func (s *Set) probeOne(ctx context.Context, u *url.URL) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.JoinPath(s.cfg.Path).String(), nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
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

// EndpointHealth is one endpoint's local checks, for /debug.
type EndpointHealth struct {
	ID        string    `json:"id"`
	Ejected   bool      `json:"ejected"`
	Fails     int       `json:"consecutive_failures"`
	Until     time.Time `json:"ejected_until,omitzero"`
	Ejections int       `json:"ejections_in_a_row,omitempty"`
	LastError string    `json:"last_error,omitempty"`
}

// Health returns this replica's own checks of every endpoint it knows.
func (s *Set) Health() []EndpointHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]EndpointHealth, 0, len(s.checks))
	for id, c := range s.checks {
		out = append(out, EndpointHealth{ID: id, Ejected: c.ejected, Fails: max(c.pfails, c.rfails), Until: c.until,
			Ejections: c.ejections, LastError: c.lastErr})
	}
	slicesSortHealth(out)
	return out
}
