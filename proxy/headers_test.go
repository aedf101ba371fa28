package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestClientHeadersReachTheUpstream: the router is transparent to the
// client's credentials and content headers (an inference server behind it
// checks its own API key), and strips only what is its own: the session
// header it keyed the request by, and Expect, which it answered itself.
// A client's own X-Idempotency-Key passes too: the router's nil-valued one,
// which marks every request replayable to the Transport, must not replace
// it.
func TestClientHeadersReachTheUpstream(t *testing.T) {
	f := newFixture(t, 1)
	got := upstreamHeaders(f)
	resp := f.post(t, "/v1/chat/completions", chatBody("s", "u"),
		"Authorization", "Bearer sk-secret-123", "OpenAI-Organization", "org-1", "X-Session-ID", "sess-9", "X-Idempotency-Key", "idem-7")
	readAll(t, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	h := <-got
	if h.Get("Authorization") != "Bearer sk-secret-123" || h.Get("OpenAI-Organization") != "org-1" ||
		h.Get("Content-Type") != "application/json" || h.Get("X-Idempotency-Key") != "idem-7" {
		t.Fatalf("upstream saw headers %v", h)
	}
	if h.Get("X-Session-ID") != "" || h.Get("Expect") != "" {
		t.Fatalf("router's own headers forwarded: %v", h)
	}
}

// TestForwardingHeadersAreTheRouters: the forwarding headers are the one
// exception to TestClientHeadersReachTheUpstream. ReverseProxy's Rewrite
// drops the client's X-Forwarded-For, -Host, -Proto and Forwarded, and
// SetXForwarded writes the router's own view (the address the client
// connected from), so a client cannot tell an engine it is someone else;
// X-Real-IP and Via, which the router does not write, pass unchanged.
func TestForwardingHeadersAreTheRouters(t *testing.T) {
	f := newFixture(t, 1)
	got := upstreamHeaders(f)
	resp := f.post(t, "/v1/chat/completions", chatBody("s", "u"),
		"X-Forwarded-For", "203.0.113.9", "X-Forwarded-Host", "spoofed.example", "X-Forwarded-Proto", "https",
		"Forwarded", "for=203.0.113.9", "X-Real-IP", "203.0.113.10", "Via", "1.1 lb")
	readAll(t, resp.Body)
	h := <-got
	if h.Get("X-Forwarded-For") != "127.0.0.1" || h.Get("X-Forwarded-Proto") != "http" ||
		h.Get("X-Forwarded-Host") != strings.TrimPrefix(f.srv.URL, "http://") || h.Get("Forwarded") != "" {
		t.Fatalf("forwarding headers the upstream saw: %v", h)
	}
	if h.Get("X-Real-IP") != "203.0.113.10" || h.Get("Via") != "1.1 lb" {
		t.Fatalf("client headers the router does not write were changed: %v", h)
	}
}

// upstreamHeaders makes f's upstream answer {} and hand over the headers
// of each request it got.
func upstreamHeaders(f *fixture) <-chan http.Header {
	got := make(chan http.Header, 1)
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got <- r.Header.Clone()
		io.WriteString(w, `{}`)
	})
	return got
}
