package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCanceledStreamsLeakNothing opens many streams and abandons them at
// random points, before and after the first event: every lease is released,
// every upstream connection is either pooled or closed (closing the pool
// closes them all), and the goroutine
// count returns to where it was. GC is off meanwhile: a leaked connection's
// finalizer would otherwise close it and hide the leak.
func TestCanceledStreamsLeakNothing(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	f := newFixture(t, 3)
	for _, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; ; i++ {
				if _, err := fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(time.Millisecond):
				}
			}
		})
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	// Warm the pools once so the baseline counts their goroutines.
	warm, cancelWarm := context.WithCancel(context.Background())
	defer cancelWarm()
	req, _ := http.NewRequestWithContext(warm, http.MethodPost, f.srv.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"warm","stream":true}`))
	if resp, err := client.Do(req); err == nil {
		resp.Body.Read(make([]byte, 64))
		cancelWarm()
		resp.Body.Close()
	}
	waitIdle(t, f)
	before := runtime.NumGoroutine()

	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			body := fmt.Sprintf(`{"model":"m","prompt":"stream %d","stream":true}`, i%17)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/completions", strings.NewReader(body))
			if i%4 == 0 {
				time.AfterFunc(time.Duration(i%7)*100*time.Microsecond, cancel) // maybe before any byte
			}
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			buf := make([]byte, 16+i%200)
			for range i % 5 {
				if _, err := resp.Body.Read(buf); err != nil {
					break
				}
			}
			cancel()
			resp.Body.Close()
		})
	}
	wg.Wait()
	waitIdle(t, f)
	// Every upstream connection the router still holds must be idle in
	// its pool: closing the idle ones must leave none open. A connection
	// leaked in use (a body never closed) would stay open.
	f.transport.CloseIdleConnections()
	waitFor(t, "upstream connections to be closed with the idle pool", func() bool {
		var open int64
		for _, u := range f.ups {
			open += u.open.Load()
		}
		return open == 0
	})
	client.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+5 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitIdle waits until no lease is held. Inflight().Total() alone does
// not show it: under the default SignalTokens a lease settled by its
// first byte weighs 0 there until its release. Every lease holds at least
// one token of K until then.
func waitIdle(t *testing.T, f *fixture) {
	t.Helper()
	in := f.balancer.Inflight()
	deadline := time.Now().Add(10 * time.Second)
	for in.Total() != 0 || in.KV().Total() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("leases still held: load %d, KV %d", in.Total(), in.KV().Total())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
