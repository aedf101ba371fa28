package proxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The worst faults a gateway can have: a client given another client's
// answer (or part of one), a request answered twice, or one lost. These
// tests run many clients at once, each with its own prompt, against
// upstreams that echo what they read, and check every answer byte for
// byte against the request it answers.

// echoAnswer is what echoUpstream answers a request with body b: lines
// (or, streamed, events) naming the request's id and a hash of the whole
// body the upstream read, long enough to take several reads of the
// router's copy buffer, then [DONE] for a stream. A body read corrupt, or
// an answer mixed with another, shows in the bytes.
func echoAnswer(id int, b []byte, stream bool) []string {
	sum := sha256.Sum256(b)
	var parts []string
	for i := range 40 {
		pad := strings.Repeat("x", (id*7+i*131)%3000)
		if stream {
			parts = append(parts, fmt.Sprintf("data: {\"id\":%d,\"sum\":\"%x\",\"i\":%d,\"pad\":%q}\n\n", id, sum[:8], i, pad))
		} else {
			parts = append(parts, fmt.Sprintf("%d/%x/%d/%s\n", id, sum[:8], i, pad))
		}
	}
	if stream {
		parts = append(parts, "data: [DONE]\n\n")
	}
	return parts
}

// echoUpstream answers with echoAnswer, as a stream when the request asks
// for one (X-Test-Stream), and echoes X-Request-Id as vLLM does. fail
// picks the requests it answers 503 instead (before reading their body,
// or after, by id), so they are retried elsewhere.
func echoUpstream(fail func(id int) bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.Atoi(r.Header.Get("X-Test-ID"))
		if fail(id) {
			if id%2 == 0 {
				io.Copy(io.Discard, r.Body)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"message":"overloaded","type":"server_error","param":null,"code":"overloaded"}}`)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if rid := r.Header.Get("X-Request-Id"); rid != "" {
			w.Header().Set("X-Request-Id", rid)
		}
		w.Header().Set("X-Echo-Id", strconv.Itoa(id))
		stream := r.Header.Get("X-Test-Stream") != ""
		if stream {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "text/plain")
		}
		for _, p := range echoAnswer(id, b, stream) {
			if _, err := io.WriteString(w, p); err != nil {
				return
			}
			if stream {
				w.(http.Flusher).Flush()
			}
		}
	}
}

// TestEveryClientGetsItsOwnAnswer: clients at once, with bodies of every
// size (copied out of the pool, pooled, past the largest pooled class),
// plain and streamed answers larger than the copy buffer, a third of the
// requests failed with 503 on their first endpoint and retried, and some
// streams abandoned after their first event, over client and upstream
// connections that are reused. Recycled body buffers are poisoned. Every
// answer must be exactly the one its own request's body produces, with its
// own X-Request-Id and no one else's; an abandoned stream must have got a
// prefix of its own; and every lease and body must be given back.
func TestEveryClientGetsItsOwnAnswer(t *testing.T) {
	poisonRecycled(t)
	holds := &countedHolds{}
	f := newFixtureWith(t, 3, fixtureOpts{targets: func(in Targets) Targets { holds.Targets = in; return holds }})
	f.observed.inner = ignore{} // the 503s must not eject anything: this test is about answers
	for k, u := range f.ups {
		u.setHandler(echoUpstream(func(id int) bool { return k == 0 && id%3 == 0 }))
	}
	before := liveBodies.Load()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()
	sizes := []int{300, 2000, 5000, 70_000, 300_000, 5_000_000}
	var answered, abandoned, retried atomic.Int64
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Go(func() {
			for i := range 20 {
				id := w*100 + i
				body := hostileBody(id, sizes[(id+i)%len(sizes)])
				stream := id%2 == 1
				abandon := id%10 == 5
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/completions", strings.NewReader(body))
				req.Header.Set("X-Test-ID", strconv.Itoa(id))
				if stream {
					req.Header.Set("X-Test-Stream", "1")
				}
				if id%4 != 3 {
					req.Header.Set("X-Request-Id", fmt.Sprintf("req-%d", id))
				}
				err := checkOwnAnswer(client, req, id, []byte(body), stream, abandon, cancel)
				cancel()
				if err != nil {
					t.Errorf("request %d (%d bytes, stream %v): %v", id, len(body), stream, err)
					continue
				}
				if abandon {
					abandoned.Add(1)
				} else {
					answered.Add(1)
				}
				if id%3 == 0 {
					retried.Add(1)
				}
			}
		})
	}
	wg.Wait()
	waitIdle(t, f)
	waitFor(t, "every request body to go back to the pool", func() bool { return liveBodies.Load() == before })
	if n := holds.open.Load(); n != 0 {
		t.Fatalf("%d holds on endpoints never released", n)
	}
	t.Logf("%d answered in full, %d streams abandoned; %d retries counted", answered.Load(), abandoned.Load(), int(counterSum(t, f, "prefixring_retries_total")))
	if counterSum(t, f, "prefixring_retries_total") == 0 {
		t.Fatal("no request was retried; the test proves less than it claims")
	}
}

// checkOwnAnswer sends req and checks that its answer is exactly the one
// echoUpstream gives body, id's own. An abandoned stream is read up to
// its first event, which must be its own, and then cancelled.
func checkOwnAnswer(client *http.Client, req *http.Request, id int, body []byte, stream, abandon bool, cancel func()) error {
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	if got := resp.Header.Get("X-Echo-Id"); got != strconv.Itoa(id) {
		return fmt.Errorf("answer for request %s", got)
	}
	wantRID := fmt.Sprintf("req-%d", id)
	if id%4 == 3 {
		wantRID = ""
	}
	if got := resp.Header.Values("X-Request-Id"); strings.Join(got, ",") != wantRID {
		return fmt.Errorf("X-Request-Id %q, want %q", got, wantRID)
	}
	want := strings.Join(echoAnswer(id, body, stream), "")
	if abandon {
		first := echoAnswer(id, body, stream)[0]
		got := make([]byte, len(first))
		if _, err := io.ReadFull(bufio.NewReader(resp.Body), got); err != nil {
			return err
		}
		if string(got) != first {
			return fmt.Errorf("first event %.80q, want %.80q", got, first)
		}
		cancel()
		return nil
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%w after %d bytes", err, len(got))
	}
	if string(got) != want {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		return fmt.Errorf("answer differs from its own at byte %d of %d (%d received): %.80q", i, len(want), len(got), got[i:])
	}
	return nil
}

// TestNothingIsRetriedOnceTheAnswerStarted: an endpoint that sends its
// answer's headers and part of its body, then dies, is not retried on
// another endpoint, streamed or not: the client already has the start of
// that answer, and a second one would be spliced onto it. The stream ends
// with the error event; a plain answer, whose length was promised (over
// maxWholeAnswer, so it is passed on as it comes), is cut (the client
// sees the transfer fail, not a short body taken for whole). A shorter
// one is read whole first, and retried (TestShortAnswerCutIsRetried).
func TestNothingIsRetriedOnceTheAnswerStarted(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			partial := `{"id":"cmpl-1","choices":[{"text":"` + strings.Repeat("Paris ", 4000)
			f := newFixture(t, 3)
			f.observed.inner = ignore{}
			for _, u := range f.ups {
				u.setHandler(func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
					if stream {
						w.Header().Set("Content-Type", "text/event-stream")
						io.WriteString(w, fmt.Sprintf(chunk, "Paris"))
					} else {
						// More than the router's client-side buffers
						// hold, so its head reaches the client.
						w.Header().Set("Content-Type", "application/json")
						w.Header().Set("Content-Length", strconv.Itoa(maxWholeAnswer+1))
						io.WriteString(w, partial)
					}
					w.(http.Flusher).Flush()
					if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
						c.Close()
					}
				})
			}
			resp := f.post(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			checkCutAnswer(t, resp, stream, partial)
			var tries int64
			for _, u := range f.ups {
				tries += u.served.Load()
			}
			if tries != 1 || counterSum(t, f, "prefixring_retries_total") != 0 {
				t.Fatalf("%d tries, %v retries: an answer that had started was retried", tries, counterSum(t, f, "prefixring_retries_total"))
			}
			waitIdle(t, f)
		})
	}
}

