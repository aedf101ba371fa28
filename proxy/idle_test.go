package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
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

// TestIdleBodyCountsOnlyWaitingReads: the idle clock runs only while a
// read waits on the upstream. Reads that each wait just under d, with
// long pauses between them (the router writing to a slow client), never
// cut the body; one read that waits d does, at d, with errStreamIdle.
func TestIdleBodyCountsOnlyWaitingReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = time.Minute
		pr, pw := io.Pipe()
		var cause error
		b := newIdleBody(pr, d, func(err error) {
			cause = err
			pw.CloseWithError(errors.New("connection closed"))
		})
		defer b.Close()
		go func() {
			for i := range 5 {
				time.Sleep(d - time.Nanosecond) // the read below waits this long
				fmt.Fprintf(pw, "event %d", i)
			}
		}()
		buf := make([]byte, 64)
		for i := range 5 {
			if _, err := b.Read(buf); err != nil {
				t.Fatalf("read %d, which waited just under %v: %v", i, d, err)
			}
			time.Sleep(3 * d) // not reading: the clock must not run
			synctest.Wait()
			if cause != nil {
				t.Fatalf("cancelled between reads (after read %d): %v", i, cause)
			}
		}
		start := time.Now()
		_, err := b.Read(buf) // nothing more comes
		if !errors.Is(err, errStreamIdle) || !errors.Is(cause, errStreamIdle) {
			t.Fatalf("stalled read: %v, cancel cause %v; want %v", err, cause, errStreamIdle)
		}
		if waited := time.Since(start); waited != d {
			t.Fatalf("stalled read cut after %v, want %v", waited, d)
		}
	})
}

// TestIdleBodyClosedNeverFires: a closed body's timer cancels nothing.
func TestIdleBodyClosedNeverFires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = time.Minute
		pr, _ := io.Pipe()
		cancelled := false
		b := newIdleBody(pr, d, func(error) { cancelled = true })
		go b.Read(make([]byte, 8)) // waits until Close
		time.Sleep(d / 2)
		b.Close()
		time.Sleep(10 * d)
		synctest.Wait()
		if cancelled {
			t.Fatal("a closed body's idle timer cancelled its try")
		}
	})
}
