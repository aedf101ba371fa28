package proxy

import (
	"io"
	"net/http"
	"testing"
)

// TestClientHeadersReachTheUpstream: the router is transparent to the
// client's credentials and content headers (an inference server behind it
// checks its own API key), and strips only what is its own: the session
// header it keyed the request by, and Expect, which it answered itself.
func TestClientHeadersReachTheUpstream(t *testing.T) {
	f := newFixture(t, 1)
	got := make(chan http.Header, 1)
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got <- r.Header.Clone()
		io.WriteString(w, `{}`)
	})
	resp := f.post(t, "/v1/chat/completions", chatBody("s", "u"),
		"Authorization", "Bearer sk-secret-123", "OpenAI-Organization", "org-1", "X-Session-ID", "sess-9")
	readAll(t, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	h := <-got
	if h.Get("Authorization") != "Bearer sk-secret-123" || h.Get("OpenAI-Organization") != "org-1" ||
		h.Get("Content-Type") != "application/json" {
		t.Fatalf("upstream saw headers %v", h)
	}
	if h.Get("X-Session-ID") != "" || h.Get("Expect") != "" {
		t.Fatalf("router's own headers forwarded: %v", h)
	}
}
