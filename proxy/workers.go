package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/prefixring/prefixring/upstream"
)

// Registry is what the workers API writes: the registered-worker set
// (workers.Set, replicated by gossip).
type Registry interface {
	Add(url string) bool
	Remove(url string) bool
	Members() []string
}

// WorkersAPI serves the SGLang Model Gateway's worker-management calls, as
// dstack's gateway and its router replica groups make them:
//
//	GET    /workers       200 {"workers":[{"id","url","worker_type","is_healthy","load"}...]}
//	POST   /workers       {"url":"http://host:port","worker_type":"regular"} -> 202 {"status":"accepted"}
//	GET    /workers/{id}  200 one worker, or 404
//	DELETE /workers/{id}  202 {"status":"accepted"}, or 404
//
// A worker's id is its URL, query-escaped; /workers/{id} also takes the URL
// itself, path-escaped. Fields of the POST body other than url and
// worker_type (bootstrap_port, connection_mode, ...) are ignored;
// worker_type must be "regular" or absent, since prefixring routes whole
// requests (no prefill/decode disaggregation).
type WorkersAPI struct {
	Registry Registry
	// Status reports an endpoint's health and in-flight requests, for GET;
	// nil reports every worker healthy with load 0.
	Status func(url string) (healthy bool, load int64)
	// Token, when set, is the bearer token every /workers request must
	// carry. When empty, only clients on a loopback address are served
	// (anything else gets 403), so an admin port reachable from a network
	// never lets an unauthenticated caller point the router elsewhere.
	Token string
}

type workerJSON struct {
	ID         string `json:"id"`
	URL        string `json:"url"`
	WorkerType string `json:"worker_type"`
	IsHealthy  bool   `json:"is_healthy"`
	Load       int64  `json:"load"`
}

var (
	errUnauthorized = &apiError{http.StatusUnauthorized, "Missing or wrong admin token: send Authorization: Bearer <token> (--admin-token).", "authentication_error", "invalid_admin_token"}
	errNotLoopback  = &apiError{http.StatusForbidden, "The workers API answers only loopback clients unless the router runs with --admin-token.", "permission_error", "admin_token_required"}
	errNoWorker     = &apiError{http.StatusNotFound, "No registered worker has that id.", "invalid_request_error", "worker_not_found"}
)

// Register adds the workers API's routes to mux.
func (a *WorkersAPI) Register(mux *http.ServeMux) {
	mux.Handle("/workers", a.auth(http.HandlerFunc(a.serveWorkers)))
	mux.Handle("/workers/", a.auth(http.HandlerFunc(a.serveWorker)))
}

func (a *WorkersAPI) auth(next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(a.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.Token == "" {
			if !loopback(r.RemoteAddr) {
				writeError(w, errNotLoopback)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		// Hashing both sides makes the comparison constant-time whatever
		// the lengths.
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if h := sha256.Sum256([]byte(got)); !ok || subtle.ConstantTimeCompare(h[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="prefixring admin"`)
			writeError(w, errUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func loopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (a *WorkersAPI) worker(u string) workerJSON {
	healthy, load := true, int64(0)
	if a.Status != nil {
		healthy, load = a.Status(u)
	}
	return workerJSON{ID: url.QueryEscape(u), URL: u, WorkerType: "regular", IsHealthy: healthy, Load: load}
}

func (a *WorkersAPI) serveWorkers(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		list := []workerJSON{}
		for _, u := range a.Registry.Members() {
			list = append(list, a.worker(u))
		}
		writeJSON(w, http.StatusOK, map[string]any{"workers": list, "total": len(list)})
	case http.MethodPost:
		u, err := decodeWorker(r)
		if err != nil {
			writeError(w, errBadRequest(err.Error()))
			return
		}
		a.Registry.Add(u)
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "accepted", "worker_id": url.QueryEscape(u), "url": u})
	default:
		writeError(w, errMethod("GET or POST"))
	}
}

func (a *WorkersAPI) serveWorker(w http.ResponseWriter, r *http.Request) {
	u, ok := a.lookup(r)
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if !ok {
			writeError(w, errNoWorker)
			return
		}
		writeJSON(w, http.StatusOK, a.worker(u))
	case http.MethodDelete:
		if !ok || !a.Registry.Remove(u) {
			writeError(w, errNoWorker)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "accepted", "worker_id": url.QueryEscape(u)})
	default:
		writeError(w, errMethod("GET or DELETE"))
	}
}

// lookup finds the registered worker that the path's id names: the
// query-escaped URL GET /workers hands out, or the URL path-escaped.
func (a *WorkersAPI) lookup(r *http.Request) (string, bool) {
	raw := strings.TrimPrefix(r.URL.EscapedPath(), "/workers/")
	members := a.Registry.Members()
	for _, unescape := range []func(string) (string, error){url.QueryUnescape, url.PathUnescape} {
		if id, err := unescape(raw); err == nil {
			for _, m := range members {
				if m == id || m == strings.TrimRight(id, "/") {
					return m, true
				}
			}
		}
	}
	return "", false
}

const maxWorkerBody = 64 << 10

// decodeWorker reads a POST /workers body and returns the worker's URL as
// given, less a trailing slash (dstack compares URLs that way), after
// checking that it is an endpoint the router can use.
func decodeWorker(r *http.Request) (string, error) {
	var body struct {
		URL        *string `json:"url"`
		WorkerType *string `json:"worker_type"`
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxWorkerBody+1))
	switch {
	case err != nil:
		return "", errors.New("could not read the request body")
	case len(b) > maxWorkerBody:
		return "", fmt.Errorf("request body is larger than %d bytes", maxWorkerBody)
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return "", fmt.Errorf(`request body must be a JSON object such as {"url": "http://10.0.0.7:8000", "worker_type": "regular"}: %v`, err)
	}
	if body.URL == nil || *body.URL == "" {
		return "", errors.New(`"url" is required`)
	}
	if body.WorkerType != nil && *body.WorkerType != "regular" {
		return "", fmt.Errorf(`worker_type %q is not supported: prefixring routes whole requests to "regular" workers (no prefill/decode disaggregation)`, *body.WorkerType)
	}
	u := strings.TrimRight(*body.URL, "/")
	if _, _, err := upstream.ParseEndpoint(u); err != nil {
		return "", err
	}
	if strings.Contains(u, "=") {
		return "", fmt.Errorf("url %q: labels (name=url) are for --endpoints, not the workers API", u)
	}
	return u, nil
}
