package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// KVConfig configures how the set learns each engine's KV cache capacity,
// which bounds K, the prompt tokens an endpoint holds in KV (see package
// ring). The zero value learns nothing: every capacity stays unknown.
type KVConfig struct {
	// Scrape reads each endpoint's capacity from the engine: vLLM's
	// vllm:cache_config_info or SGLang's sglang:max_total_num_tokens at
	// MetricsPath, else llama.cpp's /props at PropsPath. Default true.
	Scrape bool
	// Interval between scrapes of each endpoint; an endpoint is also
	// scraped as soon as it appears. Capacity changes only when an engine
	// restarts with other settings, so this can be slow. Default 30s.
	Interval time.Duration
	// Timeout of one scrape (a vLLM /metrics page with its histograms can
	// run to hundreds of kilobytes). Default 5s.
	Timeout time.Duration
	// MetricsPath is where the Prometheus metrics are. Default /metrics.
	MetricsPath string
	// PropsPath is llama-server's properties, read when the metrics have
	// no capacity. Default /props.
	PropsPath string
	// Capacity are the operator's capacities; they win over scraping, and
	// an endpoint that has one is not scraped.
	Capacity KVCapacities
}

// DefaultKVConfig returns the documented defaults.
func DefaultKVConfig() KVConfig {
	return KVConfig{Scrape: true, Interval: 30 * time.Second, Timeout: 5 * time.Second,
		MetricsPath: "/metrics", PropsPath: "/props"}
}

// Validate reports a configuration the scraper cannot run with.
func (c KVConfig) Validate() error {
	if !c.Scrape {
		return nil
	}
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("KV scrape interval %v must be > 0", c.Interval)
	case c.Timeout <= 0:
		return fmt.Errorf("KV scrape timeout %v must be > 0", c.Timeout)
	case !strings.HasPrefix(c.MetricsPath, "/") || (c.PropsPath != "" && !strings.HasPrefix(c.PropsPath, "/")):
		return fmt.Errorf("KV scrape paths %q, %q must start with /", c.MetricsPath, c.PropsPath)
	}
	return nil
}

// KVCapacities are an operator's KV capacities in tokens: per endpoint
// (by its URL or its label) and a default for the others. The zero value
// gives none.
type KVCapacities struct {
	Default int64
	byID    map[string]int64 // canonical endpoint IDs
	byName  map[string]int64 // labels or host:port, as written
}

// ParseKVCapacities reads --kv-capacity's entries: "TOKENS" is the default
// for every endpoint, "ENDPOINT=TOKENS" one endpoint's, ENDPOINT being its
// URL (as --endpoints writes it) or its label.
func ParseKVCapacities(specs []string) (KVCapacities, error) {
	k := KVCapacities{byID: map[string]int64{}, byName: map[string]int64{}}
	seen := map[string]bool{}
	for _, spec := range specs {
		spec = strings.TrimSpace(spec)
		key, num := "", spec
		if i := strings.LastIndex(spec, "="); i >= 0 {
			key, num = strings.TrimSpace(spec[:i]), strings.TrimSpace(spec[i+1:])
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n <= 0 {
			return KVCapacities{}, fmt.Errorf("KV capacity %q: want TOKENS or ENDPOINT=TOKENS, TOKENS a positive integer", spec)
		}
		if seen[key] {
			return KVCapacities{}, fmt.Errorf("KV capacity %q: %q given twice", spec, key)
		}
		seen[key] = true
		if key == "" {
			k.Default = n
			continue
		}
		if labelPattern.MatchString(key) {
			k.byName[key] = n
		}
		if ep, _, err := ParseEndpoint(key); err == nil {
			k.byID[ep.ID] = n
		} else if !labelPattern.MatchString(key) {
			return KVCapacities{}, fmt.Errorf("KV capacity %q: %v", spec, err)
		}
	}
	return k, nil
}

// For returns ep's capacity, 0 if none is given.
func (k KVCapacities) For(ep Endpoint) int64 {
	if n, ok := k.byID[ep.ID]; ok {
		return n
	}
	if n, ok := k.byName[ep.Name]; ok {
		return n
	}
	return k.Default
}

// String lists the capacities canonically (sorted), as the settings every
// gossip replica must share compare them: "-" for none.
func (k KVCapacities) String() string {
	var parts []string
	if k.Default > 0 {
		parts = append(parts, strconv.FormatInt(k.Default, 10))
	}
	for _, m := range []map[string]int64{k.byID, k.byName} {
		for _, key := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, key+"="+strconv.FormatInt(m[key], 10))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

// kvEntry is what the set knows of one endpoint's capacity.
type kvEntry struct {
	scraped int64  // last known from the engine; 0: never
	source  string // the engine it came from
	tried   bool   // scraped at least once since it appeared
	busy    bool   // a scrape of it is under way
	problem string // the last problem logged, "" after a success
}

// capacityLocked is endpoint ep's capacity: the operator's, else the last
// scraped.
func (s *Set) capacityLocked(ep Endpoint) int64 {
	if n := s.kvCfg.Capacity.For(ep); n > 0 {
		return n
	}
	if e := s.kv[ep.ID]; e != nil {
		return e.scraped
	}
	return 0
}

// trackKVLocked keeps a capacity entry for every observed endpoint and
// wakes the scraper when one appeared.
func (s *Set) trackKVLocked(observed map[string]bool) {
	for id := range s.kv {
		if !observed[id] {
			delete(s.kv, id)
		}
	}
	fresh := false
	for id := range observed {
		if s.kv[id] == nil {
			s.kv[id], fresh = &kvEntry{}, true
		}
	}
	if fresh && s.kvCfg.Scrape {
		select {
		case s.kvNew <- struct{}{}:
		default:
		}
	}
}

// kvSourceLocked is endpoint id's capacity and where it came from.
func (s *Set) kvSourceLocked(id string) (int64, string) {
	ep, ok := s.endpointLocked(id)
	if !ok {
		return 0, ""
	}
	if n := s.kvCfg.Capacity.For(ep); n > 0 {
		return n, "override"
	}
	if e := s.kv[id]; e != nil && e.scraped > 0 {
		return e.scraped, e.source
	}
	return 0, ""
}

// kvLoop scrapes every endpoint's capacity each interval, and new
// endpoints as soon as they appear, until ctx ends; it returns once its
// scrapes have.
func (s *Set) kvLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(s.kvCfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.scrapeKV(ctx, &wg, true)
		case <-s.kvNew:
			s.scrapeKV(ctx, &wg, false)
		}
	}
}

