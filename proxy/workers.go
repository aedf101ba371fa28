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
	"github.com/prefixring/prefixring/workers"
)

// workerURLError is a URL the router cannot use as an endpoint.
type workerURLError struct{ err error }

func (e *workerURLError) Error() string { return e.err.Error() }

// Registry is what the workers API writes: the registered-worker set
// (workers.Set, replicated by gossip). Register refuses a URL with an
// error wrapping workers.ErrInvalidURL, or workers.ErrTooManyWorkers at
// the cap.
type Registry interface {
	Register(url string) (bool, error)
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
	// carry, on either listener. When empty, only a direct local caller
	// is served (anything else gets 403, see [localCaller]), so neither a
	// port reachable from a network nor a relay on the router's host lets
	// an unauthenticated caller point the router elsewhere.
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
	errRelayed      = &apiError{http.StatusForbidden, "The request came through a proxy (it carries Forwarded, X-Forwarded-*, X-Real-IP or Via): without --admin-token the workers API answers only direct local callers.", "permission_error", "admin_token_required"}
	errHTTP10       = &apiError{http.StatusForbidden, "The request came over HTTP/1.0, as a relay (nginx's proxy_pass by default) sends it: without --admin-token the workers API answers only direct local callers, over HTTP/1.1 or later.", "permission_error", "admin_token_required"}
	errAdminHost    = &apiError{http.StatusForbidden, "Without --admin-token the workers API on the admin listener answers only requests to localhost or a loopback address (Host header).", "permission_error", "admin_token_required"}
	errPublicHost   = &apiError{http.StatusForbidden, "Without --admin-token the workers API on the API listener answers only dstack's calls (Host: dstack, from loopback, not through a proxy); use the admin listener or --admin-token.", "permission_error", "admin_token_required"}
	errTooMany      = &apiError{http.StatusConflict, "", "invalid_request_error", "too_many_workers"}
	errNoWorker     = &apiError{http.StatusNotFound, "No registered worker has that id.", "invalid_request_error", "worker_not_found"}
)

// Register adds the workers API's routes to mux, for the admin listener.
func (a *WorkersAPI) Register(mux *http.ServeMux) { a.register(mux, false) }

// RegisterPublic adds the workers API's routes to mux, for the API
// listener: without a token it answers dstack's calls only.
func (a *WorkersAPI) RegisterPublic(mux *http.ServeMux) { a.register(mux, true) }

func (a *WorkersAPI) register(mux *http.ServeMux, public bool) {
	mux.Handle("/workers", a.auth(http.HandlerFunc(a.serveWorkers), public))
	mux.Handle("/workers/", a.auth(http.HandlerFunc(a.serveWorker), public))
}

