package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"strings"

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
	// Degraded, when it returns a reason, is reported in /readyz's body
	// while the replica stays ready: it still answers every request, only
	// less well (a gossip island routes on its own counts). Failing
	// readiness instead would take every replica of a misconfigured
	// cluster out of service at once.
	Degraded func() string
	// Unready, when it returns a reason, makes /readyz fail with it: a
	// state the operator asked to take the replica out of service for
	// (router.Config.GossipStrictSettings).
	Unready func() string
	// Extra are more admin routes, such as /debug/cluster.
	Extra map[string]http.Handler
	// Pprof adds Go's profiler under /debug/pprof/ to the admin routes.
	Pprof bool
	// Workers, when set, serves the workers API (/workers) on the admin
	// listener, and on the public one too when PublicWorkers is set (dstack
	// reaches a router replica group only through its service port);
	// there, without a token, it answers dstack's calls only
	// (WorkersAPI.RegisterPublic).
	Workers       *WorkersAPI
	PublicWorkers bool
}

// Public returns the handler of the public listener: /healthz, /readyz and
// the router, nothing else. It dispatches on the exact path itself rather
// than through http.ServeMux, whose path cleaning answers 301/307
// redirects in plain text before the router could refuse the path.
func Public(rt http.Handler, ops Ops) http.Handler {
	healthz, readyz := healthz(), readyz(ops)
	var workers http.Handler
	if ops.Workers != nil && ops.PublicWorkers {
		mux := http.NewServeMux()
		ops.Workers.RegisterPublic(mux)
		workers = mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var h http.Handler
		switch p := r.URL.Path; {
		case p == "/healthz":
			h = healthz
		case p == "/readyz":
			h = readyz
		case workers != nil && (p == "/workers" || strings.HasPrefix(p, "/workers/")):
			// ServeMux would answer a path it cleans with a redirect in
			// plain text, before the token check; a worker's id may hold
			// encoded slashes (its URL, query-escaped), so cleanPath's
			// rules do not apply, only the segments ServeMux cleans.
			if !cleanSegments(r.URL.EscapedPath()) {
				writeError(w, errBadPath)
				return
			}
			workers.ServeHTTP(w, r)
			return
		default:
			rt.ServeHTTP(w, r)
			return
		}
		// These routes take no body: one is not waited for (bodyWait).
		bodyWait(w, r, 0)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, errMethod(w, http.MethodGet, http.MethodHead))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Admin returns the handler of the admin listener, for operators and
// Prometheus: /metrics, /debug/ring, the Extra routes, /debug/pprof/ when
// Pprof is set, and /healthz and /readyz again (for probes that use the
// admin port).
func Admin(ops Ops) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(ops.Gatherer, promhttp.HandlerOpts{}))
	mux.Handle("GET /healthz", healthz())
	mux.Handle("GET /readyz", readyz(ops))
	mux.HandleFunc("GET /debug/ring", func(w http.ResponseWriter, _ *http.Request) {
		st, bound := ops.Status()
		if st == nil {
			st = []ring.EndpointStatus{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"load_factor": ops.LoadFactor, "bound": bound, "endpoints": st})
	})
	if ops.Pprof {
		// No /debug/pprof/cmdline: the command line may carry
		// --gossip-key.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	for path, h := range ops.Extra {
		mux.Handle(path, h)
	}
	if ops.Workers != nil {
		ops.Workers.Register(mux)
	}
	return mux
}

func healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

func readyz(ops Ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if ops.Draining != nil && ops.Draining() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "draining"})
			return
		}
		if ops.Unready != nil {
			if why := ops.Unready(); why != "" {
				writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unready", "reason": why})
				return
			}
		}
		st, _ := ops.Status()
		healthy := 0
		for _, e := range st {
			if e.Healthy {
				healthy++
			}
		}
		if healthy == 0 {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "no healthy endpoint", "endpoints": len(st)})
			return
		}
		body := map[string]any{"status": "ready", "healthy_endpoints": healthy, "endpoints": len(st)}
		if ops.Degraded != nil {
			if why := ops.Degraded(); why != "" {
				body["degraded"] = why
			}
		}
		writeJSON(w, http.StatusOK, body)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
