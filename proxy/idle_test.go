package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// stalledStream sends SSE headers and one event, then nothing until its
// client (the router) hangs up; gone is closed then.
func stalledStream(gone chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, chunk, "Paris")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	}
}

// TestStalledStreamEndsWithIdleErrorEvent: an upstream that sends SSE
// headers and then nothing holds its client only for StreamIdleTimeout; the
// client gets the events that came, then an OpenAI-style error event, then
// a cleanly ended response; the upstream connection is closed and the lease
// released. Before the fix the client waited forever (--upstream-timeout
// covers headers only).
func TestStalledStreamEndsWithIdleErrorEvent(t *testing.T) {
	f := newFixture(t, 1, func(c *Config) { c.StreamIdleTimeout = 100 * time.Millisecond })
	gone := make(chan struct{})
	f.ups[0].setHandler(stalledStream(gone))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("stream not ended by the router: %v after %q", err, b)
	}
	want := fmt.Sprintf(chunk, "Paris") + `data: {"error":{"message":"The inference endpoint sent nothing for too long; the response is incomplete.","type":"upstream_error","param":null,"code":"stream_idle_timeout"}}` + "\n\n"
	if string(b) != want {
		t.Fatalf("stream:\n%q\nwant\n%q", b, want)
	}
	select {
	case <-gone:
	case <-ctx.Done():
		t.Fatal("the upstream connection stayed open")
	}
	waitIdle(t, f)
}

// TestNonReadingClientReleasesTheUpstream: a client that asks for a stream
// and stops reading holds its upstream connection only until a write to it
// has waited ClientWriteTimeout (nginx's send_timeout); the upstream
// connection is then closed and the lease released. Before the fix the
// router's write blocked forever, and the upstream with it.
func TestNonReadingClientReleasesTheUpstream(t *testing.T) {
	f := newFixture(t, 1, func(c *Config) { c.ClientWriteTimeout = 100 * time.Millisecond })
	gone := make(chan struct{})
	event := "data: " + strings.Repeat("x", 64<<10) + "\n\n"
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		defer close(gone)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			if _, err := io.WriteString(w, event); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			if r.Context().Err() != nil {
				return
			}
		}
	})
	c, err := net.Dial("tcp", f.srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"m","stream":true,"prompt":"hi"}`
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// The client reads nothing.
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream still streams to a client that stopped reading")
	}
	waitIdle(t, f)
}
