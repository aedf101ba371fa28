package proxy

import (
	"bytes"
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
)

// KeySource reads what routing needs from a request body (*prefix.Keyer
// and *prefix.Live implement it).
type KeySource interface {
	Request(route prefix.Route, body []byte, prefixes []uint64) (prefix.Key, error)
	Blocks(route prefix.Route, body []byte, dst []uint64) ([]uint64, error)
}

// Sketch counts the requests' anchor prefixes, to learn shared preambles,
// and their group keys, to learn each one's share (*prefix.Live implements it).
type Sketch interface {
	Observe(prefixes []uint64)
	ObserveGroup(group uint64)
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
	// Hold returns a context that ends when endpoint id stops answering
	// at all (its health probes time out: hung or gone), and a release to
	// call when the try no longer waits. A try still waiting for its
	// response headers there is abandoned and retried elsewhere, instead
	// of holding its client until --upstream-timeout. An endpoint that
	// leaves the set while held finishes the try: leaving is not failing.
	Hold(id string) (alive context.Context, release func())
}

// Observer hears whether an endpoint answered; the health checker ejects
// endpoints that keep failing.
type Observer interface {
	ObserveSuccess(id string)
	// ObserveFailure: a connection error or timeout.
	ObserveFailure(id string, err error)
	// ObserveServerError: a 5xx answer to request, a fingerprint of the
	// client's request equal for every try and retry of it.
	ObserveServerError(id string, request uint64, status int)
}

// Router is the request path: an http.Handler for the proxied routes.
type Router struct {
	cfg      Config
	picker   policy.Picker
	keys     KeySource
	sketch   Sketch
	targets  Targets
	observer Observer
	metrics  *Metrics
	log      *slog.Logger
	proxy    *httputil.ReverseProxy
	bodies   *bodyBudget
	history  *prefix.History // nil: off
}

// Deps are the Router's collaborators. Observer and Metrics may be nil.
type Deps struct {
	Picker policy.Picker
	Keys   KeySource
	// Sketch, when not nil, observes every keyed request's prefixes.
	Sketch   Sketch
	Targets  Targets
	Observer Observer
	Metrics  *Metrics
	Log      *slog.Logger
	// Transport carries requests upstream; nil means NewTransport(cfg).
	Transport http.RoundTripper
}

// NewRouter returns the request path.
func NewRouter(cfg Config, d Deps) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Picker == nil || d.Keys == nil || d.Targets == nil {
		return nil, errors.New("proxy: picker, key source and targets are required")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Transport == nil {
		d.Transport = NewTransport(cfg)
	}
	rt := &Router{cfg: cfg, picker: d.Picker, keys: d.Keys, sketch: d.Sketch, targets: d.Targets,
		observer: d.Observer, metrics: d.Metrics, log: d.Log, bodies: &bodyBudget{max: cfg.MaxBufferedBodyBytes}}
	if cfg.CompletionHistory > 0 {
		rt.history = prefix.NewHistory(cfg.CompletionHistory)
	}
	rt.proxy = &httputil.ReverseProxy{
		Rewrite:        rt.rewrite,
		Transport:      &retrying{rt: rt, base: d.Transport},
		ModifyResponse: rt.modifyResponse,
		ErrorHandler:   rt.errorHandler,
		BufferPool:     copyBuffers{},
		ErrorLog:       slog.NewLogLogger(d.Log.Handler(), slog.LevelDebug),
	}
	return rt, nil
}

// exchange is one client request's state, shared by the handler, the
// rewrite, the retrying transport and the response hooks.
type exchange struct {
	body   *body
	path   string // the client's path and query, sent to every try
	query  string
	req    ring.Request
	lease  ring.Lease              // the current try's
	cancel context.CancelCauseFunc // the current try's: ends it, closing its connection
	tried  []string
	status int
	start  time.Time // of the first try: the retry budget's origin
	// atEnd: the body copied to the client has returned io.EOF and is not
	// closed yet (endBody). The write of its last bytes is being made; the
	// handler returns soon after, and net/http sends what is still
	// buffered with the end of the response (see deadlineWriter).
	atEnd bool
}

type exchangeKey struct{}