// countingTransport counts the tries the router sends.
type countingTransport struct {
	http.RoundTripper
	tries atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.tries.Add(1)
	return c.RoundTripper.RoundTrip(r)
}

// TestNoRetryAfterTheClientLeft: a client that hangs up while its first
// try waits for an answer ends the try, which fails; that failure is not
// retried elsewhere: nobody would read the answer, and the other endpoint
// would compute it for nothing.
func TestNoRetryAfterTheClientLeft(t *testing.T) {
	base := NewTransport(DefaultConfig())
	t.Cleanup(base.CloseIdleConnections)
	counting := &countingTransport{RoundTripper: base}
	f := newFixtureWith(t, 2, fixtureOpts{transport: counting})
	arrived := make(chan struct{}, 2)
	ended := make(chan struct{}, 2)
	for _, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			arrived <- struct{}{}
			<-r.Context().Done() // the router ends the try when its client leaves
			ended <- struct{}{}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x"}`))
	done := make(chan struct{}, 1)
	go func() {
		if resp, err := f.srv.Client().Do(req); err == nil {
			resp.Body.Close()
		}
		done <- struct{}{}
	}()
	within(t, arrived, "the first try")
	cancel()
	within(t, done, "the client's request to end")
	within(t, ended, "the first try to be ended")
	waitIdle(t, f) // the handler has returned: no try is left to come
	if n := counting.tries.Load(); n != 1 {
		t.Fatalf("%d tries sent for a client that had left after the first", n)
	}
	if n := counterSum(t, f, "prefixring_retries_total"); n != 0 {
		t.Fatalf("prefixring_retries_total %v after the client left", n)
	}
	if f.ups[0].served.Load()+f.ups[1].served.Load() != 1 {
		t.Fatal("an endpoint received the request of a client that had left")
	}
}

