package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
	// MaxEjectionPercent caps the share of routed endpoints that failed
	// requests may hold out at once, rounded down, with at least one always
	// allowed: Envoy's max_ejection_percent with always_eject_one_host set
	// (without it, Envoy ejects nothing where one endpoint is more than the
	// share: none of 3 at 20%). Probes are not capped: an endpoint that
	// answers nothing is out whatever the share. Default 20: of 1 to 9
	// engines one may be out, of 10 to 14 two, of 15 to 19 three. Envoy's
	// 10% would allow only one in any fleet below 20; 20% lets two or three
	// independently broken GPUs out of a large fleet, while the rest always
	// keep at least 80% of it, so no wave of correlated failures (a bad
	// prompt, a bad client, an overload) can pile the fleet's load onto a
	// few engines. 100 turns the cap off.
	MaxEjectionPercent int
	// PanicThreshold: when fewer than this percent of the routed endpoints
	// are healthy, all of them are routed as healthy rather than answering
	// 503 (Envoy's healthy_panic_threshold, whose default, 50, this
	// keeps). 0 turns panic mode off.
	PanicThreshold int
	// ServedWindow: with gossip, a replica whose requests an endpoint
	// answered within this window vouches for it, so another replica's
	// failed requests alone do not take it out of the cluster's set (a bad
	// network path of one replica), while failed requests that no replica
	// contradicts do (see gossip/core.Tally). Default 10s, the interval
	// over which Envoy's outlier detection weighs an endpoint's successes.
	ServedWindow time.Duration
}

// DefaultHealthConfig returns the documented defaults.
func DefaultHealthConfig() HealthConfig {
	return HealthConfig{Interval: 5 * time.Second, Timeout: 2 * time.Second, Path: "/health", FailureThreshold: 3,
		BaseEjection: 30 * time.Second, MaxEjection: 5 * time.Minute, MaxEjectionPercent: 20, PanicThreshold: 50,
		ServedWindow: 10 * time.Second}
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
	case c.MaxEjectionPercent < 0 || c.MaxEjectionPercent > 100:
		return fmt.Errorf("max ejection percent %d must be within 0..100", c.MaxEjectionPercent)
	case c.PanicThreshold < 0 || c.PanicThreshold > 100:
		return fmt.Errorf("panic threshold %d must be within 0..100", c.PanicThreshold)
	case c.ServedWindow < time.Millisecond:
		// Its watcher ticks every quarter of it (servedLoop).
		return fmt.Errorf("served window %v must be at least 1ms", c.ServedWindow)
	}
	return nil
}

// check is one endpoint's health as this replica's own checks see it.
type check struct {
	pfails int // consecutive failed probes
	rfails int // consecutive failed requests, 5xx answers aside
	// pending are the requests (fingerprints) that this endpoint answered
	// with 5xx since its last success: each counts once toward ejection,
	// and is withdrawn if another endpoint answers it with 5xx too.
	pending map[uint64]bool
	// mute counts consecutive probes that got no answer at all (timed
	// out): hung, or its host gone.
	mute       int
	ejected    bool
	until      time.Time // passive ejections: not back before this
	ejections  int       // passive ejections in a row
	inSince    time.Time // back in since
	lastErr    string
	byRequests bool
	lastOK     time.Time // its last answer to a request
	// capped: the ejection cap kept it in since its last success or
	// ejection; the warning is logged once for that, not per request.
	capped bool
}

func (c *check) out() bool { return c != nil && c.ejected }

// silent reports an endpoint whose last threshold probes got no answer.
func (c *check) silent(threshold int) bool { return c != nil && c.mute >= threshold }

// requestFails is the consecutive failed requests that count against it.
func (c *check) requestFails() int { return c.rfails + len(c.pending) }

// ObserveSuccess records a request that endpoint id answered. The first
// answer in ServedWindow tells the arbiter (see evidence.go).
func (s *Set) ObserveSuccess(id string) {
	now := s.now()
	s.mu.Lock()
	c := s.checks[id]
	if c == nil || c.ejected {
		s.mu.Unlock()
		return
	}
	c.rfails, c.capped = 0, false
	clear(c.pending)
	fresh := s.arbiter != nil && !c.servedAt(now, s.cfg.ServedWindow)
	c.lastOK = now
	if fresh {
		s.rebuildLocked()
		return
	}
	s.mu.Unlock()
}

// ObserveFailure records a request that failed on endpoint id: passive
// ejection after FailureThreshold in a row.
func (s *Set) ObserveFailure(id string, err error) { s.failure(id, "passive", err) }

func (s *Set) failure(id, reason string, err error) {
	if errors.Is(err, context.Canceled) {
		return // we gave up, not the endpoint
	}
	s.mu.Lock()
	c := s.checks[id]
	if c == nil {
		s.mu.Unlock()
		return
	}
	c.lastErr = err.Error()
	if reason == "probe" {
		s.probeFailedLocked(id, c, err)
		return
	}
	if c.ejected {
		s.mu.Unlock()
		return
	}
	c.rfails++
	s.ejectForRequestsLocked(id, c, err)
}

