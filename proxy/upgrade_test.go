package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// switching answers 101 with proto (whatever the request asked), then
// echoes lines until its client closes the tunnel; closed is closed then.
func switching(proto string, closed chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer close(closed)
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\n\r\n", proto)
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString(line)
			brw.Flush()
		}
	}
}

func waitClosed(t *testing.T, closed <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was never closed", what)
	}
}

// TestWebSocketUpgradePassesThrough: a websocket upgrade (vLLM's
// /v1/realtime) is tunnelled to the endpoint, holding its lease until the
// tunnel closes; closing the client's side closes the endpoint's. Before
// the fix the client got 502 and the endpoint's connection stayed open.
func TestWebSocketUpgradePassesThrough(t *testing.T) {
	f := newFixture(t, 1)
	closed := make(chan struct{})
	f.ups[0].setHandler(switching("websocket", closed))
	c, err := net.Dial("tcp", f.srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /v1/realtime?model=m HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		t.Fatalf("status %d, Upgrade %q: %s", resp.StatusCode, resp.Header.Get("Upgrade"), b)
	}
	if n := f.balancer.Inflight().Total(); n == 0 {
		t.Fatal("the tunnel holds no lease")
	}
	fmt.Fprint(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo %q, %v", line, err)
	}
	c.Close()
	waitClosed(t, closed, "the endpoint's side of the tunnel")
	waitIdle(t, f)
}

// TestUnaskedUpgradeIsRefusedAndClosed: an endpoint that switches
// protocols on a request that did not ask to (or to another protocol than
// asked) gets the client an OpenAI-style 502, and its connection is
// closed. Before the fix the connection was never closed (a leak per
// request).
func TestUnaskedUpgradeIsRefusedAndClosed(t *testing.T) {
	for _, tc := range []struct{ name, upgrade string }{
		{"not asked", ""},
		{"another protocol", "websocket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 1, func(c *Config) { c.MaxRetries = 0 })
			closed := make(chan struct{})
			f.ups[0].setHandler(switching("h2c", closed))
			req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/models", nil)
			if tc.upgrade != "" {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", tc.upgrade)
			}
			resp, err := f.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			assertAPIError(t, resp, http.StatusBadGateway, "upstream_error")
			waitClosed(t, closed, "the endpoint's connection")
			waitIdle(t, f)
		})
	}
}

// TestOnlyWebSocketUpgradesAreForwarded: a client asking for another
// protocol (h2c) has its Upgrade dropped, as a server may ignore it (RFC
// 9110 §7.8), and gets a plain HTTP/1.1 answer.
func TestOnlyWebSocketUpgradesAreForwarded(t *testing.T) {
	f := newFixture(t, 1)
	got := make(chan http.Header, 1)
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		io.WriteString(w, `{}`)
	})
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/models", nil)
	req.Header.Set("Connection", "Upgrade, HTTP2-Settings")
	req.Header.Set("Upgrade", "h2c")
	req.Header.Set("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp.Body)
	if h := <-got; resp.StatusCode != 200 || h.Get("Upgrade") != "" || h.Get("Connection") != "" {
		t.Fatalf("status %d, upstream saw Upgrade %q, Connection %q", resp.StatusCode, h.Get("Upgrade"), h.Get("Connection"))
	}
}
