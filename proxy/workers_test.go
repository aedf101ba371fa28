package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prefixring/prefixring/workers"
)

func workersServer(t *testing.T, token string) (*httptest.Server, *workers.Set) {
	t.Helper()
	reg := workers.NewSet("r0", nil, 0)
	ops := Ops{Workers: &WorkersAPI{Registry: reg, Token: token, Status: func(u string) (bool, int64) { return u != "http://10.0.0.9:8000", 3 }}}
	srv := httptest.NewServer(Admin(ops))
	t.Cleanup(srv.Close)
	return srv, reg
}

func call(t *testing.T, method, u, body, token string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v", method, u, err)
	}
	return resp.StatusCode, out, resp.Header
}

// The calls dstack's gateway makes (model_routers/sglang.py and
// router_worker_sync.py): GET /workers reads workers[].url and .id, POST
// wants 202 {"status":"accepted"}, DELETE /workers/{id} the same.
func TestWorkersAPIAnswersAsTheSGLangGatewayDoes(t *testing.T) {
	srv, reg := workersServer(t, "")
	code, body, _ := call(t, "GET", srv.URL+"/workers", "", "")
	if code != 200 || len(body["workers"].([]any)) != 0 {
		t.Fatalf("empty GET: %d %v", code, body)
	}
	for _, u := range []string{"http://10.0.0.7:8000", "http://10.0.0.9:8000/"} {
		code, body, _ = call(t, "POST", srv.URL+"/workers", `{"url":"`+u+`","worker_type":"regular","bootstrap_port":null,"runtime_type":"vllm"}`, "")
		if code != http.StatusAccepted || body["status"] != "accepted" {
			t.Fatalf("POST %s: %d %v", u, code, body)
		}
	}
	if got := reg.Members(); !slices.Equal(got, []string{"http://10.0.0.7:8000", "http://10.0.0.9:8000"}) {
		t.Fatalf("registered %v (a trailing slash is dropped, as dstack compares)", got)
	}
	code, body, _ = call(t, "GET", srv.URL+"/workers", "", "")
	list := body["workers"].([]any)
	if code != 200 || len(list) != 2 {
		t.Fatalf("GET: %d %v", code, body)
	}
	w0, w1 := list[0].(map[string]any), list[1].(map[string]any)
	if w0["url"] != "http://10.0.0.7:8000" || w0["worker_type"] != "regular" || w0["is_healthy"] != true || w0["load"] != 3.0 || w1["is_healthy"] != false {
		t.Fatalf("workers %v", list)
	}
	id, ok := w1["id"].(string)
	if !ok || id == "" {
		t.Fatalf("worker without a string id: %v", w1)
	}
	// dstack puts the id into the path as it got it.
	code, body, _ = call(t, "DELETE", srv.URL+"/workers/"+id, "", "")
	if code != http.StatusAccepted || body["status"] != "accepted" {
		t.Fatalf("DELETE by id: %d %v", code, body)
	}
	// The URL itself, path-escaped, names a worker too.
	code, _, _ = call(t, "GET", srv.URL+"/workers/"+url.PathEscape("http://10.0.0.7:8000"), "", "")
	if code != 200 {
		t.Fatalf("GET by path-escaped URL: %d", code)
	}
	code, body, _ = call(t, "DELETE", srv.URL+"/workers/"+id, "", "")
	if code != 404 || body["error"] == nil {
		t.Fatalf("second DELETE: %d %v", code, body)
	}
	if got := reg.Members(); !slices.Equal(got, []string{"http://10.0.0.7:8000"}) {
		t.Fatalf("after DELETE: %v", got)
	}
}

func TestWorkersAPIRejectsBadInput(t *testing.T) {
	srv, reg := workersServer(t, "")
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/workers", `{"url":`},
		{"POST", "/workers", `{}`},
		{"POST", "/workers", `{"url":""}`},
		{"POST", "/workers", `{"url":"ftp://x:1"}`},
		{"POST", "/workers", `{"url":"http://x:1?a=b"}`},
		{"POST", "/workers", `{"url":"http://x:1","worker_type":"prefill"}`},
		{"POST", "/workers", `["http://x:1"]`},
		{"POST", "/workers", `{"url":"` + strings.Repeat("a", 70<<10) + `"}`},
		{"PUT", "/workers", `{}`},
		{"PATCH", "/workers/x", ``},
		{"GET", "/workers/nope", ``},
	} {
		code, body, _ := call(t, c.method, srv.URL+c.path, c.body, "")
		e, _ := body["error"].(map[string]any)
		if code < 400 || code >= 500 || e == nil || e["message"] == "" {
			t.Errorf("%s %s %.40q: %d %v, want a 4xx OpenAI-style error", c.method, c.path, c.body, code, body)
		}
	}
	if len(reg.Members()) != 0 {
		t.Fatalf("bad input registered %v", reg.Members())
	}
}

