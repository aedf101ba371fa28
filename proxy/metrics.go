package proxy

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the request path's Prometheus metrics. A nil *Metrics
// records nothing.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	ttfb     *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	cuts     *prometheus.CounterVec
	// routed are the endpoints requests are recorded for (nil: every
	// one), swapped whole by SetEndpoints: requests that were in flight
	// to an endpoint when it left record nothing as they end, so they do
	// not bring its series back. It holds the endpoints of the moment,
	// not every one that ever left.
	routed atomic.Pointer[map[string]struct{}]
}

// LLM requests run from milliseconds (a cached short prompt) to minutes (a
// long generation), so the buckets span 5 ms to ~5 min.
var latencyBuckets = prometheus.ExponentialBuckets(0.005, 2, 17)

// NewMetrics registers the metrics on reg. status, if not nil, is read at
// each scrape for the in-flight gauge, so the hot path pays nothing for it.
func NewMetrics(reg prometheus.Registerer, status func() ([]ring.EndpointStatus, int64)) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "prefixring_requests_total",
			Help: "Requests answered, by endpoint, HTTP status and routing decision (home, spill, fallback; none when no endpoint was picked).",
		}, []string{"endpoint", "status", "decision"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "prefixring_upstream_duration_seconds", Help: "Time from sending a request upstream to the end of its response body.",
			Buckets: latencyBuckets,
		}, []string{"endpoint"}),
		ttfb: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "prefixring_upstream_ttfb_seconds", Help: "Time from sending a request upstream to the first byte of its response body (for streams, about the time to first token).",
			Buckets: latencyBuckets,
		}, []string{"endpoint"}),
		retries: f.NewCounterVec(prometheus.CounterOpts{
			Name: "prefixring_retries_total", Help: "Requests retried on another endpoint, by the endpoint that failed.",
		}, []string{"endpoint"}),
		cuts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "prefixring_stream_errors_total", Help: "Event streams the upstream cut before their end; the client got an error event.",
		}, []string{"endpoint"}),
	}
	if status != nil {
		reg.MustRegister(&statusCollector{status: status})
	}
	return m
}

// records reports whether requests to endpoint are recorded: m is set,
// and the endpoint is routed (or none was picked, or no set was given).
func (m *Metrics) records(endpoint string) bool {
	if m == nil {
		return false
	}
	set := m.routed.Load()
	if set == nil || endpoint == "" {
		return true
	}
	_, ok := (*set)[endpoint]
	return ok
}

func (m *Metrics) request(endpoint string, status int, decision string) {
	if m.records(endpoint) {
		m.requests.WithLabelValues(endpoint, strconv.Itoa(status), decision).Inc()
	}
}

func (m *Metrics) upstream(endpoint string, ttfb, total time.Duration, sawBody bool) {
	if !m.records(endpoint) {
		return
	}
	if sawBody {
		m.ttfb.WithLabelValues(endpoint).Observe(ttfb.Seconds())
	}
	m.duration.WithLabelValues(endpoint).Observe(total.Seconds())
}

func (m *Metrics) retried(endpoint string) {
	if m.records(endpoint) {
		m.retries.WithLabelValues(endpoint).Inc()
	}
}

func (m *Metrics) streamCut(endpoint string) {
	if m.records(endpoint) {
		m.cuts.WithLabelValues(endpoint).Inc()
	}
}

// SetEndpoints makes ids the endpoints requests are recorded for; call it
// with every endpoint set, before any request can reach a new endpoint.
// Until it is called every endpoint's requests are recorded.
func (m *Metrics) SetEndpoints(ids []string) {
	if m == nil {
		return
	}
	set := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		set[id] = struct{}{}
	}
	m.routed.Store(&set)
}

// ForgetEndpoint deletes every series of endpoint id, so an endpoint that
// left the set stops being exported (and a fleet that churns through pod
// IPs does not grow the metrics without bound). Wire it, after
// [Metrics.SetEndpoints], to the endpoint set's change notifications:
// requests in flight to it when it left then record nothing as they end.
func (m *Metrics) ForgetEndpoint(id string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"endpoint": id}
	m.requests.DeletePartialMatch(l)
	m.duration.DeletePartialMatch(l)
	m.ttfb.DeletePartialMatch(l)
	m.retries.DeletePartialMatch(l)
	m.cuts.DeletePartialMatch(l)
}

// statusCollector reports in-flight load and health per endpoint at scrape
// time from the balancer's snapshot.
type statusCollector struct {
	status func() ([]ring.EndpointStatus, int64)
}

var (
	inflightDesc = prometheus.NewDesc("prefixring_inflight_requests",
		"This replica's in-flight requests per endpoint.", []string{"endpoint"}, nil)
	loadDesc = prometheus.NewDesc("prefixring_load",
		"In-flight load per endpoint in the load signal's unit (tokens of prefill not yet answered, or requests): this replica's own (scope=local) and what the bound reads (scope=cluster).",
		[]string{"endpoint", "scope"}, nil)
	healthyDesc = prometheus.NewDesc("prefixring_endpoint_healthy", "1 if the endpoint is in the candidate set.", []string{"endpoint"}, nil)
	boundDesc   = prometheus.NewDesc("prefixring_load_bound", "The load above which an endpoint spills a key's smallest request, in the load signal's unit.", nil, nil)
	paceDesc    = prometheus.NewDesc("prefixring_endpoint_pace",
		"The factor f at which the bound reads the endpoint's load, as f·(load + 256) − 256: 1, or its answers' time over the fleet's median where this replica measured it as slow (--pace-threshold; docs/routing.md, \"Slow engines\").", []string{"endpoint"}, nil)
)

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inflightDesc
	ch <- loadDesc
	ch <- healthyDesc
	ch <- boundDesc
	ch <- paceDesc
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	st, bound := c.status()
	for _, e := range st {
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(e.LocalRequests), e.ID)
		ch <- prometheus.MustNewConstMetric(loadDesc, prometheus.GaugeValue, float64(e.LocalLoad), e.ID, "local")
		ch <- prometheus.MustNewConstMetric(loadDesc, prometheus.GaugeValue, float64(e.Load), e.ID, "cluster")
		h := 0.0
		if e.Healthy {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, h, e.ID)
		ch <- prometheus.MustNewConstMetric(paceDesc, prometheus.GaugeValue, e.Pace, e.ID)
	}
	ch <- prometheus.MustNewConstMetric(boundDesc, prometheus.GaugeValue, float64(bound))
}
