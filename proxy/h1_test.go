package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an upstream that counts the connections it accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	var conns atomic.Int64
	s := httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s, &conns
}

func newTestH1() *h1Transport {
	return newH1Transport(DefaultConfig(), NewTransport(DefaultConfig()))
}

func roundTrip(t *testing.T, tr http.RoundTripper, ctx context.Context, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return tr.RoundTrip(req)
}

func TestH1ReusesConnections(t *testing.T) {
	s, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "echo %s", b)
	})
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	for i := range 20 {
		resp, err := roundTrip(t, tr, context.Background(), s.URL+"/v1/x", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp.Body); got != fmt.Sprintf("echo %d", i) {
			t.Fatalf("response %q", got)
		}
		resp.Body.Close()
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 20 sequential requests, want 1", n)
	}
}

func TestH1AbandonedOrClosingResponsesAreNotReused(t *testing.T) {
	s, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, strings.Repeat("x", 100000))
	})
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	// Closed before the end of the body: the rest is still on the wire.
	resp, err := roundTrip(t, tr, context.Background(), s.URL+"/big", "")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 10))
	resp.Body.Close()
	// The server asked to close.
	resp, err = roundTrip(t, tr, context.Background(), s.URL+"/close", "")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp.Body)
	resp.Body.Close()
	resp, err = roundTrip(t, tr, context.Background(), s.URL+"/big", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(readAll(t, resp.Body)); got != 100000 {
		t.Fatalf("read %d bytes", got)
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (none reusable)", n)
	}
}

func TestH1IdleTimeout(t *testing.T) {
	s, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	now := time.Unix(1000, 0)
	tr.now = func() time.Time { return now }
	for _, wait := range []time.Duration{0, time.Second, 5 * time.Second} {
		now = now.Add(wait)
		resp, err := roundTrip(t, tr, context.Background(), s.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp.Body)
		resp.Body.Close()
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: reused after 1s idle, not after 5s", n)
	}
}

func TestH1CancelUnblocksAndDiscardsConnection(t *testing.T) {
	release := make(chan struct{})
	s, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/slow") {
			if r.URL.Path == "/slow" {
				w.(http.Flusher).Flush() // the head leaves; the body waits
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "ok")
	})
	defer close(release)
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := roundTrip(t, tr, ctx, s.URL+"/slow", "")
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("read of a canceled body ended without error")
	}
	resp.Body.Close()
	// Canceled before the response head: the round trip returns the
	// context's error.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := roundTrip(t, tr, ctx2, s.URL+"/slow-head", ""); err != context.DeadlineExceeded {
		t.Fatalf("err %v, want the context's", err)
	}
	resp, err = roundTrip(t, tr, context.Background(), s.URL+"/fast", "")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp.Body)
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3: neither canceled one may be reused", n)
	}
}

func TestH1HTTPSGoesToFallback(t *testing.T) {
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls") }))
	defer s.Close()
	tr := newH1Transport(DefaultConfig(), s.Client().Transport)
	resp, err := roundTrip(t, tr, context.Background(), s.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp.Body); got != "tls" {
		t.Fatalf("%q", got)
	}
}
