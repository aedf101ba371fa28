package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prefixring/prefixring/upstream"
)

func answer(status int, contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// hangUp reads the request and closes the connection without an answer.
func hangUp(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		c.Close()
	}
}

const openAI500 = `{"error":{"message":"boom","type":"internal_error","param":null,"code":"boom"}}`

// TestEndpointAnswering500sIsEjected: one of three endpoints answers 500
// to every request. Its failures count toward passive ejection, as Envoy's
// outlier detection counts consecutive 5xx, so at most the failure
// threshold of requests (plus those already in flight to it when it is
// ejected) fail. Before the fix 500s did not count: the fast failures kept
// its in-flight count low, so it drew more traffic than the healthy ones,
// and 42 of 120 requests failed (notes/proxy.md).
func TestEndpointAnswering500sIsEjected(t *testing.T) {
	f := newFixture(t, 3)
	bad := f.ups[1]
	bad.setHandler(answer(500, "application/json", openAI500))
	for _, u := range []*fakeServer{f.ups[0], f.ups[2]} {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			time.Sleep(20 * time.Millisecond)
			io.WriteString(w, `{}`)
		})
	}
	const clients = 8
	var failed atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range 15 {
				resp := f.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"client %d request %d"}`, c, i))
				readAll(t, resp.Body)
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
				// The set ejects as it observes the failure; its
				// dispatcher then updates the balancer, on a goroutine
				// of its own. The bound below counts the tries that
				// race the failures, not that goroutine's scheduling:
				// on a busy machine it can run late by a whole test.
				if err := f.endpoints.WaitDispatched(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("failed %d of 120; served: bad %d, good %d and %d", failed.Load(), bad.served.Load(), f.ups[0].served.Load(), f.ups[2].served.Load())
	threshold := int64(upstream.DefaultHealthConfig().FailureThreshold)
	if failed.Load() > threshold+clients-1 || failed.Load() != bad.served.Load() {
		t.Fatalf("%d of 120 requests failed (the bad endpoint served %d)", failed.Load(), bad.served.Load())
	}
	if healthyOf(t, f, bad.URL) {
		t.Fatal("the endpoint answering 500s was not ejected")
	}
}

func healthyOf(t *testing.T, f *fixture, url string) bool {
	st, _ := f.balancer.Status()
	for _, e := range st {
		if e.ID == mustID(t, url) {
			return e.Healthy
		}
	}
	t.Fatalf("%s not in the set", url)
	return false
}

// TestFailedTriesAreRetriedElsewhere: a connection closed without an
// answer, 502, 503 and 504 from the key's home are retried on the next
// candidate before anything reaches the client; the failed answer is
// drained, so its connection is reused.
func TestFailedTriesAreRetriedElsewhere(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"hang-up": hangUp,
		"502":     answer(502, "text/html", "<html>bad gateway</html>"),
		"503":     answer(503, "application/json", `{"error":{"message":"overloaded"}}`),
		"504":     answer(504, "", ""),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, 3)
			bad := f.ups[0]
			bad.setHandler(h)
			badName := mustName(t, bad.URL)
			for i := range 30 {
				resp := f.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"prompt %d"}`, i))
				body := readAll(t, resp.Body)
				if resp.StatusCode != 200 || resp.Header.Get("X-Prefixring-Endpoint") == badName {
					t.Fatalf("request %d: %d from %s: %s", i, resp.StatusCode, resp.Header.Get("X-Prefixring-Endpoint"), body)
				}
			}
			if bad.served.Load() == 0 {
				t.Fatal("no request was homed on the failing endpoint; the test proves nothing")
			}
			if name != "hang-up" && bad.served.Load() > 1 && bad.conns.Load() != 1 {
				t.Fatalf("%d tries on %d connections: failed answers were not drained for reuse", bad.served.Load(), bad.conns.Load())
			}
		})
	}
}

func mustName(t *testing.T, raw string) string {
	ep, _, err := upstream.ParseEndpoint(raw)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Name == ep.URL.Host {
		return opaqueName(ep.ID) // no label: what X-Prefixring-Endpoint shows
	}
	return ep.Name
}

// TestRetriesNeverRepeatAnEndpoint: every endpoint answers 503. A request
// tries each endpoint at most once, however many retries are allowed, and
// the client gets exactly one answer: the last 503.
func TestRetriesNeverRepeatAnEndpoint(t *testing.T) {
	f := newFixture(t, 3, func(c *Config) { c.MaxRetries = 10 })
	for _, u := range f.ups {
		u.setHandler(answer(503, "application/json", `{"error":{"message":"overloaded","type":"server_error","param":null,"code":"overloaded"}}`))
	}
	resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
	assertAPIError(t, resp, 503, "server_error")
	for _, u := range f.ups {
		if n := u.served.Load(); n != 1 {
			t.Errorf("%s tried %d times, want once", u.name, n)
		}
	}
}

func TestMaxRetriesBoundsTheTries(t *testing.T) {
	f := newFixture(t, 4, func(c *Config) { c.MaxRetries = 1 })
	for _, u := range f.ups {
		u.setHandler(hangUp)
	}
	resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
	assertAPIError(t, resp, 502, "upstream_error")
	var tries int64
	for _, u := range f.ups {
		tries += u.served.Load()
	}
	if tries != 2 {
		t.Fatalf("%d tries with MaxRetries 1, want 2", tries)
	}
	if n := counterSum(t, f, "prefixring_retries_total"); n != 1 {
		t.Fatalf("prefixring_retries_total %v, want 1 (the try that was not retried is not counted)", n)
	}
}

