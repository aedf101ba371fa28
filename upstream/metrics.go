package upstream

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the endpoint set's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	ejects *prometheus.CounterVec
	caps   *prometheus.CounterVec
	panic  prometheus.Gauge
	kvCap  *prometheus.GaugeVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		ejects: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "prefixring_ejections_total", Help: "Endpoints taken out of the candidate set, by reason (probe, passive).",
		}, []string{"endpoint", "reason"}),
		caps: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "prefixring_ejections_capped_total", Help: "Ejections for failed requests not made because the share of ejected endpoints was at its cap.",
		}, []string{"endpoint"}),
		panic: promauto.With(reg).NewGauge(prometheus.GaugeOpts{
			Name: "prefixring_endpoints_panic", Help: "1 while too few endpoints are healthy and every one is routed (panic threshold).",
		}),
		kvCap: promauto.With(reg).NewGaugeVec(prometheus.GaugeOpts{
			Name: "prefixring_endpoint_kv_capacity_tokens",
			Help: "KV cache capacity of the endpoint's engine in tokens, as the ring bounds K by it (an override, or scraped from the engine); absent while unknown.",
		}, []string{"endpoint"}),
	}
}

func (m *Metrics) capped(endpoint string) {
	if m != nil {
		m.caps.WithLabelValues(endpoint).Inc()
	}
}

func (m *Metrics) setPanic(on bool) {
	if m != nil {
		v := 0.0
		if on {
			v = 1
		}
		m.panic.Set(v)
	}
}

// setKVCapacity exports endpoint's KV capacity; 0 (unknown) removes it.
func (m *Metrics) setKVCapacity(endpoint string, tokens int64) {
	if m == nil {
		return
	}
	if tokens > 0 {
		m.kvCap.WithLabelValues(endpoint).Set(float64(tokens))
	} else {
		m.kvCap.DeleteLabelValues(endpoint)
	}
}

func (m *Metrics) ejected(endpoint, reason string) {
	if m != nil {
		m.ejects.WithLabelValues(endpoint, reason).Inc()
	}
}

// ForgetEndpoint deletes every series of endpoint id (it left the set).
func (m *Metrics) ForgetEndpoint(id string) {
	if m != nil {
		m.ejects.DeletePartialMatch(prometheus.Labels{"endpoint": id})
		m.caps.DeletePartialMatch(prometheus.Labels{"endpoint": id})
		m.kvCap.DeleteLabelValues(id)
	}
}
