package gossip

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	messages    *prometheus.CounterVec
	bytes       *prometheus.CounterVec
	dropped     *prometheus.CounterVec
	homeSkipped prometheus.Counter
	conflicts   prometheus.Counter
	joins       prometheus.Counter
	logLines    *prometheus.CounterVec
}

func newMetrics(n *Node, reg prometheus.Registerer) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	f := promauto.With(reg)
	m := &metrics{
		messages: f.NewCounterVec(prometheus.CounterOpts{
			Name: "prefixring_gossip_messages_total",
			Help: "Gossip messages sent (direction=out) and received (in), by kind (delta, full, payload: an envelope of payload sections, pushpull).",
		}, []string{"direction", "kind"}),
		bytes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "prefixring_gossip_bytes_total",
			Help: "Payload bytes of gossip messages, before memberlist framing and encryption.",
		}, []string{"direction", "kind"}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "prefixring_gossip_dropped_total",
			Help: "Gossip messages dropped, by reason.",
		}, []string{"reason"}),
		homeSkipped: f.NewCounter(prometheus.CounterOpts{
			Name: "prefixring_gossip_home_skipped_total",
			Help: "Requests that skipped their home endpoint because it was over the cluster-wide bound.",
		}),
		conflicts: f.NewCounter(prometheus.CounterOpts{
			Name: "prefixring_gossip_name_conflicts_total",
			Help: "Members seen claiming a name already used at another address.",
		}),
	}
	m.joins = f.NewCounter(prometheus.CounterOpts{
		Name: "prefixring_gossip_join_attempts_total",
		Help: "Joins through peers that discovery names and that were not members.",
	})
	m.logLines = f.NewCounterVec(prometheus.CounterOpts{
		Name: "prefixring_gossip_log_lines_total",
		Help: "memberlist's warning and error lines, by level, whether logged or suppressed (at most one a minute of each kind is logged: garbage on the gossip port must not flood the log).",
	}, []string{"level"})
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "prefixring_gossip_isolated",
		Help: "1 while discovery names other replicas but none accepts this one (a wrong --gossip-key, a firewall): the replica routes on its own counts.",
	}, func() float64 {
		if n.Isolated() {
			return 1
		}
		return 0
	})
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "prefixring_gossip_members",
		Help: "Live members of the gossip cluster, this replica included.",
	}, func() float64 {
		if n.ml == nil {
			return 0
		}
		return float64(n.ml.NumMembers())
	})
	reg.MustRegister(ageCollector{n}, skewCollector{n}, mismatchCollector{n})
	return m
}

func (m *metrics) sent(kind string, size int) {
	m.messages.WithLabelValues("out", kind).Inc()
	m.bytes.WithLabelValues("out", kind).Add(float64(size))
}

func (m *metrics) received(kind string, size int) {
	m.messages.WithLabelValues("in", kind).Inc()
	m.bytes.WithLabelValues("in", kind).Add(float64(size))
}

var ageDesc = prometheus.NewDesc("prefixring_gossip_peer_state_age_seconds",
	"Age of the freshest entry held from each peer, since this replica heard it (by this replica's clock).", []string{"peer"}, nil)

// ageCollector reports entry ages at scrape time, one series per peer held.
type ageCollector struct{ n *Node }

func (c ageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- ageDesc }

func (c ageCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.n.cfg.Clock()
	c.n.mu.Lock()
	entries := c.n.view.Table().Entries()
	c.n.mu.Unlock()
	for _, e := range entries {
		if e.Node == c.n.cfg.NodeName || e.Left {
			continue
		}
		age := max(0, float64(now.UnixMilli()-e.Heard)/1000)
		ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, age, e.Node)
	}
}
