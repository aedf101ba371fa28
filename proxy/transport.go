package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// upstreamIdleTimeout closes pooled upstream connections idle this long.
// It sits below uvicorn's 5 s keep-alive timeout (vLLM and SGLang serve
// through uvicorn), so the router seldom reuses a connection just as the
// server drops it, and connections to endpoints that left are reaped within
// seconds.
const upstreamIdleTimeout = 4 * time.Second

// NewTransport returns the one Transport all upstream requests share:
// keep-alive pools sized for many concurrent streams, idle connections
// closed before the server closes them, a response-header timeout, no
// compression (the client's Accept-Encoding passes through).
func NewTransport(cfg Config) *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:           0,
		MaxIdleConnsPerHost:    cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:        upstreamIdleTimeout,
		ResponseHeaderTimeout:  cfg.UpstreamTimeout,
		TLSHandshakeTimeout:    cfg.DialTimeout,
		ExpectContinueTimeout:  0,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// retrying sends a request to the leased endpoint and, when the try fails
// before any byte reached the client, to the key's next candidate, never
// an endpoint already tried: at most MaxRetries more tries, none started
// after RetryTimeout. A try fails on a connection error, a timeout, or a
// gateway error (502, 503, 504: the endpoint or a proxy in front of it
// could not serve); a 500 is the server's answer to this request and is
// passed on (see retryable).
type retrying struct {
	rt   *Router
	base http.RoundTripper
}

var (
	errEndpointGone = errors.New("endpoint left the set")
	errEndpointDown = errors.New("endpoint stopped answering its health probes")
	errNoCandidate  = errors.New("no endpoint left to try")
	// errNoneSent: every pick had left the set, so no try was sent; the
	// client is answered as when no endpoint is available (errNoHealthy).
	errNoneSent = errors.New("every pick had left the set")
)

// endpointDownHook, when set (tests), runs on the goroutine that abandons
// a try whose endpoint stopped answering, before it abandons it: a test
// holds it back to show that the try's outcome does not depend on when
// that goroutine gets to run.
var endpointDownHook atomic.Pointer[func()]

func (t *retrying) RoundTrip(out *http.Request) (*http.Response, error) {
	x := exchangeOf(out)
	cfg := t.rt.cfg
	sent := false
	for try := 0; ; try++ {
		resp, err := t.send(out, x)
		sent = sent || !errors.Is(err, errEndpointGone)
		if !retryable(resp, err) || out.Context().Err() != nil {
			return resp, err
		}
		failed := x.lease.Endpoint
		x.tried = append(x.tried, failed)
		if errors.Is(err, errEndpointGone) {
			// Never sent: the balancer's view still held an endpoint the
			// set had just forgotten (endpoints leaving in quick
			// succession). It is no retry, so neither bound applies
			// (retries off included); x.tried bounds the picks.
			try--
		} else if try >= cfg.MaxRetries || time.Since(x.start) >= cfg.RetryTimeout {
			return resp, err
		}
		req := x.req
		req.Exclude = x.tried
		next, perr := t.rt.picker.Acquire(req)
		if perr != nil {
			if resp != nil {
				return resp, nil
			}
			if !sent {
				return nil, fmt.Errorf("%w (%w: %v)", errNoneSent, errNoCandidate, perr)
			}
			return nil, fmt.Errorf("%w (%w: %v)", err, errNoCandidate, perr)
		}
		t.rt.metrics.retried(failed)
		discard(resp, x.cancel)
		x.lease.Release()
		x.lease = next
		out = t.rt.outgoing(out.Clone(out.Context()), x)
		t.rt.log.Debug("retrying on next candidate", "failed", failed, "next", next.Endpoint, "status", statusOf(resp), "err", err)
	}
}

