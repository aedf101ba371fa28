package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
)

// Picker leases an endpoint for a request: the CHWBL balancer, or a
// baseline policy.
type Picker interface {
	Acquire(ring.Request) (ring.Lease, error)
}

// Keyer derives a request's affinity key from its body.
type Keyer interface {
	Key(route prefix.Route, body []byte) (key uint64, ok bool, err error)
}

// Targets resolves endpoint IDs for the request path. The endpoint set
// (package upstream) implements it.
type Targets interface {
	// URL returns the base URL requests to endpoint id go to, or nil when
	// id has left the set.
	URL(id string) *url.URL
	// Name returns what a client may be shown of endpoint id: an operator's
	// label, or host:port; never a full internal URL.
	Name(id string) string
}

// Observer hears whether an endpoint answered; the health checker ejects
// endpoints that keep failing.
type Observer interface {
	ObserveSuccess(id string)
	ObserveFailure(id string, err error)
}

// Router is the request path: an http.Handler for the proxied routes.
type Router struct {
	cfg      Config
	picker   Picker
	keyer    Keyer
	targets  Targets
	observer Observer
	metrics  *Metrics
	log      *slog.Logger
	proxy    *httputil.ReverseProxy
}

// Deps are the Router's collaborators. Observer and Metrics may be nil.
type Deps struct {
	Picker   Picker
	Keyer    Keyer
	Targets  Targets
	Observer Observer
	Metrics  *Metrics
	Log      *slog.Logger
	// Transport carries requests upstream; nil means NewTransport(cfg).
	Transport http.RoundTripper
}

// NewTransport returns the one Transport all upstream requests share:
// keep-alive pools sized for many concurrent streams, no compression (the
// client's Accept-Encoding passes through), no response header timeout (a
// long prompt's prefill legitimately takes seconds).
func NewTransport(cfg Config) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.DialTimeout,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
	}
}

// NewRouter returns the request path.
func NewRouter(cfg Config, d Deps) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Picker == nil || d.Keyer == nil || d.Targets == nil {
		return nil, errors.New("proxy: picker, keyer and targets are required")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Transport == nil {
		d.Transport = newH1Transport(cfg, NewTransport(cfg))
	}
	rt := &Router{cfg: cfg, picker: d.Picker, keyer: d.Keyer, targets: d.Targets,
		observer: d.Observer, metrics: d.Metrics, log: d.Log}
	rt.proxy = &httputil.ReverseProxy{
		Rewrite:        rt.rewrite,
		Transport:      &retrying{rt: rt, base: d.Transport},
		ModifyResponse: rt.modifyResponse,
		ErrorHandler:   rt.errorHandler,
		BufferPool:     bufferPool{},
		ErrorLog:       slog.NewLogLogger(d.Log.Handler(), slog.LevelDebug),
	}
	return rt, nil
}

// exchange is one client request's state, shared by the handler, the
// rewrite, the retrying transport and the response hooks.
type exchange struct {
	body   []byte
	path   string // the client's path and query, sent to every try
	query  string
	req    ring.Request
	lease  ring.Lease // the current try's
	tried  []string
	status int
}

type exchangeKey struct{}

// ServeHTTP routes one client request.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route, ok := routeOf(r.URL.Path)
	if !ok {
		rt.reject(w, errNotFound)
		return
	}
	if route != prefix.RouteOther && r.Method != http.MethodPost {
		rt.reject(w, errMethod("POST"))
		return
	}
	body, apiErr := rt.readBody(w, r)
	if apiErr != nil {
		rt.reject(w, apiErr)
		return
	}
	x := &exchange{body: body, path: r.URL.Path, query: r.URL.RawQuery}
	if x.req, apiErr = rt.requestOf(r, route, body); apiErr != nil {
		rt.reject(w, apiErr)
		return
	}
	var err error
	if x.lease, err = rt.picker.Acquire(x.req); err != nil {
		rt.reject(w, errNoHealthy)
		return
	}
	defer func() {
		x.lease.Release()
		rt.metrics.request(x.lease.Endpoint, x.status, x.lease.Decision.String())
	}()
	r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x))
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	rt.proxy.ServeHTTP(w, r)
}

func (rt *Router) reject(w http.ResponseWriter, e *apiError) {
	rt.metrics.request("", e.status, "none")
	writeError(w, e)
}

