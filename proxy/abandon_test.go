package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// downTargets is the endpoint set with one endpoint (down) whose probes
// have already failed: its alive context is over before any try holds it.
type downTargets struct {
	Targets
	down atomic.Pointer[string]
}

func (d *downTargets) Hold(id string) (context.Context, func()) {
	alive, release := d.Targets.Hold(id)
	if down := d.down.Load(); down != nil && id == *down {
		ctx, cancel := context.WithCancelCause(alive)
		cancel(errors.New("probes failed"))
		return ctx, release
	}
	return alive, release
}

// stallingBody sends the start of an answer, then nothing until its try's
// context ends: it comes to a good end only if nobody cancels the try.
type stallingBody struct {
	ctx  context.Context
	sent bool
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, `{"id":"cut",`), nil
	}
	<-b.ctx.Done()
	return 0, context.Cause(b.ctx)
}

func (b *stallingBody) Close() error { return nil }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTryOnADownEndpointIsNeverPassedOn: a try whose endpoint's alive
// context ended while it waited for headers is abandoned and retried
// elsewhere, even when its headers came at once and the goroutine that
// abandons it has not run yet. Before the fix send judged the try by
// context.Cause alone, which that goroutine sets: when it ran late (170
// of 200 tries in the reviewer's run), send passed the answer on as a
// success, and a moment later the abandon cancelled it mid-body, so the
// client got 200 and a cut body. Here that goroutine is held back until
// the client has the response head, so the old code fails every time.
func TestTryOnADownEndpointIsNeverPassedOn(t *testing.T) {
	for _, contentType := range []string{"application/json", "text/event-stream"} {
		t.Run(contentType, func(t *testing.T) { testDownEndpointRetried(t, contentType) })
	}
}

func testDownEndpointRetried(t *testing.T, contentType string) {
	gate := make(chan struct{})
	openGate := sync.OnceFunc(func() { close(gate) })
	hold := func() { <-gate }
	endpointDownHook.Store(&hold)
	t.Cleanup(func() {
		openGate()
		endpointDownHook.Store(nil)
	})

	// The down endpoint answers 200 at once with a stalling body; the
	// other one is a fake server behind a real Transport.
	real := NewTransport(DefaultConfig())
	t.Cleanup(real.CloseIdleConnections)
	var downHost atomic.Pointer[string]
	var downTries atomic.Int64
	transport := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if h := downHost.Load(); h == nil || r.URL.Host != *h {
			return real.RoundTrip(r)
		}
		downTries.Add(1)
		if r.Body != nil {
			r.Body.Close() // RoundTrip's contract
		}
		return &http.Response{
			StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Type": {contentType}},
			Body:          &stallingBody{ctx: r.Context()},
			ContentLength: -1, Request: r,
		}, nil
	})
	targets := &downTargets{}
	f := newFixtureWith(t, 2, fixtureOpts{
		transport: transport,
		targets:   func(inner Targets) Targets { targets.Targets = inner; return targets },
	})
	down, up := f.ups[0], f.ups[1]
	downID, downAddr := mustID(t, down.URL), down.Listener.Addr().String()
	targets.down.Store(&downID)
	downHost.Store(&downAddr)

	// Prompts until one's home is the down endpoint (about every other
	// one is); those homed on the other never meet it.
	for i := 0; downTries.Load() == 0; i++ {
		if i == 100 {
			t.Fatal("no prompt of 100 had the down endpoint for its home")
		}
		resp := f.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"down %d"}`, i))
		tried := downTries.Load() > 0
		if tried {
			openGate() // the abandoning goroutine runs only now
		}
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || err != nil || !strings.Contains(string(body), `"served_by":"up1"`) {
			t.Fatalf("prompt %d (home down: %v): status %d, body %q, read error %v; want 200 and the other endpoint's whole answer",
				i, tried, resp.StatusCode, body, err)
		}
		if got, want := resp.Header.Get("X-Prefixring-Endpoint"), mustName(t, up.URL); got != want {
			t.Fatalf("prompt %d answered by %q, want %q", i, got, want)
		}
	}
	waitIdle(t, f) // every lease, the abandoned try's included, is released
}
