package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
)

// TestEndpointLeavingMidRequestFinishesIt: an endpoint that leaves the set
// (a rolling update, a scale-down, a file edit) while it computes a
// non-streamed answer finishes that answer, and the client gets it: leaving
// is not failing. Before the fix the set ended the endpoint's alive context
// when it left, which abandoned the try still waiting for its headers and
// replayed it on the other endpoint (the work thrown away).
func TestEndpointLeavingMidRequestFinishesIt(t *testing.T) {
	f := newFixture(t, 2)
	started, finish := make(chan string, 1), make(chan struct{})
	hold := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		started <- r.Host
		<-finish // a long prefill: no header before the whole answer
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"cmpl-1","object":"chat.completion"}`)
	}
	for _, u := range f.ups {
		u.setHandler(hold)
	}
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("sys", "hello")))
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		done <- resp
	}()
	host := <-started
	var leaving, staying *fakeServer
	for _, u := range f.ups {
		if u.Listener.Addr().String() == host {
			leaving = u
		} else {
			staying = u
		}
	}
	f.setEndpoints(t, staying.URL) // it leaves discovery mid-request
	close(finish)
	resp := <-done
	if resp == nil {
		t.Fatal("no response")
	}
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 || leaving.served.Load() != 1 || staying.served.Load() != 0 {
		t.Fatalf("status %d %s; the leaving endpoint served %d, the staying one %d (want 200, 1, 0: no retry)",
			resp.StatusCode, body, leaving.served.Load(), staying.served.Load())
	}
	if n := f.observed.failuresOf(mustID(t, leaving.URL)); n != 0 {
		t.Fatalf("leaving counted as %d failures", n)
	}
}

// TestLeavingEndpointFinishesItsBody: the same, with the answer's headers
// sent before its body. The try held the departed endpoint until its
// headers; releasing that last hold forgot the endpoint and cancelled its
// alive context, which the try still watched, so the try was abandoned
// while its body was on the way: the client lost the answer (an EOF from
// the router, seen once in chaos's rolling update). A try stops watching
// before it releases its hold.
func TestLeavingEndpointFinishesItsBody(t *testing.T) {
	f := newFixture(t, 2)
	started, headers, finish := make(chan string, 1), make(chan struct{}), make(chan struct{})
	outcome := make(chan string, 1)
	hold := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		started <- r.Host
		<-headers
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-finish:
			io.WriteString(w, "data: {\"id\":\"cmpl-1\"}\n\ndata: [DONE]\n\n")
			outcome <- "finished"
		case <-r.Context().Done():
			outcome <- "abandoned"
		}
	}
	for _, u := range f.ups {
		u.setHandler(hold)
	}
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`))
		resp, err := f.srv.Client().Do(req)
		done <- result{resp, err}
	}()
	host := <-started
	for _, u := range f.ups {
		if u.Listener.Addr().String() != host {
			f.setEndpoints(t, u.URL) // the answering endpoint leaves discovery
		}
	}
	close(headers)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.resp.Body.Close()
	// The client has the headers: the router's try released its hold.
	// Give an abandonment every chance to reach the endpoint first.
	select {
	case o := <-outcome:
		t.Fatalf("the endpoint's request was %s before its body was asked for", o)
	case <-time.After(200 * time.Millisecond):
	}
	close(finish)
	body := readAll(t, r.resp.Body)
	if o := <-outcome; o != "finished" || !strings.Contains(body, "[DONE]") {
		t.Fatalf("outcome %s, body %q", o, body)
	}
}

// TestDepartedPicksCostNoRetry: while endpoints leave in quick succession
// (workers removed under load), the balancer can still hand out endpoints
// the set has already forgotten. A try on one is never sent, so it uses up
// none of the request's retries: the request goes on to an endpoint that is
// there. Before the fix, three departed picks in a row (workers churned
// through the admin API under load, 1 request of 1,600) answered 502.
//
// With retries off (RetryTimeout 0, or MaxRetries 0) the same holds:
// before that fix, a departed pick under RetryTimeout 0 answered 502, the
// budget's check coming before the pick was known to cost nothing.
func TestDepartedPicksCostNoRetry(t *testing.T) {
	for name, tweak := range map[string]func(*Config){
		"default":         func(*Config) {}, // MaxRetries 2: three tries
		"retry timeout 0": func(c *Config) { c.RetryTimeout = 0 },
		"max retries 0":   func(c *Config) { c.MaxRetries = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, 1, tweak)
			real := mustID(t, f.ups[0].URL)
			eps := []ring.Endpoint{{ID: real, Healthy: true}}
			for i := range 4 {
				eps = append(eps, ring.Endpoint{ID: fmt.Sprintf("http://departed-%d:8000", i), Healthy: true})
			}
			if err := f.balancer.Update(eps); err != nil {
				t.Fatal(err)
			}
			for i := range 30 {
				resp := f.post(t, "/v1/chat/completions", chatBody("sys", fmt.Sprintf("prompt %d", i)))
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("prompt %d: %d %s (the balancer's departed picks used up its retries)", i, resp.StatusCode, readAll(t, resp.Body))
				}
			}
		})
	}
}

// TestOnlyDepartedPicksAnswerNoHealthy: when every endpoint the balancer
// hands out has already left the set, no try is ever sent, so the client
// gets the answer for no endpoint at all (503 no_healthy_endpoint, which
// clients retry), not 502 "the endpoints failed to answer". A try that
// was sent and failed still answers 502 ("failed, then departed").
func TestOnlyDepartedPicksAnswerNoHealthy(t *testing.T) {
	t.Run("only departed", func(t *testing.T) {
		f := newFixture(t, 1)
		if err := f.balancer.Update(departed(3)); err != nil {
			t.Fatal(err)
		}
		resp := f.post(t, "/v1/chat/completions", chatBody("sys", "hello"))
		defer resp.Body.Close()
		assertAPIError(t, resp, http.StatusServiceUnavailable, "service_unavailable")
		if f.ups[0].served.Load() != 0 {
			t.Fatal("the set's endpoint, not in the balancer, was sent the request")
		}
	})
	t.Run("failed, then departed", func(t *testing.T) {
		f := newFixture(t, 1)
		f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
		})
		eps := append([]ring.Endpoint{{ID: mustID(t, f.ups[0].URL), Healthy: true}}, departed(3)...)
		if err := f.balancer.Update(eps); err != nil {
			t.Fatal(err)
		}
		resp := f.post(t, "/v1/chat/completions", chatBody("sys", "hello"))
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || f.ups[0].served.Load() != 1 {
			t.Fatalf("%d after %d sent tries, want the endpoint's 502 after 1", resp.StatusCode, f.ups[0].served.Load())
		}
	})
}

// departed is n endpoints the balancer may hand out that the set no
// longer holds.
func departed(n int) []ring.Endpoint {
	var eps []ring.Endpoint
	for i := range n {
		eps = append(eps, ring.Endpoint{ID: fmt.Sprintf("http://departed-%d:8000", i), Healthy: true})
	}
	return eps
}