func counterSum(t *testing.T, f *fixture, name string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestRetryBudget: a try that fails after the budget has passed is not
// retried: a request that sat in an upstream's queue is not replayed.
// Within the budget, the same failure is retried.
func TestRetryBudget(t *testing.T) {
	for _, tc := range []struct {
		budget time.Duration
		tries  int64
		status int
	}{{50 * time.Millisecond, 1, 503}, {time.Minute, 2, 200}} {
		f := newFixture(t, 2, func(c *Config) { c.RetryTimeout = tc.budget })
		var tries atomic.Int64
		for _, u := range f.ups {
			u.setHandler(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if tries.Add(1) == 1 {
					time.Sleep(100 * time.Millisecond) // queued, then failed
					w.WriteHeader(503)
					return
				}
				io.WriteString(w, `{}`)
			})
		}
		resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
		readAll(t, resp.Body)
		if resp.StatusCode != tc.status || tries.Load() != tc.tries {
			t.Fatalf("budget %v: status %d after %d tries, want %d after %d", tc.budget, resp.StatusCode, tries.Load(), tc.status, tc.tries)
		}
	}
}

// TestUpstreamTimeoutIs504: an upstream that never answers gets the
// request a 504 after UpstreamTimeout, counted as the endpoint's failure.
// Before the fix the client waited until it gave up itself.
func TestUpstreamTimeoutIs504(t *testing.T) {
	f := newFixture(t, 1, func(c *Config) { c.UpstreamTimeout = 100 * time.Millisecond })
	release := make(chan struct{})
	defer close(release)
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
	assertAPIError(t, resp, 504, "upstream_error")
	if n := f.observed.failuresOf(mustID(t, f.ups[0].URL)); n != 1 {
		t.Fatalf("%d failures observed, want 1", n)
	}
}

// TestUpstreamErrorsAreOpenAIShaped: an upstream error that is not JSON
// (uvicorn's plain-text 500, a proxy's HTML page) reaches the client with
// its status in OpenAI's shape; JSON errors pass unchanged.
func TestUpstreamErrorsAreOpenAIShaped(t *testing.T) {
	f := newFixture(t, 1)
	f.observed.inner = ignore{}
	vllm400 := `{"object":"error","message":"max_tokens too large","type":"BadRequestError","param":null,"code":400}`
	for _, tc := range []struct {
		h      http.HandlerFunc
		status int
		kind   string // "": passed through unchanged
	}{
		{answer(500, "text/plain; charset=utf-8", "Internal Server Error"), 500, "upstream_error"},
		{answer(404, "text/html", "<h1>Not Found</h1>"), 404, "invalid_request_error"},
		{answer(500, "application/json", openAI500), 500, ""},
		{answer(400, "application/json", vllm400), 400, ""},
	} {
		f.ups[0].setHandler(tc.h)
		resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
		if tc.kind != "" {
			assertAPIError(t, resp, tc.status, tc.kind)
			continue
		}
		if body := readAll(t, resp.Body); resp.StatusCode != tc.status || (body != openAI500 && body != vllm400) {
			t.Errorf("JSON error not passed through: %d %s", resp.StatusCode, body)
		}
	}
}

// TestStalledFailedAnswerIsNotWaitedFor: a 503 whose body never comes (its
// headers promise ten bytes, then nothing) is retried elsewhere at once.
// Before the fix the router drained the failed answer for its connection's
// reuse with no bound but StreamIdleTimeout, so the client waited that
// long (5 minutes by default) for an answer the next endpoint had ready.
func TestStalledFailedAnswerIsNotWaitedFor(t *testing.T) {
	f := newFixture(t, 2, func(c *Config) { c.StreamIdleTimeout = time.Minute })
	var tries atomic.Int64
	for _, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if tries.Add(1) == 1 {
				w.Header().Set("Content-Length", "10")
				w.WriteHeader(503)
				w.(http.Flusher).Flush()
				<-r.Context().Done() // the router gives up on the body
				return
			}
			io.WriteString(w, `{}`)
		})
	}
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x"}`))
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("no answer while the failed try's body stalled: %v", err)
	}
	body := readAll(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || tries.Load() != 2 {
		t.Fatalf("status %d after %d tries: %s", resp.StatusCode, tries.Load(), body)
	}
}

// TestStalledErrorBodyIsNotWaitedFor: a non-JSON error answer whose body
// never comes is passed on in OpenAI's shape at once: its body is
// replaced, so nothing of it is worth waiting for. Before the fix the
// router drained it first with no bound but StreamIdleTimeout.
func TestStalledErrorBodyIsNotWaitedFor(t *testing.T) {
	f := newFixture(t, 1, func(c *Config) { c.StreamIdleTimeout = time.Minute })
	f.observed.inner = ignore{}
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(500)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x"}`))
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("no answer while the error's body stalled: %v", err)
	}
	defer resp.Body.Close()
	assertAPIError(t, resp, 500, "upstream_error")
}
