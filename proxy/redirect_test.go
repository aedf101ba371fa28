package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// starlette answers a path with a trailing slash as Starlette's
// redirect_slashes does under vLLM and SGLang: 307 to the same URL without
// the slash, built from the Host header it received (the engine's own
// host:port), with an empty body.
func starlette(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	if p, ok := strings.CutSuffix(r.URL.Path, "/"); ok {
		w.Header().Set("Location", "http://"+r.Host+p)
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"cmpl-1","object":"chat.completion"}`)
}

// TestUpstreamRedirectDoesNotLeakItsAddress: an engine's redirect to its
// own host:port reaches the client pointing at the router instead (as
// nginx's proxy_redirect default rewrites it), so the internal address
// never leaks and a client that follows it is routed again. A Location
// elsewhere passes unchanged. Before the fix the client got
// Location: http://127.0.0.1:<engine port>/v1/chat/completions.
func TestUpstreamRedirectDoesNotLeakItsAddress(t *testing.T) {
	f := newFixture(t, 1)
	f.ups[0].setHandler(starlette)
	upHost := strings.TrimPrefix(f.ups[0].URL, "http://")

	noFollow := &http.Client{Transport: f.srv.Client().Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/chat/completions/?x=1", strings.NewReader(chatBody("s", "u")))
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp.Body)
	if resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if loc := resp.Header.Get("Location"); loc != "/v1/chat/completions" {
		t.Fatalf("Location %q, want /v1/chat/completions", loc)
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			if strings.Contains(v, upHost) {
				t.Fatalf("header %s: %q leaks the engine's address", k, v)
			}
		}
	}

	// The Go client follows the 307 (a POST keeps its body) back through
	// the router.
	resp = f.post(t, "/v1/chat/completions/", chatBody("s", "u"))
	if b := readAll(t, resp.Body); resp.StatusCode != 200 || !strings.Contains(b, "chat.completion") {
		t.Fatalf("following the redirect: %d %s", resp.StatusCode, b)
	}

	// A redirect elsewhere is the engine's business.
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "https://docs.example.com/v1/x")
		w.WriteHeader(http.StatusFound)
	})
	resp, err = noFollow.Do(mustRequest(t, f.srv.URL+"/v1/models"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp.Body)
	if loc := resp.Header.Get("Location"); loc != "https://docs.example.com/v1/x" {
		t.Fatalf("external Location rewritten to %q", loc)
	}
}

// TestRedirectUnderABasePath: an endpoint served under a path prefix
// (http://host:port/engine) redirects to that prefix; the client sees the
// path it would use at the router, without it.
func TestRedirectUnderABasePath(t *testing.T) {
	f := newFixture(t, 1)
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "http://"+r.Host+"/engine/v1/models")
		w.Header().Set("Content-Location", "/engine/v1/models")
		w.WriteHeader(http.StatusMovedPermanently)
	})
	f.setEndpoints(t, f.ups[0].URL+"/engine")
	noFollow := &http.Client{Transport: f.srv.Client().Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(mustRequest(t, f.srv.URL+"/v1/models/"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp.Body)
	if loc, cl := resp.Header.Get("Location"), resp.Header.Get("Content-Location"); loc != "/v1/models" || cl != "/v1/models" {
		t.Fatalf("Location %q, Content-Location %q; want /v1/models", loc, cl)
	}
}

func mustRequest(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