// ServeHTTP routes one client request.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !cleanPath(r.URL) {
		rt.refuse(w, r, errBadPath)
		return
	}
	route, ok := routeOf(r.URL.Path)
	if !ok {
		rt.refuse(w, r, errNotFound)
		return
	}
	if route != prefix.RouteOther && r.Method != http.MethodPost {
		rt.refuse(w, r, errMethod(w, http.MethodPost))
		return
	}
	if r.ContentLength > rt.cfg.MaxBodyBytes {
		rt.refuse(w, r, errTooLarge)
		return
	}
	body, apiErr := rt.readBody(w, r)
	if apiErr != nil {
		rt.reject(w, apiErr)
		return
	}
	defer body.release()
	dropUpgrade(r.Header)
	x := &exchange{body: body, path: r.URL.Path, query: r.URL.RawQuery}
	if x.req, apiErr = rt.requestOf(r, route, body.bytes()); apiErr != nil {
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
	x.start = time.Now()
	r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x))
	// ReverseProxy only checks that there is a body; rewrite hands the
	// Transport its own reader of the buffered one.
	r.Body, r.ContentLength = http.NoBody, int64(len(body.bytes()))
	if r.ContentLength > 0 {
		r.Body = noBody{}
	}
	dw := newDeadlineWriter(w, rt.cfg.ClientWriteTimeout, &x.atEnd)
	dw.http10 = !r.ProtoAtLeast(1, 1)
	rt.proxy.ServeHTTP(dw, r)
}

// noBody stands for the client's body, already read.
type noBody struct{}

func (noBody) Read([]byte) (int, error) { return 0, errBodyClosed }
func (noBody) Close() error             { return nil }

func (rt *Router) reject(w http.ResponseWriter, e *apiError) {
	rt.metrics.request("", e.status, "none")
	writeError(w, e)
}

// requestOf derives the ring request: the session header's key, else the
// body's, else none (the least loaded endpoint takes it); with the body's
// size in tokens, estimated at 4 bytes each (a completion's new tokens
// from the History, when on), and what the policy reads.
func (rt *Router) requestOf(r *http.Request, route prefix.Route, body []byte) (ring.Request, *apiError) {
	tokens := int64(len(body) / 4)
	if route != prefix.RouteOther && len(bytes.TrimSpace(body)) == 0 {
		// Checked before the session header, whose requests go upstream
		// unparsed: an empty body is never a valid request on the JSON
		// routes the router keys, so it gets the router's 400 like any
		// other body the keyer refuses, not whatever an upstream makes
		// of it.
		return ring.Request{}, errEmptyBody
	}
	if h := rt.cfg.SessionHeader; h != "" {
		if s := r.Header.Get(h); s != "" {
			// The model and SGLang's lora_path are part of the session's
			// key: a session that switches models or adapters has a cache
			// per each. ModelAndLora reads only those members; the body is
			// still forwarded unparsed.
			model, lora := prefix.ModelAndLora(body)
			return ring.Request{Key: prefix.SessionKey(model, lora, s), Keyed: true, Session: true, Tokens: tokens}, nil
		}
	}
	if len(body) == 0 {
		return ring.Request{}, nil
	}
	var buf [64]uint64
	var prefixes []uint64
	if rt.sketch != nil {
		prefixes = buf[:0]
	}
	key, err := rt.keys.Request(route, body, prefixes)
	switch {
	case err != nil && route != prefix.RouteOther:
		return ring.Request{}, errBadRequest(err.Error())
	case err != nil || !key.Keyed:
		return ring.Request{Tokens: tokens}, nil
	}
	if rt.sketch != nil {
		rt.sketch.Observe(key.Prefixes)
		rt.sketch.ObserveGroup(key.Group)
	}
	return policy.BodyRequest(rt.keys, route, body, key, rt.history, rt.cfg.Blocks), nil
}

func exchangeOf(r *http.Request) *exchange { return r.Context().Value(exchangeKey{}).(*exchange) }

// rewrite prepares the first try's request.
func (rt *Router) rewrite(pr *httputil.ProxyRequest) {
	pr.SetXForwarded()
	if h := rt.cfg.SessionHeader; h != "" {
		pr.Out.Header.Del(h)
	}
	// The router read the body (net/http's server answered the client's
	// 100 Continue then); the upstream gets the whole request at once.
	pr.Out.Header.Del("Expect")
	rt.outgoing(pr.Out, exchangeOf(pr.In))
}