// retryable reports whether a try's outcome may be retried elsewhere.
func retryable(resp *http.Response, err error) bool {
	if err != nil {
		return true
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// discard drains a failed response and closes it.
func discard(resp *http.Response, abandon context.CancelCauseFunc) {
	if resp != nil {
		drain(resp.Body, abandon)
	}
}

// drainWait bounds the wait for the body of an answer the client will not
// see (drain): an error body comes with its headers, and one that does not
// is not worth the client's time.
const drainWait = time.Second

var errDrainStalled = errors.New("upstream body stalled while drained")

// drain reads a little of an unwanted body, so its connection can be
// reused, and closes it. A body that stalls is not waited for past
// drainWait: abandon, its try's, ends the try, which closes the connection.
func drain(body io.ReadCloser, abandon context.CancelCauseFunc) {
	stalled := time.AfterFunc(drainWait, func() { abandon(errDrainStalled) })
	_, _ = io.CopyN(io.Discard, body, 64<<10)
	stalled.Stop()
	body.Close()
}

func statusOf(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

// send makes one try and reports its outcome to the health checker: a
// connection error, a timeout or any 5xx counts against the endpoint (as
// Envoy's outlier detection counts consecutive 5xx), a 5xx with the
// request's fingerprint, so a request that fails everywhere is told from
// an endpoint that fails (upstream.Set.ObserveServerError); a resend on a fresh
// connection inside the Transport (a reused keep-alive connection the
// server had closed) never reaches here. The try's abandon is kept in
// x.cancel: drain ends a try whose unwanted body stalls with it.
func (t *retrying) send(out *http.Request, x *exchange) (*http.Response, error) {
	id := x.lease.Endpoint
	if out.URL.Host == "" {
		if out.Body != nil {
			out.Body.Close() // RoundTrip's contract: the body is always closed
		}
		return nil, errEndpointGone
	}
	start := time.Now()
	x.lease.Sent(start)
	client := out.Context()
	try, abandon := context.WithCancelCause(client)
	x.cancel = abandon
	alive, release := t.rt.targets.Hold(id)
	stop := context.AfterFunc(alive, func() {
		if hook := endpointDownHook.Load(); hook != nil {
			(*hook)()
		}
		abandon(errEndpointDown)
	})
	resp, err := t.base.RoundTrip(out.WithContext(try))
	// Stop watching before releasing the hold: releasing the last hold of
	// a departed endpoint ends its alive context, which must not abandon
	// this try's body, on its way now.
	watching := stop()
	release()
	if !watching {
		// The endpoint's alive context ended before we stopped watching,
		// so the function above has started; but it runs on a goroutine
		// of its own and may not have abandoned the try yet. Abandon it
		// here too (the first cause wins; a client that left first stays
		// the cause), or the answer would be passed on as a success and
		// cut mid-body a moment later, after its 200 reached the client.
		abandon(errEndpointDown)
	}
	if !watching && errors.Is(context.Cause(try), errEndpointDown) {
		// Abandoned while waiting for headers (or as they came): the
		// endpoint stopped answering its probes, and nothing reached the
		// client; retry elsewhere.
		if err == nil {
			resp.Body.Close()
			err = context.Cause(try)
		}
		return nil, fmt.Errorf("%w: %w", errEndpointDown, err)
	}
	switch {
	case client.Err() != nil:
		// The client left: not the endpoint's fault.
	case err != nil:
		t.rt.observeFailure(id, err)
	case resp.StatusCode >= 500:
		t.rt.observeServerError(id, x, resp.StatusCode)
	default:
		t.rt.observeSuccess(id)
	}
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The body is the tunnel's connection (an io.ReadWriteCloser,
		// which ReverseProxy needs): no wrapper, no idle timeout.
		return resp, nil
	}
	resp.Body = newIdleBody(resp.Body, t.rt.cfg.StreamIdleTimeout, abandon)
	resp.Body = &timedBody{ReadCloser: resp.Body, start: start, endpoint: id, lease: x.lease, rt: t.rt, ctx: client,
		answer: resp.StatusCode == http.StatusOK, stream: isEventStream(resp.Header)}
	if err := t.readWhole(out, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// maxWholeAnswer bounds the answers read whole before they are passed on
// (readWhole). 1 MiB holds what goes unstreamed in practice: a
// non-streamed completion of a few thousand tokens is tens of KiB of
// JSON (a few hundred KiB with top_logprobs), and a batch of a dozen
// 4096-dimension embeddings (about 80 KiB each as JSON) fits. An engine
// sends such an answer at once, when it is done, so the client waits
// longer only by its transfer (under a millisecond for 1 MiB at
// 10 Gbit/s), not by tokens.
const maxWholeAnswer = 1 << 20

// errAnswerCut wraps the error of an answer's body that ended before its
// declared length (or stalled, errStreamIdle) while read whole.
var errAnswerCut = errors.New("upstream answer cut")

// readWhole reads a short answer whole, so that an upstream dying in the
// middle of its body fails the try, which is retried elsewhere or answered
// 502 (504 when it stalled), as a connection error is. Passed on as it
// came, the answer's head is taken for a success (ReverseProxy writes it
// before the body), and a cut body can only abort the client's connection:
// the client of an answer of a few KiB got no status at all, as net/http
// had not sent its head yet.
//
// Only an answer of declared length up to maxWholeAnswer is read whole,
// and only while the budget of buffered bodies (Config.MaxBufferedBodyBytes)
// takes it; an event stream, an answer of unknown length (chunked: it may
// be a stream of another kind, such as NDJSON) or a longer one streams as
// before, and its client sees a cut as a failed transfer. Nor is a body
// the client would not get as it came: a gateway error's (retried, its
// body drained for a bounded time), or that of an error that is not JSON
// (normalizeError replaces it); waiting for those whole would hold the
// client as long as they stall. The read goes through the try's
// timedBody, so its timing, its lease's settling, the endpoint's failure
// when the body is cut, and the upstream metrics are those of a body
// copied to the client (the upstream time now ends when the router, not
// the client, has the last byte).
func (t *retrying) readWhole(out *http.Request, resp *http.Response) error {
	n := resp.ContentLength
	if n <= 0 || n > maxWholeAnswer || out.Method == http.MethodHead || isEventStream(resp.Header) ||
		retryable(resp, nil) || resp.StatusCode >= 400 && !isJSON(resp.Header) {
		return nil
	}
	held := n + bytes.MinRead // what the buffer below holds
	if !t.rt.bodies.reserve(held) {
		return nil
	}
	b := bytes.NewBuffer(make([]byte, 0, held))
	_, err := b.ReadFrom(resp.Body) // at most n bytes: the Transport stops at the declared length
	resp.Body.Close()
	if err != nil {
		t.rt.bodies.release(held)
		return fmt.Errorf("%w: %w", errAnswerCut, err)
	}
	resp.Body = &wholeBody{Reader: bytes.NewReader(b.Bytes()), release: func() { t.rt.bodies.release(held) }}
	return nil
}

// wholeBody is an answer read whole; Close gives its bytes back to the
// budget, once.
type wholeBody struct {
	*bytes.Reader
	release func()
	closed  atomic.Bool
}

func (b *wholeBody) Close() error {
	if !b.closed.Swap(true) {
		b.release()
	}
	return nil
}