// A body over the workers API's 64 KiB limit is refused as the router
// refuses any body over its limit: 413 request_too_large, declared or
// chunked.
func TestWorkersAPIBodyTooLarge(t *testing.T) {
	srv, reg := workersServer(t, "")
	big := `{"url":"http://10.0.0.7:8000","pad":"` + strings.Repeat("a", 70<<10) + `"}`
	for _, chunked := range []bool{false, true} {
		var body io.Reader = strings.NewReader(big)
		if chunked {
			body = io.MultiReader(body) // no length known: sent chunked
		}
		req, err := http.NewRequest("POST", srv.URL+"/workers", body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		assertAPIError(t, resp, http.StatusRequestEntityTooLarge, "invalid_request_error")
		resp.Body.Close()
	}
	if len(reg.Members()) != 0 {
		t.Fatalf("an oversized body registered %v", reg.Members())
	}
}

// With a token, every /workers call needs it (401 with a Bearer challenge
// otherwise); without one, only loopback clients are served.
func TestWorkersAPIAuth(t *testing.T) {
	const token = "s3cret-token"
	srv, reg := workersServer(t, token)
	for _, tok := range []string{"", "wrong", token + "x", "s3cret-toke"} {
		code, body, h := call(t, "POST", srv.URL+"/workers", `{"url":"http://10.0.0.7:8000"}`, tok)
		if code != 401 || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") || body["error"] == nil {
			t.Fatalf("token %q: %d %v %v", tok, code, h, body)
		}
		if strings.Contains(body["error"].(map[string]any)["message"].(string), token) {
			t.Fatal("the 401 body shows the token")
		}
	}
	if code, _, _ := call(t, "GET", srv.URL+"/workers", "", ""); code != 401 {
		t.Fatalf("GET without a token: %d", code)
	}
	if code, _, _ := call(t, "POST", srv.URL+"/workers", `{"url":"http://10.0.0.7:8000"}`, token); code != 202 || !reg.Has("http://10.0.0.7:8000") {
		t.Fatalf("with the token: %d", code)
	}

	open := Admin(Ops{Workers: &WorkersAPI{Registry: workers.NewSet("r", func() time.Time { return time.Unix(0, 0) }, 0)}})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/workers", strings.NewReader(`{"url":"http://10.0.0.7:8000"}`))
	req.RemoteAddr = "192.0.2.10:40000"
	open.ServeHTTP(rec, req)
	if rec.Code != 403 || !strings.Contains(rec.Body.String(), "--admin-token") {
		t.Fatalf("tokenless, non-loopback: %d %s", rec.Code, rec.Body)
	}
}

// PublicWorkers puts the same API on the public listener; without it the
// public listener does not know /workers.
func TestWorkersOnThePublicListener(t *testing.T) {
	reg := workers.NewSet("r0", nil, 0)
	api := &WorkersAPI{Registry: reg}
	for _, public := range []bool{false, true} {
		h := Public(http.NotFoundHandler(), Ops{Workers: api, PublicWorkers: public})
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/workers", nil)
		req.RemoteAddr = "127.0.0.1:5000"
		req.Host = "dstack"
		h.ServeHTTP(rec, req)
		if (rec.Code == 200) != public {
			t.Fatalf("public=%v: GET /workers on the public listener answered %d", public, rec.Code)
		}
	}
}

func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }

// One endpoint is one worker whatever its spelling: the router routes
// "http://10.0.0.7:8000", "HTTP://10.0.0.7:8000/" and
// "http://10.0.0.7:8000/v1" as one endpoint, so registering a second
// spelling changes nothing, and a DELETE of the worker removes every
// spelling the set holds (a peer may have registered another). Before,
// the second spelling was a second member: a DELETE of one answered 202
// while the endpoint stayed routed through the other.
func TestWorkersAPIOneEndpointOneWorker(t *testing.T) {
	srv, reg := workersServer(t, "")
	for _, u := range []string{"http://10.0.0.7:8000", "HTTP://10.0.0.7:8000/", "http://10.0.0.7:8000/v1"} {
		code, body, _ := call(t, "POST", srv.URL+"/workers", `{"url":"`+u+`"}`, "")
		if code != http.StatusAccepted || body["url"] != "http://10.0.0.7:8000" {
			t.Fatalf("POST %s: %d %v, want 202 naming the registered worker", u, code, body)
		}
	}
	if m := reg.Members(); len(m) != 1 {
		t.Fatalf("members %v, want one worker", m)
	}
	// A peer registered another spelling of it before this replica's
	// add reached it.
	st := reg.Ops()[0].Stamp
	reg.Merge([]workers.Op{{URL: "http://10.0.0.7:8000/v1", Stamp: st + 1, Origin: "r1"}})
	if m := reg.Members(); len(m) != 2 {
		t.Fatalf("after the merge, members %v", m)
	}
	code, body, _ := call(t, "DELETE", srv.URL+"/workers/"+url.QueryEscape("http://10.0.0.7:8000"), "", "")
	if code != http.StatusAccepted {
		t.Fatalf("DELETE: %d %v", code, body)
	}
	if m := reg.Members(); len(m) != 0 {
		t.Fatalf("after DELETE the endpoint is still registered as %v", m)
	}
	// A DELETE may name the worker by another spelling too.
	call(t, "POST", srv.URL+"/workers", `{"url":"http://10.0.0.8:8000"}`, "")
	if code, body, _ := call(t, "DELETE", srv.URL+"/workers/"+url.QueryEscape("http://10.0.0.8:8000/v1"), "", ""); code != http.StatusAccepted || reg.Has("http://10.0.0.8:8000") {
		t.Fatalf("DELETE by another spelling: %d %v, members %v", code, body, reg.Members())
	}
}