// readBody reads the whole body once, within the limit. With a known
// Content-Length it reads into a slice of exactly that size: growing a
// buffer as it fills would copy a long prompt several times.
func (rt *Router) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if r.ContentLength > rt.cfg.MaxBodyBytes {
		return nil, errTooLarge
	}
	body := http.MaxBytesReader(w, r.Body, rt.cfg.MaxBodyBytes)
	var (
		buf []byte
		err error
	)
	if n := r.ContentLength; n >= 0 {
		// net/http's server never reads past Content-Length.
		buf = make([]byte, n)
		_, err = io.ReadFull(body, buf)
	} else {
		buf, err = io.ReadAll(body)
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, errTooLarge
	case err != nil:
		return nil, errReadBody
	}
	return buf, nil
}

// requestOf derives the ring request: the session header's key, else the
// body's, else none (the least loaded endpoint takes it).
func (rt *Router) requestOf(r *http.Request, route prefix.Route, body []byte) (ring.Request, *apiError) {
	if h := rt.cfg.SessionHeader; h != "" {
		if s := r.Header.Get(h); s != "" {
			return ring.Request{Key: prefix.SessionKey("", s), Keyed: true}, nil
		}
	}
	if len(body) == 0 {
		return ring.Request{}, nil
	}
	key, ok, err := rt.keyer.Key(route, body)
	switch {
	case err != nil && route != prefix.RouteOther:
		return ring.Request{}, errBadRequest(err.Error())
	case err != nil || !ok:
		return ring.Request{}, nil
	}
	return ring.Request{Key: key, Keyed: true}, nil
}

// nonV1Routes are the inference servers' routes outside /v1 that the
// router proxies too (vLLM's and SGLang's).
var nonV1Routes = map[string]bool{
	"/tokenize": true, "/detokenize": true, "/pooling": true, "/classify": true,
	"/score": true, "/rerank": true, "/v2/rerank": true, "/generate": true,
}

func routeOf(path string) (prefix.Route, bool) {
	if strings.HasPrefix(path, "/v1/") || nonV1Routes[path] {
		return prefix.RouteOf(path), true
	}
	return 0, false
}

func exchangeOf(r *http.Request) *exchange { return r.Context().Value(exchangeKey{}).(*exchange) }

// rewrite points the outgoing request at the leased endpoint.
func (rt *Router) rewrite(pr *httputil.ProxyRequest) {
	x := exchangeOf(pr.In)
	pr.Out.URL = rt.target(x.lease.Endpoint, x)
	pr.Out.Host = ""
	if pr.Out.Body != nil {
		// ReverseProxy wraps the body in a type net/http cannot see
		// through; a bytes.Reader lets it send headers and body in one
		// write.
		pr.Out.Body = io.NopCloser(bytes.NewReader(x.body))
	}
	replayable(pr.Out, x.body)
	pr.SetXForwarded()
	pr.Out.Header.Del(rt.cfg.SessionHeader)
}

// target is the upstream URL of the exchange on endpoint id. An endpoint
// removed since the pick gets an empty host: the transport fails over to
// the key's next candidate.
func (rt *Router) target(id string, x *exchange) *url.URL {
	u := rt.targets.URL(id)
	if u == nil {
		return &url.URL{Path: x.path}
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path + x.path, RawQuery: x.query}
}

// replayable lets the shared Transport resend a request on a fresh
// connection to the same endpoint when a reused keep-alive connection turns
// out to be closed (uvicorn, under vLLM, drops idle connections after 5 s:
// a request can meet that close in flight). Without it the failure would
// reach the retry loop, move the request off its home and count against the
// endpoint's health. The nil-valued X-Idempotency-Key marks the request
// replayable to the Transport and is not sent on the wire: inference
// requests have no side effects beyond compute, the same reason failures
// before response headers are retried elsewhere.
func replayable(out *http.Request, body []byte) {
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	out.Header["X-Idempotency-Key"] = nil
}

func (rt *Router) modifyResponse(resp *http.Response) error {
	x := exchangeOf(resp.Request)
	x.status = resp.StatusCode
	resp.Header.Set("X-Prefixring-Endpoint", x.lease.Endpoint)
	resp.Header.Set("X-Prefixring-Decision", x.lease.Decision.String())
	return nil
}

func (rt *Router) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	x := exchangeOf(r)
	if r.Context().Err() != nil {
		x.status = 499 // the client went away; nobody reads an answer
		return
	}
	rt.log.Warn("upstream failed", "endpoint", x.lease.Endpoint, "tried", x.tried, "err", err)
	x.status = errUpstream.status
	writeError(w, errUpstream)
}

type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