// TestAbandonedAnswerIsNeverTheNextClients: a client abandons a stream,
// or a long plain answer, partway; the upstream is still writing it. The
// upstream request is ended (the engine stops generating), and the next
// clients, whose requests go to the same endpoint over the router's
// pooled connections, each get exactly their own answer: never the rest
// of the abandoned one.
func TestAbandonedAnswerIsNeverTheNextClients(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			f := newFixture(t, 1)
			ended := make(chan struct{}, 1)
			f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if r.Header.Get("X-Test-Endless") == "" {
					io.WriteString(w, "answer to "+string(b))
					return
				}
				defer func() { ended <- struct{}{} }()
				if stream {
					w.Header().Set("Content-Type", "text/event-stream")
				} else {
					w.Header().Set("Content-Type", "text/plain")
					w.Header().Set("Content-Length", strconv.Itoa(1<<30))
				}
				for i := 0; ; i++ {
					if _, err := fmt.Fprintf(w, "data: abandoned answer, part %d\n\n", i); err != nil {
						return
					}
					w.(http.Flusher).Flush()
				}
			})
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"endless"}`))
			req.Header.Set("X-Test-Endless", "1")
			resp, err := f.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "data: abandoned answer, part 0\n" {
				t.Fatalf("first line %q, %v", line, err)
			}
			cancel()
			resp.Body.Close()
			within(t, ended, "the abandoned upstream request to be ended")
			for i := range 20 {
				body := fmt.Sprintf(`{"model":"m","prompt":"next client %d"}`, i)
				resp := f.post(t, "/v1/completions", body)
				if got := readAll(t, resp.Body); resp.StatusCode != 200 || got != "answer to "+body {
					t.Fatalf("client %d got %d %.80q", i, resp.StatusCode, got)
				}
			}
			waitIdle(t, f)
		})
	}
}

// TestHopByHopHeadersStopAtTheRouter: the headers that concern one
// connection (RFC 9110 §7.6.1), and those the Connection header names,
// are not forwarded either way: a client's do not reach the upstream,
// and the upstream's do not reach the client.
func TestHopByHopHeadersStopAtTheRouter(t *testing.T) {
	f := newFixture(t, 1)
	got := make(chan http.Header, 1)
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got <- r.Header.Clone()
		w.Header().Set("Connection", "X-Upstream-Conn")
		w.Header().Set("X-Upstream-Conn", "private")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Proxy-Authenticate", "Basic")
		w.Header().Set("X-Request-Id", "req-1")
		io.WriteString(w, `{}`)
	})
	resp := f.post(t, "/v1/chat/completions", chatBody("s", "u"),
		"Connection", "X-Client-Conn", "X-Client-Conn", "private", "Keep-Alive", "timeout=5",
		"Proxy-Connection", "keep-alive", "Proxy-Authorization", "Basic eDp5", "Te", "gzip", "X-Request-Id", "req-1")
	readAll(t, resp.Body)
	h := <-got
	for _, k := range []string{"X-Client-Conn", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Te"} {
		if v := h.Values(k); len(v) != 0 {
			t.Errorf("upstream got the client's %s: %q", k, v)
		}
	}
	for _, k := range []string{"X-Upstream-Conn", "Keep-Alive", "Proxy-Authenticate"} {
		if v := resp.Header.Values(k); len(v) != 0 {
			t.Errorf("client got the upstream's %s: %q", k, v)
		}
	}
	if h.Get("X-Request-Id") != "req-1" || resp.Header.Get("X-Request-Id") != "req-1" {
		t.Errorf("X-Request-Id not passed both ways: %q up, %q down", h.Get("X-Request-Id"), resp.Header.Get("X-Request-Id"))
	}
}

// within waits for a value on ch, failing the test after 10 s.
func within[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// countedHolds counts the holds on endpoints not yet released.
type countedHolds struct {
	Targets
	open atomic.Int64
}

func (c *countedHolds) Hold(id string) (context.Context, func()) {
	c.open.Add(1)
	alive, release := c.Targets.Hold(id)
	var once sync.Once
	return alive, func() { once.Do(func() { c.open.Add(-1); release() }) }
}

// TestFailedTryLeavesNoConnectionBehind: a failed try's answer (a 503,
// retried elsewhere) too large to drain is closed when the retry starts,
// and with it its upstream connection: it is not held open for as long
// as the retried request runs (a stream: minutes).
func TestFailedTryLeavesNoConnectionBehind(t *testing.T) {
	f := newFixture(t, 2)
	f.observed.inner = ignore{}
	large := `{"error":{"message":"` + strings.Repeat("x", 200<<10) + `"}}` // more than the router drains
	var tries atomic.Int64
	var failed atomic.Pointer[fakeServer]
	release := make(chan struct{})
	defer close(release)
	for _, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if tries.Add(1) == 1 {
				failed.Store(u)
				answer(503, "application/json", large)(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, chunk, "Paris")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
	}
	resp := f.post(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	waitFor(t, "the failed try's connection to close while the stream runs", func() bool { return failed.Load().open.Load() == 0 })
}

// checkCutAnswer checks what a client got of an answer its upstream cut
// after its head, once nothing could be retried: a 200, then a stream
// ended by the stream_interrupted event (a stream), or the start of
// sent, a plain answer, and a failed transfer (never a short body taken
// for whole).
func checkCutAnswer(t *testing.T, resp *http.Response, stream bool, sent string) {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode != http.StatusOK:
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	case stream && (err != nil || string(b) != fmt.Sprintf(chunk, "Paris")+string(errorEvent(errStreamCut))):
		t.Fatalf("stream %q, %v", b, err)
	case !stream && (!errors.Is(err, io.ErrUnexpectedEOF) || !strings.HasPrefix(sent, string(b))):
		t.Fatalf("answer %.80q (%d bytes), %v; want its start, then a failed transfer", b, len(b), err)
	}
}