// TestWorkersAPIOneWorkerForEverySpelling: the spellings of one engine
// that differ in the default port, the port's leading zeros or the form of
// its IP address are one worker, and a DELETE by any of them removes every
// spelling the set holds. Before endpoint IDs were canonical they were
// five workers.
func TestWorkersAPIOneWorkerForEverySpelling(t *testing.T) {
	srv, reg := workersServer(t, "")
	spellings := []string{"http://10.0.0.1:80", "http://10.0.0.1", "HTTP://10.0.0.1:080/", "http://[::ffff:10.0.0.1]:80", "http://[0:0:0:0:0:ffff:a00:1]"}
	for _, u := range spellings {
		code, body, _ := call(t, "POST", srv.URL+"/workers", `{"url":"`+u+`"}`, "")
		if code != http.StatusAccepted || body["url"] != spellings[0] {
			t.Fatalf("POST %s: %d %v, want 202 naming the registered worker", u, code, body)
		}
	}
	if m := reg.Members(); len(m) != 1 {
		t.Fatalf("members %v, want one worker", m)
	}
	// A peer registered another spelling before this replica's add reached it.
	reg.Merge([]workers.Op{{URL: "http://[::ffff:10.0.0.1]", Stamp: reg.Ops()[0].Stamp + 1, Origin: "r1"}})
	if m := reg.Members(); len(m) != 2 {
		t.Fatalf("after the merge, members %v", m)
	}
	for i, u := range spellings[1:] {
		if code, body, _ := call(t, "GET", srv.URL+"/workers/"+url.QueryEscape(u), "", ""); code != http.StatusOK || body["url"] != spellings[0] {
			t.Errorf("GET by spelling %d %s: %d %v", i+1, u, code, body)
		}
	}
	if code, body, _ := call(t, "DELETE", srv.URL+"/workers/"+url.QueryEscape(spellings[4]), "", ""); code != http.StatusAccepted {
		t.Fatalf("DELETE: %d %v", code, body)
	}
	if m := reg.Members(); len(m) != 0 {
		t.Fatalf("after DELETE the endpoint is still registered as %v", m)
	}
}

// TestPublicWorkersPathsAreCleanOrRefused: on the public listener a
// /workers path with dot or empty segments gets the router's 400 in
// OpenAI's shape, as every other path there does. Before the fix the
// workers API's ServeMux answered it with an HTML redirect to the cleaned
// path (/workers/../v1/models to /v1/models), before any token check.
func TestPublicWorkersPathsAreCleanOrRefused(t *testing.T) {
	reg := workers.NewSet("r0", nil, 0)
	h := Public(http.NotFoundHandler(), Ops{Workers: &WorkersAPI{Registry: reg}, PublicWorkers: true})
	for _, p := range []string{"/workers/../v1/models", "/workers//x", "/workers/a/./b", "/workers//"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", p, nil)
		req.RemoteAddr = "127.0.0.1:5000"
		req.Host = "dstack"
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest || rec.Header().Get("Content-Type") != "application/json" ||
			!strings.Contains(rec.Body.String(), `"code":"invalid_path"`) {
			t.Errorf("%s: %d %q %s", p, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
	}
	// A worker's id, its URL query-escaped, still reaches the API.
	for _, p := range []string{"/workers/", "/workers/http%3A%2F%2F10.0.0.7%3A8000"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", p, nil)
		req.RemoteAddr = "127.0.0.1:5000"
		req.Host = "dstack"
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"code":"worker_not_found"`) {
			t.Errorf("%s: %d %s", p, rec.Code, rec.Body)
		}
	}
}
