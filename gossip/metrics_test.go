package gossip

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func counterValue(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
