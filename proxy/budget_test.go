package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBufferedBodiesHaveATotalBudget: bodies held in memory by all
// requests together stay within MaxBufferedBodyBytes. A client that sends
// part of a large body and stalls holds its share; a request that would
// exceed the budget gets 503 with Retry-After in OpenAI's shape, and once
// the stalled client is gone, requests pass again. Before the fix any
// number of stalled clients each held up to MaxBodyBytes (8 stalled clients
// held 359 MB in one measurement).
func TestBufferedBodiesHaveATotalBudget(t *testing.T) {
	f := newFixture(t, 1, func(c *Config) { c.MaxBufferedBodyBytes, c.MaxBodyBytes = 64<<10, 64<<10 })
	c, err := net.Dial("tcp", f.srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", 60000, strings.Repeat("x", 50000))
	waitFor(t, "the stalled body to be buffered", func() bool { return f.router.bodies.used.Load() >= 50000 })

	resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	assertAPIError(t, resp, http.StatusServiceUnavailable, "service_unavailable")

	c.Close()
	waitFor(t, "the budget to be returned", func() bool { return f.router.bodies.used.Load() == 0 })
	resp = f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
	if readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Fatalf("after the stalled client left: status %d", resp.StatusCode)
	}
}

// TestBodyHasATotalDeadline: a client that keeps its body trickling (here:
// within a one-hour inactivity timeout) gets 408 once ClientBodyDeadline
// has passed since the body began. Before the fix only the inactivity
// timeout applied: one byte every 29 s held the buffer forever.
func TestBodyHasATotalDeadline(t *testing.T) {
	f := newFixture(t, 1, func(c *Config) { c.ClientBodyTimeout, c.ClientBodyDeadline = time.Hour, 100*time.Millisecond })
	c, err := net.Dial("tcp", f.srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\":")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a body past its deadline: %v", err)
	}
	assertAPIError(t, resp, http.StatusRequestTimeout, "invalid_request_error")
	waitFor(t, "the budget to be returned", func() bool { return f.router.bodies.used.Load() == 0 })
}
