package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/prefixring/prefixring/workers"
)

// dstackCall makes a /workers call as dstack's server does
// (router_worker_sync.py): httpx over an SSH tunnel to localhost on the
// router's service port, base URL http://dstack, no forwarding headers.
func dstackCall(t *testing.T, base, method, path, body string, edit func(*http.Request)) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "dstack"
	req.Header.Set("Accept", "*/*")
	req.Header.Set("Accept-Encoding", "gzip, deflate")
	req.Header.Set("User-Agent", "python-httpx/0.28.1")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if edit != nil {
		edit(req)
	}
	code, out := do(t, req)
	return code, out
}

func do(t *testing.T, req *http.Request) (int, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = jsonDecode(resp, &out)
	return resp.StatusCode, out
}

func relay(t *testing.T, target string, rewrite func(*httputil.ProxyRequest)) string {
	t.Helper()
	u, _ := url.Parse(target)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(u)
		if rewrite != nil {
			rewrite(pr)
		}
	}}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// Without a token, a client that reaches the public listener through a
// relay on the router's host arrives from loopback; it must not register a
// worker, whichever relay it is. dstack's own calls still work.
func TestWorkersAPIRefusesRelayedCallers(t *testing.T) {
	reg := workers.NewSet("r0", nil, 0)
	api := &WorkersAPI{Registry: reg}
	public := httptest.NewServer(Public(http.NotFoundHandler(), Ops{Workers: api, PublicWorkers: true}))
	t.Cleanup(public.Close)
	admin := httptest.NewServer(Admin(Ops{Workers: api}))
	t.Cleanup(admin.Close)
	post := `{"url":"http://10.0.0.66:8000","worker_type":"regular"}`

	for name, base := range map[string]string{
		// Go's ReverseProxy, SetXForwarded: X-Forwarded-For/-Host/-Proto.
		"x-forwarded relay": relay(t, public.URL, func(pr *httputil.ProxyRequest) { pr.SetXForwarded() }),
		// nginx's defaults: Host is the upstream's ($proxy_host), no
		// forwarding header at all.
		"bare relay": relay(t, public.URL, nil),
		// dstack's gateway nginx: Host $host, X-Real-IP $remote_addr.
		"x-real-ip relay": relay(t, public.URL, func(pr *httputil.ProxyRequest) {
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set("X-Real-IP", "203.0.113.9")
		}),
		"forwarded relay": relay(t, public.URL, func(pr *httputil.ProxyRequest) {
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set("Forwarded", "for=203.0.113.9")
		}),
	} {
		// The remote client even sends dstack's Host.
		code, body := dstackCall(t, base, "POST", "/workers", post, nil)
		if code != http.StatusForbidden || errCode(body) == "" {
			t.Errorf("%s: POST answered %d %v, want 403", name, code, body)
		}
		if code, _ := dstackCall(t, base, "GET", "/workers", "", nil); code != http.StatusForbidden {
			t.Errorf("%s: GET answered %d, want 403", name, code)
		}
	}
	if m := reg.Members(); len(m) != 0 {
		t.Fatalf("a relayed client registered %v", m)
	}

	// A browser on the router's host led there by DNS rebinding: loopback,
	// no forwarding header, the attacker's Host.
	for _, base := range []string{public.URL, admin.URL} {
		code, _ := dstackCall(t, base, "POST", "/workers", post, func(r *http.Request) { r.Host = "evil.example:" + strings.Split(base, ":")[2] })
		if code != http.StatusForbidden {
			t.Errorf("%s, Host evil.example: %d, want 403", base, code)
		}
	}
	// The admin listener refuses forwarded calls too.
	code, _ := dstackCall(t, admin.URL, "POST", "/workers", post, func(r *http.Request) {
		r.Host = ""
		r.Header.Set("X-Forwarded-For", "203.0.113.9")
	})
	if code != http.StatusForbidden || len(reg.Members()) != 0 {
		t.Fatalf("admin listener, X-Forwarded-For: %d %v", code, reg.Members())
	}

	// dstack's calls, on the service port.
	if code, body := dstackCall(t, public.URL, "GET", "/workers", "", nil); code != 200 {
		t.Fatalf("dstack's GET: %d %v", code, body)
	}
	code, body := dstackCall(t, public.URL, "POST", "/workers", `{"url":"http://10.0.0.7:8000","worker_type":"regular","connection_mode":"http","runtime_type":"sglang"}`, nil)
	if code != http.StatusAccepted || body["status"] != "accepted" || !reg.Has("http://10.0.0.7:8000") {
		t.Fatalf("dstack's POST: %d %v", code, body)
	}
	code, body = dstackCall(t, public.URL, "DELETE", "/workers/"+url.QueryEscape("http://10.0.0.7:8000"), "", nil)
	if code != http.StatusAccepted || reg.Has("http://10.0.0.7:8000") {
		t.Fatalf("dstack's DELETE: %d %v", code, body)
	}
	// An operator on the host, on the admin listener.
	req, _ := http.NewRequest("POST", admin.URL+"/workers", strings.NewReader(`{"url":"http://10.0.0.8:8000"}`))
	if code, body := do(t, req); code != http.StatusAccepted {
		t.Fatalf("curl on the admin listener: %d %v", code, body)
	}
	req, _ = http.NewRequest("GET", strings.Replace(admin.URL, "127.0.0.1", "localhost", 1)+"/workers", nil)
	if code, body := do(t, req); code != http.StatusOK {
		t.Fatalf("curl localhost on the admin listener: %d %v", code, body)
	}
}

