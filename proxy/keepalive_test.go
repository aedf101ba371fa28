package proxy

import (
	"bufio"
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

// closingUpstream answers the first request on each connection with
// keep-alive, then reads the next request on it and hangs up without an
// answer: what a server does when its idle timeout fires just as a reused
// connection carries a new request.
func closingUpstream(t *testing.T) (url string, answered *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	answered = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				answered.Add(1)
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				if req, err = http.ReadRequest(br); err == nil {
					io.Copy(io.Discard, req.Body) // then close: no answer
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), answered
}

func TestStaleKeepAliveIsResentToTheSameEndpoint(t *testing.T) {
	f := newFixture(t, 0)
	a, _ := closingUpstream(t)
	b, _ := closingUpstream(t)
	f.setEndpoints(t, a, b)
	home := ""
	for i := range 10 {
		resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"one conversation"}`)
		readAll(t, resp.Body)
		ep, d := resp.Header.Get("X-Prefixring-Endpoint"), resp.Header.Get("X-Prefixring-Decision")
		if resp.StatusCode != 200 || d != "home" || (home != "" && ep != home) {
			t.Fatalf("request %d: status %d, %s (%s), home %s", i, resp.StatusCode, ep, d, home)
		}
		home = ep
	}
	st, _ := f.balancer.Status()
	for _, e := range st {
		if !e.Healthy {
			t.Fatalf("%s ejected for closing idle connections", e.ID)
		}
		if n := f.observed.failuresOf(e.ID); n != 0 {
			t.Fatalf("%s: %d failures observed for closing idle connections", e.ID, n)
		}
	}
}

// TestUpstreamClosingIdleConnectionsIsNotAFailure: an upstream that closes
// idle keep-alive connections sooner than the router's pool expects (here
// after 20 ms, uvicorn after 5 s) costs nothing: every request succeeds on
// its home endpoint and no failure is observed.
func TestUpstreamClosingIdleConnectionsIsNotAFailure(t *testing.T) {
	f := newFixture(t, 0)
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		echoPrompt(w, r)
	}))
	up.Config.IdleTimeout = 20 * time.Millisecond
	up.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	f.setEndpoints(t, up.URL)
	id := mustID(t, up.URL)
	for i := range 6 {
		resp := f.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"turn %d"}`, i))
		if body := readAll(t, resp.Body); resp.StatusCode != 200 || !strings.Contains(body, fmt.Sprintf("turn %d", i)) {
			t.Fatalf("turn %d: %d %s", i, resp.StatusCode, body)
		}
		if i%2 == 1 {
			time.Sleep(50 * time.Millisecond) // the upstream closes the idle connection
		}
	}
	if n := f.observed.failuresOf(id); n != 0 {
		t.Fatalf("%d failures observed for an upstream that only closed idle connections", n)
	}
	if conns.Load() < 2 {
		t.Fatalf("%d upstream connections: the idle close never happened, the test proves nothing", conns.Load())
	}
}
