package proxy

import (
	"encoding/json"
	"net/http"

	"github.com/prefixring/prefixring/ring"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Ops are the router's own routes beside the proxied API.
type Ops struct {
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// Status feeds /debug/ring and /readyz.
	Status func() ([]ring.EndpointStatus, int64)
	// LoadFactor is shown on /debug/ring.
	LoadFactor float64
	// Draining makes /readyz fail, so load balancers stop sending new
	// requests while in-flight ones finish.
	Draining func() bool
	// Extra routes, such as /debug/cluster.
	Extra map[string]http.Handler
}

// Mux returns the handler of a replica: the ops routes, and the router for
// everything else.
func Mux(rt http.Handler, ops Ops) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(ops.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		st, _ := ops.Status()
		healthy := 0
		for _, e := range st {
			if e.Healthy {
				healthy++
			}
		}
		switch {
		case ops.Draining != nil && ops.Draining():
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "draining"})
		case healthy == 0:
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "no healthy endpoint", "endpoints": len(st)})
		default:
			writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "healthy_endpoints": healthy, "endpoints": len(st)})
		}
	})
	mux.HandleFunc("GET /debug/ring", func(w http.ResponseWriter, _ *http.Request) {
		st, bound := ops.Status()
		if st == nil {
			st = []ring.EndpointStatus{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"load_factor": ops.LoadFactor, "bound": bound, "endpoints": st})
	})
	for path, h := range ops.Extra {
		mux.Handle(path, h)
	}
	mux.Handle("/", rt)
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