// outgoing points out at the exchange's leased endpoint with a fresh
// reader of the body, and returns it. It lets the shared Transport resend
// the request on a fresh connection to the same endpoint when a reused
// keep-alive connection turns out closed (uvicorn, under vLLM, drops idle
// connections after 5 s: a request can meet that close in flight): GetBody
// plus the nil-valued X-Idempotency-Key, which marks the request
// replayable to the Transport and is not sent on the wire (a client's own
// X-Idempotency-Key marks it too, and is sent). Inference requests have no
// side effects beyond compute, the same reason failed tries are retried
// elsewhere.
func (rt *Router) outgoing(out *http.Request, x *exchange) *http.Request {
	out.URL = rt.target(x.lease.Endpoint, x)
	out.Host = ""
	if out.ContentLength > 0 {
		out.Body = x.body.reader()
		out.GetBody = x.body.getBody
	}
	if _, ok := out.Header["X-Idempotency-Key"]; !ok {
		// A client's own key marks it replayable just the same, and
		// goes on to the upstream.
		out.Header["X-Idempotency-Key"] = nil
	}
	return out
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

func (rt *Router) modifyResponse(resp *http.Response) error {
	x := exchangeOf(resp.Request)
	x.status = resp.StatusCode
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if err := checkUpgrade(resp); err != nil {
			return err // ReverseProxy closes the connection, then errorHandler answers 502
		}
	}
	rewriteLocations(resp.Header, rt.targets.URL(x.lease.Endpoint))
	if rt.cfg.RoutingHeaders {
		if name := rt.endpointName(x.lease.Endpoint); name != "" {
			resp.Header.Set("X-Prefixring-Endpoint", name)
		}
		resp.Header.Set("X-Prefixring-Decision", x.lease.Decision.String())
	}
	if isEventStream(resp.Header) {
		id := x.lease.Endpoint
		resp.Body = &sseBody{ReadCloser: resp.Body, ctx: resp.Request.Context(), onCut: func(err error) {
			rt.metrics.streamCut(id)
			rt.log.Warn("upstream cut a stream", "endpoint", id, "err", err)
		}}
	} else {
		normalizeError(resp, x.cancel)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body = &endBody{ReadCloser: resp.Body, atEnd: &x.atEnd}
	}
	return nil
}

func (rt *Router) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	x := exchangeOf(r)
	if r.Context().Err() != nil {
		x.status = 499 // the client went away; nobody reads an answer
		return
	}
	e := errUpstream
	var ne net.Error
	switch {
	case errors.Is(err, errNoneSent):
		e = errNoHealthy // nothing failed: no endpoint could take it
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, errStreamIdle):
		e = errUpstreamTimeout
	}
	rt.log.Warn("upstream failed", "endpoint", x.lease.Endpoint, "tried", x.tried, "err", err)
	x.status = e.status
	writeError(w, e)
}

func (rt *Router) observeSuccess(id string) {
	if rt.observer != nil {
		rt.observer.ObserveSuccess(id)
	}
}

func (rt *Router) observeFailure(id string, err error) {
	if rt.observer != nil {
		rt.observer.ObserveFailure(id, err)
	}
}

func (rt *Router) observeServerError(id string, x *exchange, status int) {
	if rt.observer != nil {
		rt.observer.ObserveServerError(id, x.fingerprint(), status)
	}
}

// fingerprintSeed keys request fingerprints; they never leave the process.
var fingerprintSeed = maphash.MakeSeed()

// fingerprint identifies the client's request by its path and body, so a
// client's retries of it (OpenAI's SDKs resend the same body) are known
// as the same request.
func (x *exchange) fingerprint() uint64 {
	var h maphash.Hash
	h.SetSeed(fingerprintSeed)
	h.WriteString(x.path)
	h.WriteByte(0)
	h.Write(x.body.bytes())
	return h.Sum64()
}

// copyBuffers pools ReverseProxy's response copy buffers.
type copyBuffers struct{}

var copyPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyPool.Put(&b) }