func (a *WorkersAPI) auth(next http.Handler, public bool) http.Handler {
	want := sha256.Sum256([]byte(a.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.Token == "" {
			if e := localCaller(r, public); e != nil {
				bodyWait(w, r, 0) // refused unread: not waited for
				writeError(w, e)
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
			bodyWait(w, r, 0)
			writeError(w, errUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// forwardingHeaders are the headers a relay adds to say whom it relays:
// the standard one (RFC 7239), the de facto ones (nginx's X-Real-IP,
// ingress-nginx's X-Original-Forwarded-For), Via (RFC 9110, which
// proxies must add) and the CDNs'; any header of the X-Forwarded- family
// (-For, -Host, -Proto, -Port, -Server, -Prefix, ...) counts too
// (relayed).
var forwardingHeaders = []string{
	"Forwarded", "X-Real-Ip", "Via", "X-Original-Forwarded-For",
	"X-Client-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip", "X-Cluster-Client-Ip", "X-Envoy-External-Address",
}

// relayed reports whether r carries a header a relay adds to say whom it
// relays for.
func relayed(r *http.Request) bool {
	for _, h := range forwardingHeaders {
		if _, ok := r.Header[h]; ok {
			return true
		}
	}
	for h := range r.Header { // canonical keys
		if strings.HasPrefix(h, "X-Forwarded-") {
			return true
		}
	}
	return false
}

// localCaller decides a call without a token: it must come from a
// loopback address, carry no forwarding header (a relay on the router's
// host connects from loopback too), speak HTTP/1.1 or later, and name a
// local Host: on the admin listener localhost, a loopback address or
// dstack; on the API listener only "dstack", the host of the base URL
// dstack's server calls the router with (router_worker_sync.py:
// http://dstack, through an SSH tunnel to localhost:<service port>).
//
// A relay that adds who it relays for is refused by the header; a browser
// led to the port by DNS rebinding sends the attacker's Host. A relay that
// rewrites Host to its upstream (nginx's default, $proxy_host:
// 127.0.0.1:8000) or keeps the client's (the public name) is refused by
// the Host on the API listener. On the admin listener a loopback Host is
// what a local operator sends too, so there nginx's default relay is told
// apart by the protocol its proxy_pass speaks by default, HTTP/1.0, which
// no local tool sends unless told to (curl -0). What remains is a relay
// that passes bytes unchanged (a TCP forwarder, ssh -L, kubectl
// port-forward) to a client that sends Host: dstack, and on the admin
// listener a relay that speaks HTTP/1.1, names nobody and rewrites Host
// to a loopback name (nginx with proxy_http_version 1.1 and no
// proxy_set_header): docs/security.md says so, and says to set
// --admin-token whenever anything relays the admin listener.
func localCaller(r *http.Request, public bool) *apiError {
	if !loopback(r.RemoteAddr) {
		return errNotLoopback
	}
	if relayed(r) {
		return errRelayed
	}
	if !r.ProtoAtLeast(1, 1) {
		return errHTTP10
	}
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	switch {
	case host == "dstack":
		return nil
	case public:
		return errPublicHost
	case host == "localhost" || strings.HasSuffix(host, ".localhost") || loopback(host):
		return nil
	}
	return errAdminHost
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
		var bad *workerURLError
		var refused *apiError
		switch {
		case errors.As(err, &bad):
			writeError(w, registerError(bad.err))
			return
		case errors.As(err, &refused):
			writeError(w, refused)
			return
		case err != nil:
			writeError(w, errBadRequest(err.Error()))
			return
		}
		if same := a.sameEndpoint(u); len(same) > 0 {
			// Another spelling of a registered worker: the router routes
			// them as one endpoint, so it stays one worker.
			u = same[0]
		} else if _, err := a.Registry.Register(u); err != nil {
			writeError(w, registerError(err))
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "accepted", "worker_id": url.QueryEscape(u), "url": u})
	default:
		writeError(w, errMethod(w, http.MethodGet, http.MethodHead, http.MethodPost))
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
		removed := false
		if ok {
			// Every spelling of the endpoint: a peer may have registered
			// another one, and either keeps it routed.
			for _, m := range a.sameEndpoint(u) {
				removed = a.Registry.Remove(m) || removed
			}
		}
		if !removed {
			writeError(w, errNoWorker)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "accepted", "worker_id": url.QueryEscape(u)})
	default:
		writeError(w, errMethod(w, http.MethodGet, http.MethodHead, http.MethodDelete))
	}
}

// registerError maps the set's refusals: a URL it refuses is the
// request's fault (400); a full set conflicts with its state (409: a
// DELETE makes room, and unlike 429 it tells no client to retry as is).
func registerError(err error) *apiError {
	if errors.Is(err, workers.ErrTooManyWorkers) {
		e := *errTooMany
		e.message = err.Error()
		return &e
	}
	return &apiError{http.StatusBadRequest, err.Error(), "invalid_request_error", "invalid_worker_url"}
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
			if same := a.sameEndpoint(id); len(same) > 0 {
				return same[0], true // another spelling of the endpoint
			}
		}
	}
	return "", false
}

// sameEndpoint returns the registered workers that are the endpoint u
// names (the same canonical endpoint ID, [upstream.ParseEndpoint]: case,
// a default or zero-padded port, an IP address's spelling, a trailing
// slash or /v1 aside), in the set's order.
func (a *WorkersAPI) sameEndpoint(u string) []string {
	ep, _, err := upstream.ParseEndpoint(u)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range a.Registry.Members() {
		if mep, _, err := upstream.ParseEndpoint(m); err == nil && mep.ID == ep.ID {
			out = append(out, m)
		}
	}
	return out
}

const maxWorkerBody = 64 << 10

// errWorkerTooLarge refuses a POST /workers body over maxWorkerBody as
// the router refuses any body over its limit (errTooLarge).
var errWorkerTooLarge = &apiError{http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body is larger than the workers API accepts (%d KiB).", maxWorkerBody>>10), "invalid_request_error", "request_too_large"}

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
		return "", errWorkerTooLarge
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
	// The set checks the URL against its policy when it registers it;
	// the router must also be able to use it as an endpoint.
	u := strings.TrimRight(*body.URL, "/")
	if _, _, err := upstream.ParseEndpoint(u); err != nil {
		return "", &workerURLError{err}
	}
	return u, nil
}
