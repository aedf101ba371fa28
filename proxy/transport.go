package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// retrying sends a request to the leased endpoint and, when it fails before
// any response arrives (connection refused, reset, timeout), to the key's
// next candidate, never the same endpoint twice, up to MaxRetries times.
// Once a response has started, nothing is retried.
type retrying struct {
	rt   *Router
	base http.RoundTripper
}

var errEndpointGone = errors.New("endpoint left the set")

func (t *retrying) RoundTrip(out *http.Request) (*http.Response, error) {
	x := exchangeOf(out)
	for try := 0; ; try++ {
		resp, err := t.send(out, x)
		if err == nil {
			return resp, nil
		}
		if out.Context().Err() != nil {
			return nil, err
		}
		failed := x.lease.Endpoint
		t.rt.metrics.retried(failed)
		x.tried = append(x.tried, failed)
		if try >= t.rt.cfg.MaxRetries {
			return nil, err
		}
		x.lease.Release()
		req := x.req
		req.Exclude = x.tried
		next, perr := t.rt.picker.Acquire(req)
		if perr != nil {
			return nil, fmt.Errorf("%w (no endpoint left to retry: %v)", err, perr)
		}
		x.lease = next
		out = out.Clone(out.Context())
		out.URL = t.rt.target(next.Endpoint, x)
		out.Host = ""
		out.Body = io.NopCloser(bytes.NewReader(x.body))
		replayable(out, x.body)
		t.rt.log.Debug("retrying on next candidate", "failed", failed, "next", next.Endpoint, "err", err)
	}
}

// send makes one try and reports its outcome to the health checker.
func (t *retrying) send(out *http.Request, x *exchange) (*http.Response, error) {
	id := x.lease.Endpoint
	if out.URL.Host == "" {
		return nil, errEndpointGone
	}
	start := time.Now()
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		if t.rt.observer != nil {
			t.rt.observer.ObserveFailure(id, err)
		}
		return nil, err
	}
	if t.rt.observer != nil {
		switch resp.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			t.rt.observer.ObserveFailure(id, fmt.Errorf("status %d", resp.StatusCode))
		default:
			t.rt.observer.ObserveSuccess(id)
		}
	}
	resp.Body = &timedBody{ReadCloser: resp.Body, start: start, endpoint: id, m: t.rt.metrics}
	return resp, nil
}

// timedBody records time to first byte and total upstream time.
type timedBody struct {
	io.ReadCloser
	start    time.Time
	first    time.Duration
	sawBody  bool
	done     bool
	endpoint string
	m        *Metrics
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.sawBody {
		b.sawBody, b.first = true, time.Since(b.start)
	}
	if err != nil {
		b.finish()
	}
	return n, err
}

func (b *timedBody) Close() error {
	b.finish()
	return b.ReadCloser.Close()
}

func (b *timedBody) finish() {
	if !b.done {
		b.done = true
		b.m.upstream(b.endpoint, b.first, time.Since(b.start), b.sawBody)
	}
}
