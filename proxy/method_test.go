package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestMethodNotAllowedSaysAllow: every 405 the router answers carries an
// Allow header with the methods the route takes, as RFC 9110 (15.5.6)
// requires, beside the OpenAI-style body. Before the fix none did.
func TestMethodNotAllowedSaysAllow(t *testing.T) {
	f := newFixture(t, 1)
	workers, _ := workersServer(t, "")
	for _, tc := range []struct{ method, url, allow string }{
		{"GET", f.srv.URL + "/v1/chat/completions", "POST"},
		{"PUT", f.srv.URL + "/v1/completions", "POST"},
		{"POST", f.srv.URL + "/healthz", "GET, HEAD"},
		{"DELETE", f.srv.URL + "/readyz", "GET, HEAD"},
		{"PUT", workers.URL + "/workers", "GET, HEAD, POST"},
		{"POST", workers.URL + "/workers/x", "GET, HEAD, DELETE"},
	} {
		req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader(""))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.url, got, tc.allow)
		}
		assertAPIError(t, resp, http.StatusMethodNotAllowed, "invalid_request_error")
		resp.Body.Close()
	}
}