// probeFailedLocked records a failed probe: FailureThreshold in a row
// eject; as many with no answer at all end the endpoint's alive context,
// and so abandon the tries waiting there. A departed endpoint that still
// holds tries is probed only for that. It unlocks s.mu.
func (s *Set) probeFailedLocked(id string, c *check, err error) {
	wasSilent := c.silent(s.cfg.FailureThreshold)
	if noAnswer(err) {
		c.mute++
	} else {
		c.mute = 0 // it answered, or its host refused: tries there end by themselves
	}
	flipped := wasSilent != c.silent(s.cfg.FailureThreshold)
	if c.ejected && c.byRequests && !s.drainingLocked(id) {
		// Out for its failed requests, and now failing its probes too (a
		// host that died with requests in flight): once they fail as
		// often as would eject it, it is out for its probes. It then no
		// longer counts against MaxEjectionPercent, which caps request
		// ejections only ("an endpoint that answers nothing is out
		// whatever the share"), nor is voted failing for its requests.
		// Counted against the cap for as long as the host stayed down,
		// it kept every other endpoint that failed its requests in.
		if c.pfails++; c.pfails >= s.cfg.FailureThreshold {
			c.byRequests = false
			s.log.Warn("endpoint ejected", "endpoint", id, "reason", "probe", "err", err)
			s.rebuildLocked()
			return
		}
	}
	if c.ejected || s.drainingLocked(id) {
		if flipped {
			s.rebuildLocked()
			return
		}
		s.mu.Unlock()
		return
	}
	c.pfails++
	if c.pfails < s.cfg.FailureThreshold {
		s.mu.Unlock()
		return
	}
	c.ejected, c.byRequests = true, false
	s.log.Warn("endpoint ejected", "endpoint", id, "reason", "probe", "err", err)
	s.met.ejected(id, "probe")
	s.rebuildLocked()
}

// ejectForRequestsLocked ejects endpoint id once its failed requests reach
// the threshold, unless the ejection cap is reached. A departed endpoint
// finishing its tries is not ejected: it takes no request anyway, and its
// ejection (or capped one) would export its series again after the router
// forgot them. It unlocks s.mu.
func (s *Set) ejectForRequestsLocked(id string, c *check, err error) {
	if c.requestFails() < s.cfg.FailureThreshold || s.drainingLocked(id) {
		s.mu.Unlock()
		return
	}
	if !s.mayEjectLocked() {
		s.met.capped(id)
		if !c.capped {
			c.capped = true
			s.log.Warn("endpoint not ejected: the ejection cap is reached", "endpoint", id, "err", err,
				"max_ejection_percent", s.cfg.MaxEjectionPercent)
		}
		s.mu.Unlock()
		return
	}
	c.capped = false
	now := s.now()
	c.ejected, c.byRequests = true, true
	if !c.inSince.IsZero() && now.Sub(c.inSince) >= s.cfg.MaxEjection {
		c.ejections = 0 // it behaved for long enough
	}
	c.ejections++
	c.until = now.Add(min(s.cfg.BaseEjection*time.Duration(c.ejections), s.cfg.MaxEjection))
	s.log.Warn("endpoint ejected", "endpoint", id, "reason", "passive", "err", err, "until", c.until)
	s.met.ejected(id, "passive")
	s.rebuildLocked()
}

// mayEjectLocked reports whether one more endpoint may be ejected for
// failed requests: MaxEjectionPercent of the routed ones, at least one.
func (s *Set) mayEjectLocked() bool {
	n := len(s.snap.Load().Endpoints)
	out := 0
	for id, c := range s.checks {
		if c.ejected && c.byRequests && !s.drainingLocked(id) {
			out++
		}
	}
	return out < max(1, n*s.cfg.MaxEjectionPercent/100)
}

// noAnswer reports a probe that got nothing back in time: a timeout, not
// a refusal or an answer.
func noAnswer(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// recovered records a passing probe: an endpoint out for its probes
// returns at once, one out for its failed requests once its ejection time
// is over. One ejected for its requests whose probes then failed too is
// out for its probes: it left the ejection cap (probeFailedLocked), and
// another endpoint may hold the cap's slot now, so kept out for its old
// ejection time it would be one more held out for failed requests than the
// cap allows (TestRevivedEndpointRespectsTheEjectionCap). Its ejections in
// a row still count if it fails its requests again.
func (s *Set) recovered(id string) {
	now := s.now()
	s.mu.Lock()
	c := s.checks[id]
	if c == nil {
		s.mu.Unlock()
		return
	}
	wasSilent := c.silent(s.cfg.FailureThreshold)
	c.mute = 0
	if !c.ejected || (c.byRequests && now.Before(c.until)) || s.drainingLocked(id) {
		// A passing probe ends a run of failed ones, ejected or not (one
		// out for its requests is out for its probes only after
		// FailureThreshold in a row); it says nothing of the requests.
		c.pfails = 0
		if wasSilent {
			s.rebuildLocked() // it answers again: tries there may wait
			return
		}
		s.mu.Unlock()
		return
	}
	clear(c.pending)
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
	for id, a := range s.alive {
		if _, ok := targets[id]; !ok && a.holds > 0 {
			targets[id] = a.url // departed, still finishing tries
		}
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
	// Served: it answered this replica's requests within ServedWindow, so
	// under gossip this replica vouches for it (see evidence.go).
	Served bool `json:"served,omitempty"`
	// KVCapacity is the KV capacity in tokens the ring bounds K by (0:
	// unknown); KVSource where it came from: "override", or the engine
	// scraped (vllm, sglang, llama.cpp).
	KVCapacity int64  `json:"kv_capacity_tokens,omitempty"`
	KVSource   string `json:"kv_capacity_source,omitempty"`
}

// Health returns this replica's own checks of every endpoint it knows.
func (s *Set) Health() []EndpointHealth {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]EndpointHealth, 0, len(s.checks))
	for id, c := range s.checks {
		h := EndpointHealth{ID: id, Ejected: c.ejected, Fails: max(c.pfails, c.requestFails()), Until: c.until,
			Ejections: c.ejections, LastError: c.lastErr, Served: c.servedAt(now, s.cfg.ServedWindow)}
		h.KVCapacity, h.KVSource = s.kvSourceLocked(id)
		out = append(out, h)
	}
	slicesSortHealth(out)
	return out
}
