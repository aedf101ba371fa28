package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// completion is a whole non-streamed answer from upstream name, a little
// over 1 KiB: well inside what net/http buffers before a response's head
// leaves the router.
func completion(name string) string {
	return fmt.Sprintf(`{"id":"cmpl-1","object":"chat.completion","model":"m","served_by":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`,
		name, strings.Repeat("Paris ", 180))
}

// cutAnswer answers 200 with body as JSON, its length declared (or, with
// chunked, not), sends half of it, then drops the connection.
func cutAnswer(body string, chunked bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if !chunked {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		io.WriteString(w, body[:len(body)/2])
		w.(http.Flusher).Flush()
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
	}
}

// firstCut makes the first try on any of f's upstreams meet handler cut,
// and every later one a whole completion; it returns the name of the
// upstream that cut.
func firstCut(f *fixture, cut func(name string) http.HandlerFunc) *atomic.Pointer[string] {
	var by atomic.Pointer[string]
	for _, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			if by.CompareAndSwap(nil, &u.name) {
				cut(u.name)(w, r)
				return
			}
			answer(http.StatusOK, "application/json", completion(u.name))(w, r)
		})
	}
	return &by
}

func postChat(f *fixture) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	return f.srv.Client().Do(req)
}

func tries(f *fixture) (n int64) {
	for _, u := range f.ups {
		n += u.served.Load()
	}
	return n
}

// TestShortAnswerCutIsRetried: an upstream that answers 200 with a short
// JSON body of declared length and dies halfway through it has sent the
// client nothing yet (the router reads such an answer whole before passing
// it on), so the try fails like a connection error: it is retried on the
// key's next candidate, whose whole answer the client gets, and the cut is
// the endpoint's failure. Before the fix the router's copy of the body
// failed after ReverseProxy had taken the answer for a success, and it
// aborted the client's connection: the client saw a bare EOF, no status.
func TestShortAnswerCutIsRetried(t *testing.T) {
	f := newFixture(t, 3)
	by := firstCut(f, func(name string) http.HandlerFunc { return cutAnswer(completion(name), false) })
	resp, err := postChat(f)
	if err != nil {
		t.Fatalf("the client got no answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("status %d, then a failed transfer: %v after %d bytes", resp.StatusCode, err, len(b))
	}
	cutBy := *by.Load()
	if resp.StatusCode != http.StatusOK || strings.Contains(string(b), fmt.Sprintf("%q", cutBy)) || !strings.HasPrefix(string(b), `{"id"`) {
		t.Fatalf("status %d: %.120s; want the whole answer of an endpoint other than %s", resp.StatusCode, b, cutBy)
	}
	var whole bool
	for _, u := range f.ups {
		whole = whole || string(b) == completion(u.name)
	}
	if !whole {
		t.Fatalf("answer %.120q... (%d bytes) is no upstream's whole answer", b, len(b))
	}
	if n := tries(f); n != 2 || counterSum(t, f, "prefixring_retries_total") != 1 {
		t.Fatalf("%d tries, %v retries; want 2 and 1", n, counterSum(t, f, "prefixring_retries_total"))
	}
	for _, u := range f.ups {
		want := 0
		if u.name == cutBy {
			want = 1
		}
		if n := f.observed.failuresOf(mustID(t, u.URL)); n != want {
			t.Fatalf("%s: %d failures observed, want %d", u.name, n, want)
		}
	}
	waitIdle(t, f)
	waitFor(t, "the whole answer's bytes to go back to the budget", func() bool { return f.router.bodies.used.Load() == 0 })
}

// TestShortAnswerCutWithoutRetryIs502: the same cut where no retry is
// possible (one endpoint; retries off) is answered 502 in OpenAI's shape,
// never a short body passed off as a success, nor an aborted connection.
func TestShortAnswerCutWithoutRetryIs502(t *testing.T) {
	for name, f := range map[string]func(t *testing.T) *fixture{
		"one endpoint": func(t *testing.T) *fixture { return newFixture(t, 1) },
		"retries off":  func(t *testing.T) *fixture { return newFixture(t, 3, func(c *Config) { c.MaxRetries = 0 }) },
	} {
		t.Run(name, func(t *testing.T) {
			f := f(t)
			by := firstCut(f, func(name string) http.HandlerFunc { return cutAnswer(completion(name), false) })
			resp, err := postChat(f)
			if err != nil {
				t.Fatalf("the client got no answer: %v", err)
			}
			defer resp.Body.Close()
			assertAPIError(t, resp, http.StatusBadGateway, "upstream_error")
			if n := tries(f); n != 1 {
				t.Fatalf("%d tries, want 1", n)
			}
			for _, u := range f.ups {
				if u.name == *by.Load() {
					if n := f.observed.failuresOf(mustID(t, u.URL)); n != 1 {
						t.Fatalf("%d failures observed, want 1", n)
					}
				}
			}
			waitIdle(t, f)
			waitFor(t, "the cut answer's bytes to go back to the budget", func() bool { return f.router.bodies.used.Load() == 0 })
		})
	}
}

// TestCutAnswerOfUnknownLength: a JSON answer without a declared length
// (chunked) is passed on as it comes, as it may be long or slow to come:
// its head reaches the client before its body is whole, so a cut is not
// retried, and the client sees the transfer fail (its chunked body never
// ends), never a short body taken for whole. A cut event stream, short or
// not, keeps ending with the error event.
func TestCutAnswerOfUnknownLength(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			f := newFixture(t, 3)
			sent := completion("any")[:len(completion("any"))/2]
			for _, u := range f.ups {
				if stream {
					u.setHandler(dyingStream(fmt.Sprintf(chunk, "Paris"), false))
				} else {
					u.setHandler(cutAnswer(completion("any"), true))
				}
			}
			resp, err := postChat(f)
			if err != nil {
				t.Fatalf("the client got no answer: %v", err)
			}
			defer resp.Body.Close()
			checkCutAnswer(t, resp, stream, sent)
			if n := tries(f); n != 1 {
				t.Fatalf("%d tries, want 1", n)
			}
			waitIdle(t, f)
		})
	}
}

// TestStalledShortAnswerIs504: an upstream that sends the head and half of
// a short JSON answer, then nothing, is cut after StreamIdleTimeout: with
// no other endpoint, the client gets 504 in OpenAI's shape (the endpoint
// did not answer in time), and the upstream connection is closed. Before
// the fix the client saw its connection aborted with no status.
func TestStalledShortAnswerIs504(t *testing.T) {
	f := newFixture(t, 1, func(c *Config) { c.StreamIdleTimeout = 100 * time.Millisecond })
	gone := make(chan struct{})
	body := completion("up0")
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body[:len(body)/2])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	})
	resp, err := postChat(f)
	if err != nil {
		t.Fatalf("the client got no answer: %v", err)
	}
	defer resp.Body.Close()
	assertAPIError(t, resp, http.StatusGatewayTimeout, "upstream_error")
	within(t, gone, "the upstream connection to close")
	waitIdle(t, f)
}
