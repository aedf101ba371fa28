package upstream

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the endpoint set's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	ejects *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		ejects: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "prefixring_ejections_total", Help: "Endpoints taken out of the candidate set, by reason (probe, passive).",
		}, []string{"endpoint", "reason"}),
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
	}
}
