package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prefixring/prefixring/upstream"
)

// TestTriesOnAHungEndpointAreAbandonedWhenItsProbesFail: an endpoint that
// accepts connections and answers nothing, its health probe included, holds
// a request only until its probes eject it; the request then goes to the
// key's next candidate and succeeds, long before --upstream-timeout. (Without
// that, a hang holds the client until the client gives up.)
func TestTriesOnAHungEndpointAreAbandonedWhenItsProbesFail(t *testing.T) {
	f := newFixtureWith(t, 2, fixtureOpts{
		cfg:    func(c *Config) { c.UpstreamTimeout, c.RetryTimeout = time.Hour, time.Hour },
		health: func(h *upstream.HealthConfig) { h.Timeout = 100 * time.Millisecond },
	})
	hung := f.ups[0]
	hungName := mustName(t, hung.URL)
	// A prompt whose home is the endpoint about to hang.
	body := ""
	for i := 0; body == ""; i++ {
		b := fmt.Sprintf(`{"model":"m","prompt":"hung %d"}`, i)
		resp := f.post(t, "/v1/completions", b)
		readAll(t, resp.Body)
		if resp.Header.Get("X-Prefixring-Endpoint") == hungName {
			body = b
		}
	}
	served := hung.served.Load()
	hung.hung.Store(true)
	type result struct {
		status   int
		endpoint string
	}
	done := make(chan result, 1)
	go func() {
		resp := f.post(t, "/v1/completions", body)
		readAll(t, resp.Body)
		done <- result{resp.StatusCode, resp.Header.Get("X-Prefixring-Endpoint")}
	}()
	waitFor(t, "the request to reach the hung endpoint", func() bool { return hung.served.Load() > served })
	select {
	case r := <-done:
		t.Fatalf("answered %+v before the endpoint was found hung", r)
	case <-time.After(50 * time.Millisecond):
	}
	// Three probes time out (their own 100 ms timeout): the endpoint is
	// ejected.
	for range 3 {
		f.endpoints.ProbeAll(context.Background())
	}
	select {
	case r := <-done:
		if r.status != 200 || r.endpoint == hungName {
			t.Fatalf("after the ejection: %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request still waits on the hung endpoint after its probes ejected it")
	}
	hung.hung.Store(false)
}