// scrapeKV starts scrapes of the routed and discovered endpoints without
// an override (with all, every one; else those not tried yet), each on its
// own goroutine in wg, and returns without waiting: an endpoint that does
// not answer holds up its own scrape only, never a new endpoint's
// (TestSlowScrapeHoldsUpNoOther). One whose last scrape is still under
// way is skipped.
func (s *Set) scrapeKV(ctx context.Context, wg *sync.WaitGroup, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.kv {
		ep, ok := s.endpointLocked(id)
		if ok && (all || !e.tried) && !e.busy && s.kvCfg.Capacity.For(ep) == 0 {
			e.busy = true
			wg.Go(func() {
				c, source, err := s.scrapeOne(ctx, ep.URL)
				s.learnKV(ctx, id, e, c, source, err)
			})
		}
		e.tried = true
	}
}

// endpointLocked finds a routed or discovered endpoint by ID.
func (s *Set) endpointLocked(id string) (Endpoint, bool) {
	if e, ok := s.snap.Load().Get(id); ok {
		return e.Endpoint, true
	}
	for _, ep := range s.local {
		if ep.ID == id {
			return ep, true
		}
	}
	return Endpoint{}, false
}

// learnKV records one scrape of endpoint id, whose entry was e when it
// began: a new capacity rebuilds the snapshot; a failure keeps the last
// known one and is logged once per problem until a scrape succeeds.
func (s *Set) learnKV(ctx context.Context, id string, e *kvEntry, c int64, source string, err error) {
	s.mu.Lock()
	e.busy = false
	if s.kv[id] != e || ctx.Err() != nil { // it left meanwhile, or we stop
		s.mu.Unlock()
		return
	}
	if err != nil {
		if p := problem(err); p != e.problem {
			e.problem = p
			s.log.Warn("KV capacity not read; keeping the last known", "endpoint", id, "capacity", e.scraped,
				"problem", p, "err", err)
		}
		s.mu.Unlock()
		return
	}
	e.problem = ""
	if c == e.scraped && source == e.source {
		s.mu.Unlock()
		return
	}
	s.log.Info("KV capacity", "endpoint", id, "tokens", c, "source", source, "was", e.scraped)
	e.scraped, e.source = c, source
	s.rebuildLocked()
}

// errNoCapacity: neither the metrics nor /props name a capacity.
var errNoCapacity = errors.New("no KV capacity in the engine's metrics (vllm:cache_config_info, sglang:max_total_num_tokens) or llama.cpp /props; set --kv-capacity")

// scrapeOne reads an engine's capacity: from its metrics, else from
// llama-server's /props.
func (s *Set) scrapeOne(ctx context.Context, u *url.URL) (int64, string, error) {
	var c int64
	source := ""
	err := s.fetch(ctx, u.JoinPath(s.kvCfg.MetricsPath), func(r io.Reader) (err error) {
		c, source, err = parseKVMetrics(r)
		return err
	})
	if err == nil {
		return c, source, nil
	}
	if s.kvCfg.PropsPath == "" {
		return 0, "", err
	}
	perr := s.fetch(ctx, u.JoinPath(s.kvCfg.PropsPath), func(r io.Reader) (err error) {
		c, err = ParseLlamaCppProps(r)
		return err
	})
	if perr == nil {
		return c, "llama.cpp", nil
	}
	if errors.Is(err, ErrNoKVCapacity) {
		err = errNoCapacity
	}
	return 0, "", err
}

// problem names what went wrong in a few stable words, so that one
// problem is logged once however its details (addresses, timings) vary.
func problem(err error) string {
	var st statusError
	var ue *url.Error
	switch {
	case errors.Is(err, errNoCapacity):
		return "no capacity metric"
	case errors.As(err, &st):
		return fmt.Sprintf("metrics answered %d", int(st))
	case errors.Is(err, context.DeadlineExceeded):
		return "metrics timed out"
	case errors.As(err, &ue):
		return "metrics unreachable"
	}
	return "metrics unreadable"
}

type statusError int

func (e statusError) Error() string { return fmt.Sprintf("status %d", int(e)) }

// maxScrapeBytes caps what one scrape reads.
const maxScrapeBytes = 16 << 20

// fetch GETs u and hands a 200 answer's body to read.
func (s *Set) fetch(ctx context.Context, u *url.URL, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.kvCfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := s.kvClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	defer func() { _, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) }()
	if resp.StatusCode != http.StatusOK {
		return statusError(resp.StatusCode)
	}
	return read(io.LimitReader(resp.Body, maxScrapeBytes))
}
