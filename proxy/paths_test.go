package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHostilePathsAreRefused: paths that could walk out of the allowlist
// once decoded or cleaned are refused with 400 before the allowlist is
// checked, and the upstream sees none of them. Before the fix,
// /v1/%2e%2e/admin/faults reached the upstream as /v1/../admin/faults
// (notes/proxy.md). Paths that pass reach the upstream in their decoded,
// re-encoded form.
func TestHostilePathsAreRefused(t *testing.T) {
	f := newFixture(t, 1)
	var mu sync.Mutex
	var seen []string
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.RequestURI)
		mu.Unlock()
		io.WriteString(w, `{}`)
	})
	for _, p := range []string{
		"/v1/%2e%2e/admin/faults", "/v1/..%2fadmin", "/v1/%2E%2E/%2e%2e/admin", "/v1/chat/..%5c..%5cadmin",
		"/v1/../admin", "/v1/./chat/completions", "/v1/chat/completions/..", "/v1//chat/completions",
		"/v1/chat%2fcompletions", "/v1/chat\\completions", "/v1/%2e/models", "/v1/models%00", "/v1/a%0d%0aX-Injected:%201",
		"/v1/%252e%252e/admin", // decodes once to %2e%2e: refused too? no: see below
	} {
		resp, body, err := rawExchange(t, f.srv.addr, "POST "+p+" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if p == "/v1/%252e%252e/admin" {
			// One decoding gives the literal segment "%2e%2e", which is
			// not a dot segment: it is forwarded, re-encoded, so the
			// upstream decodes it once to the same literal.
			if resp.StatusCode != 200 {
				t.Errorf("%s: %d %s", p, resp.StatusCode, body)
			}
			continue
		}
		if resp.StatusCode != 400 || !strings.Contains(body, `"code":"invalid_path"`) {
			t.Errorf("%s: %d %s", p, resp.StatusCode, body)
		}
	}
	for raw, want := range map[string]string{
		"/v1/%63ompletions":     "/v1/completions",
		"/v1/models/":           "/v1/models/",
		"/v1/completions?x=1&y": "/v1/completions?x=1&y",
	} {
		const b = `{"model":"m","prompt":"x"}`
		resp, body, err := rawExchange(t, f.srv.addr, "POST "+raw+" HTTP/1.1\r\nHost: x\r\nContent-Length: 26\r\n\r\n"+b, 10*time.Second)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v %s", raw, err, resp, body)
		}
		mu.Lock()
		got := seen[len(seen)-1]
		mu.Unlock()
		if got != want {
			t.Errorf("%s reached the upstream as %s, want %s", raw, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 4 || seen[0] != "/v1/%252e%252e/admin" {
		t.Errorf("the upstream received %q", seen)
	}
}

// TestNoRedirects: the public listener answers every path itself, with
// OpenAI-style JSON; http.ServeMux would have answered some with 301 or
// 307 redirects in plain text.
func TestNoRedirects(t *testing.T) {
	f := newFixture(t, 1)
	for raw, status := range map[string]int{
		"GET /v1 HTTP/1.1":                    404,
		"GET /healthz/ HTTP/1.1":              404,
		"POST /v1//chat/completions HTTP/1.1": 400,
		"GET /v1/../healthz HTTP/1.1":         400,
		"POST /healthz HTTP/1.1":              405,
		"GET /metrics HTTP/1.1":               404,
	} {
		resp, body, err := rawExchange(t, f.srv.addr, raw+"\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/json" || !json.Valid([]byte(body)) {
			t.Errorf("%s: %d %s %q", raw, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}

// malformed are requests net/http's server answers itself, before any
// handler, with the exact bytes it writes today.
var malformed = []struct {
	name, request, canned string
}{
	{"bad header byte", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 400 Bad Request" + cannedHeaders + "400 Bad Request"},
	{"missing host", "POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 400 Bad Request: missing required Host header" + cannedHeaders + "400 Bad Request: missing required Host header"},
	{"bad version", "POST /v1/completions HTTP/3.0\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol version" + cannedHeaders + "505 HTTP Version Not Supported: unsupported protocol version"},
	{"transfer coding", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n{}",
		"HTTP/1.1 501 Not Implemented" + cannedHeaders + "Unsupported transfer encoding"},
	{"headers too large", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 431 Request Header Fields Too Large" + cannedHeaders + "431 Request Header Fields Too Large"},
}

// recordingListener records everything written on its connections.
type recordingListener struct {
	net.Listener
	mu  sync.Mutex
	out []*bytes.Buffer
}

type recordingConn struct {
	net.Conn
	l   *recordingListener
	buf *bytes.Buffer
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := &bytes.Buffer{}
	l.out = append(l.out, b)
	return &recordingConn{Conn: c, l: l, buf: b}, nil
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.buf.Write(p)
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

// TestCannedErrorFormatIsPinned sends each malformed request to a bare
// net/http server and checks the exact bytes it writes: if a Go upgrade
// changes them, this fails, and the rewriting (which would then silently
// pass them through as plain text) must be revisited.
func TestCannedErrorFormatIsPinned(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &recordingListener{Listener: ln}
	srv := &http.Server{Handler: http.NotFoundHandler(), MaxHeaderBytes: 4 << 10}
	go srv.Serve(rl)
	defer srv.Close()
	for i, m := range malformed {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, m.request)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.ReadAll(c) // to the server's close
		c.Close()
		rl.mu.Lock()
		got := rl.out[i].String()
		rl.mu.Unlock()
		if got != m.canned {
			t.Errorf("%s: net/http wrote %q, want %q", m.name, got, m.canned)
		}
		if e, ok := parseCanned([]byte(got)); !ok || e.status != atoi(got[9:12]) {
			t.Errorf("%s: not recognized", m.name)
		}
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestCannedErrorsAreOpenAIErrors: the same malformed requests sent to the
// router get the same statuses with OpenAI-style JSON bodies. Before the
// fix they were plain text (notes/proxy.md).
func TestCannedErrorsAreOpenAIErrors(t *testing.T) {
	f := newFixtureWith(t, 1, fixtureOpts{server: func(c *ServerConfig) { c.MaxHeaderBytes = 4 << 10 }})
	for _, m := range malformed {
		resp, body, err := rawExchange(t, f.srv.addr, m.request, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		var e struct {
			Error struct{ Message, Type, Code string }
		}
		if resp.StatusCode != atoi(m.canned[9:12]) || resp.Header.Get("Content-Type") != "application/json" ||
			json.Unmarshal([]byte(body), &e) != nil || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Errorf("%s: %d %q %q", m.name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	// The connection still works for well-formed requests after a
	// rewritten one on another connection, and a keep-alive connection's
	// second request is answered normally.
	c, err := net.Dial("tcp", f.srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for range 2 {
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
}

// TestHandlerResponsesAreNeverRewritten: a handler's response that looks
// exactly like a canned error passes untouched: only writes made while no
// handler response is in progress are candidates.
func TestHandlerResponsesAreNeverRewritten(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		buf.WriteString("HTTP/1.1 400 Bad Request" + cannedHeaders + "400 Bad Request")
		buf.Flush()
	})
	srv := serve(t, DefaultServerConfig(), h, nil)
	resp, body, err := rawExchange(t, srv.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || body != "400 Bad Request" {
		t.Fatalf("a handler's own response was rewritten: %q %q", resp.Header.Get("Content-Type"), body)
	}
}
