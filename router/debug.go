package router

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/upstream"
)

// debugRoutes are the admin routes beside /metrics and /debug/ring.
func (r *Replica) debugRoutes() map[string]http.Handler {
	routes := map[string]http.Handler{
		"GET /debug/endpoints": jsonHandler(func() any { return r.endpoints.Health() }),
		"GET /debug/pick":      pickHandler(r.balancer),
		"POST /debug/key":      keyHandler(r.keying),
	}
	if r.node != nil {
		routes["GET /debug/cluster"] = jsonHandler(r.debugCluster)
	}
	return routes
}

// maxPickKeys caps the keys one /debug/pick call may ask about.
const maxPickKeys = 10000

// pickHandler answers where each of the keys in ?key=K1,K2,... (decimal
// uint64 affinity keys) would go now, through the bound as the replica
// reads it, counting nothing ([ring.Balancer.Peek]; it used to acquire and
// release each key, so a real pick beside a call of 10,000 keys could read
// their load), and each key's home (where it goes when no endpoint is
// over the bound): chaos runs compare the replicas' picks, and count the
// keys picked away from home, without which agreement cannot fail.
func pickHandler(bal *ring.Balancer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		picks, homes := map[string]string{}, map[string]string{}
		for _, f := range strings.Split(r.URL.Query().Get("key"), ",") {
			if f == "" {
				continue
			}
			k, err := strconv.ParseUint(f, 10, 64)
			if err != nil || len(picks) >= maxPickKeys {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
					"message": fmt.Sprintf("key %q: want up to %d comma-separated decimal uint64 keys", f, maxPickKeys),
					"type":    "invalid_request_error", "param": "key", "code": "invalid_key"}})
				return
			}
			homes[f], _ = bal.Home(k)
			picks[f], _, _ = bal.Peek(ring.Request{Key: k, Keyed: true}) // "" when no endpoint
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"picks": picks, "homes": homes})
	})
}

// maxKeyBody caps the chat body /debug/key reads.
const maxKeyBody = 4 << 20

// keyHandler answers how this replica keys the chat body posted (POST
// /debug/key, the body as sent to /v1/chat/completions) with its current
// table of shared prefixes: the affinity key, the group key and the shared
// characters the table skips (a learned prefix changes the last two, and
// the key only of a first user message longer than the key's window).
// Chaos runs compare the replicas' tables through it.
func keyHandler(keys *prefix.Live) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxKeyBody))
		var k prefix.Key
		if err == nil {
			k, err = keys.Request(prefix.RouteChat, body, nil)
		}
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
				"message": "want a chat completions body: " + err.Error(), "type": "invalid_request_error", "param": nil, "code": "invalid_body"}})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"key": strconv.FormatUint(k.Hash, 10), "group": strconv.FormatUint(k.Group, 10),
			"shared_chars": k.SharedChars})
	})
}

// jsonHandler serves what v returns as JSON.
func jsonHandler(v func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v())
	})
}

// applySnapshot hands the endpoint set and its health to the balancer in
// one update (on the set's dispatch goroutine: a ring rebuild never holds up
// a probe, a source or the gossip loop) and logs what changed.
func applySnapshot(bal *ring.Balancer, old, cur *upstream.Snapshot, log *slog.Logger) {
	eps := make([]ring.Endpoint, len(cur.Endpoints))
	for i, e := range cur.Endpoints {
		eps[i] = ring.Endpoint{ID: e.ID, Healthy: e.Healthy, KVCapacity: e.KVCapacity}
	}
	if err := bal.Update(eps); err != nil {
		log.Error("endpoint set rejected", "err", err)
		return
	}
	if !slices.Equal(old.IDs(), cur.IDs()) {
		log.Info("endpoints", "count", len(cur.Endpoints), "ids", strings.Join(cur.IDs(), ","))
	}
	for _, e := range cur.Endpoints {
		was, ok := old.Get(e.ID)
		if ok && was.Healthy != e.Healthy {
			log.Info("endpoint routed", "endpoint", e.ID, "healthy", e.Healthy)
		}
		if was.KVCapacity != e.KVCapacity {
			log.Info("endpoint KV capacity", "endpoint", e.ID, "tokens", e.KVCapacity, "was", was.KVCapacity)
		}
	}
}

// removed lists the endpoints of old that cur no longer routes to.
func removed(old, cur *upstream.Snapshot) []string {
	var out []string
	for _, e := range old.Endpoints {
		if _, ok := cur.Get(e.ID); !ok {
			out = append(out, e.ID)
		}
	}
	return out
}