// With a token, a relayed call that carries it is served: the token, not
// the address, is the credential.
func TestWorkersAPITokenWorksThroughARelay(t *testing.T) {
	reg := workers.NewSet("r0", nil, 0)
	public := httptest.NewServer(Public(http.NotFoundHandler(), Ops{Workers: &WorkersAPI{Registry: reg, Token: "tok"}, PublicWorkers: true}))
	t.Cleanup(public.Close)
	base := relay(t, public.URL, func(pr *httputil.ProxyRequest) { pr.SetXForwarded() })
	code, _ := dstackCall(t, base, "POST", "/workers", `{"url":"http://10.0.0.7:8000"}`, func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok") })
	if code != http.StatusAccepted || !reg.Has("http://10.0.0.7:8000") {
		t.Fatalf("with the token through a relay: %d", code)
	}
}

// Worker URLs are checked at the API: 400 with the reason, for every class
// the policy refuses; past the cap, 409.
func TestWorkersAPIRefusesUnsafeURLs(t *testing.T) {
	srv, reg := workersServer(t, "")
	for _, u := range []string{
		"http://10.0.0.7:8000/" + strings.Repeat("a", 5000),
		"http://169.254.169.254", "http://[fe80::1]:8000", "http://0.0.0.0:8000", "http://224.0.0.1:8000",
		"http://user:pw@10.0.0.7:8000", "http://10.0.0.7:8000#x", "http://2852039166",
	} {
		code, body, _ := call(t, "POST", srv.URL+"/workers", `{"url":"`+u+`"}`, "")
		if code != 400 || errCode(body) != "invalid_worker_url" {
			t.Errorf("%.50q: %d %v, want 400 invalid_worker_url", u, code, body)
		}
	}
	if m := reg.Members(); len(m) != 0 {
		t.Fatalf("registered %d unsafe URLs", len(m))
	}
	p := workers.DefaultPolicy()
	p.MaxWorkers = 2
	if err := reg.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{202, 202, 409, 409} {
		code, body, _ := call(t, "POST", srv.URL+"/workers", `{"url":"http://10.0.0.`+string(rune('1'+i))+`:8000"}`, "")
		if code != want || want == 409 && errCode(body) != "too_many_workers" {
			t.Fatalf("add %d: %d %v, want %d", i, code, body, want)
		}
	}
	if n := len(reg.Members()); n != 2 {
		t.Fatalf("%d workers past a cap of 2", n)
	}
}

// nginxDefaultCall sends what nginx's proxy_pass sends with its defaults
// when it relays a client's POST to the admin listener: HTTP/1.0, Host
// the upstream's address ($proxy_host), Connection: close, and no header
// naming the client it relays for.
func nginxDefaultCall(t *testing.T, base, body string) (int, string) {
	t.Helper()
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /workers HTTP/1.0\r\nHost: %s\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		host, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// On the admin listener a loopback Host is a local caller's, so a relay on
// the router's host that rewrites Host to the listener's address and
// names nobody (nginx's proxy_pass with its defaults) is told apart by
// the other thing its defaults send: HTTP/1.0. Every relay header of the
// X-Forwarded- family, ingress-nginx's X-Original-Forwarded-For, Via and
// the CDNs' client-IP headers are refused as well, whichever listener.
func TestWorkersAPIAdminRefusesDefaultRelays(t *testing.T) {
	reg := workers.NewSet("r0", nil, 0)
	admin := httptest.NewServer(Admin(Ops{Workers: &WorkersAPI{Registry: reg}}))
	t.Cleanup(admin.Close)
	post := `{"url":"http://10.0.0.66:8000","worker_type":"regular"}`

	if code, body := nginxDefaultCall(t, admin.URL, post); code != http.StatusForbidden || !strings.Contains(body, "admin_token_required") {
		t.Errorf("nginx's default relay to the admin listener: %d %s, want 403", code, body)
	}
	for _, h := range []string{"X-Forwarded-Server", "X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Uri", "X-Original-Forwarded-For",
		// Via, which RFC 9110 has every proxy add, and the CDNs' client-IP
		// headers: docs/security.md names them as refused.
		"Via", "True-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP", "X-Client-IP", "X-Cluster-Client-IP", "X-Envoy-External-Address"} {
		code, _ := dstackCall(t, admin.URL, "POST", "/workers", post, func(r *http.Request) {
			r.Host = "localhost"
			r.Header.Set(h, "203.0.113.9")
		})
		if code != http.StatusForbidden {
			t.Errorf("%s on the admin listener: %d, want 403", h, code)
		}
	}
	if m := reg.Members(); len(m) != 0 {
		t.Fatalf("a relayed client registered %v", m)
	}
	// A local operator's call (HTTP/1.1, Host localhost) still registers.
	if code, body := dstackCall(t, admin.URL, "POST", "/workers", post, func(r *http.Request) { r.Host = "localhost" }); code != http.StatusAccepted {
		t.Fatalf("a direct local call: %d %v, want 202", code, body)
	}
	// So does dstack's call, Host dstack, on the admin listener too.
	if code, body := dstackCall(t, admin.URL, "GET", "/workers", "", nil); code != http.StatusOK {
		t.Fatalf("dstack's GET on the admin listener: %d %v, want 200", code, body)
	}
}
