package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
)

func TestSamePrefixSameEndpoint(t *testing.T) {
	f := newFixture(t, 4)
	homes := map[string]bool{}
	for i := range 20 {
		resp := f.post(t, "/v1/chat/completions", chatBody("You are a helpful assistant.", "What is the capital of France?")+strings.Repeat(" ", i))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp.Body))
		}
		if d := resp.Header.Get("X-Prefixring-Decision"); d != "home" {
			t.Fatalf("decision %q, want home", d)
		}
		homes[resp.Header.Get("X-Prefixring-Endpoint")] = true
		readAll(t, resp.Body)
	}
	if len(homes) != 1 {
		t.Fatalf("one prefix went to %d endpoints: %v", len(homes), homes)
	}
	// Different conversations spread over the fleet.
	spread := map[string]bool{}
	for i := range 40 {
		resp := f.post(t, "/v1/chat/completions", chatBody("sys", fmt.Sprintf("question %d about something", i)))
		spread[resp.Header.Get("X-Prefixring-Endpoint")] = true
	}
	if len(spread) < 3 {
		t.Fatalf("40 conversations reached only %d of 4 endpoints", len(spread))
	}
}

func TestPathAndQueryReachUpstream(t *testing.T) {
	f := newFixture(t, 1)
	resp := f.post(t, "/v1/completions?x=1", `{"model":"m","prompt":"hello"}`)
	body := readAll(t, resp.Body)
	if !strings.Contains(body, `"path":"/v1/completions"`) {
		t.Fatalf("upstream saw %s", body)
	}
}

// TestHotPrefixSpillsWithinBound holds many concurrent requests of one
// prefix: the home fills to the bound, the rest spill, none overfills
// (counting requests, CHWBL's own unit).
func TestHotPrefixSpillsWithinBound(t *testing.T) {
	f := newFixtureWith(t, 4, fixtureOpts{ring: func(c *ring.Config) { c.Signal, c.MinBound = ring.SignalRequests, 0 }})
	release := make(chan struct{})
	arrived := make(chan string, 64)
	for _, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			arrived <- u.name
			<-release
			io.WriteString(w, `{}`)
		})
	}
	const n = 24
	var wg sync.WaitGroup
	decisions := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			resp := f.post(t, "/v1/chat/completions", chatBody("shared system prompt", "the same question"))
			decisions <- resp.Header.Get("X-Prefixring-Decision")
			readAll(t, resp.Body)
			_ = i
		})
		<-arrived // one at a time, so each pick sees the previous loads
	}
	st, _ := f.balancer.Status()
	// An endpoint takes a request while its load <= ceil(c*(total+1)/n).
	// The last pick saw 23 in flight on 4 endpoints with c = 1.25: bound
	// ceil(1.25*24/4) = 8, so no endpoint may hold more than 8+1.
	for _, e := range st {
		if e.LocalLoad > 9 {
			t.Errorf("%s holds %d in flight, bound 8 (+1 taken at the bound)", e.ID, e.LocalLoad)
		}
	}
	close(release)
	wg.Wait()
	close(decisions)
	count := map[string]int{}
	for d := range decisions {
		count[d]++
	}
	if count["home"] == 0 || count["spill"] == 0 || count["home"]+count["spill"] != n {
		t.Fatalf("decisions %v: want the home filled, then spills", count)
	}
	waitIdle(t, f) // every lease is given back (settled ones weigh 0 in Total)
}

// TestStreamEventsArriveAsProduced: the upstream holds its second event
// until the client has read the first through the router.
func TestStreamEventsArriveAsProduced(t *testing.T) {
	f := newFixture(t, 1)
	next := make(chan struct{})
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-time.After(10 * time.Second):
				return // the router buffered: the test fails below
			}
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	resp := f.post(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	sc := bufio.NewScanner(resp.Body)
	var events []string
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		events = append(events, line)
		if line != "data: [DONE]" {
			next <- struct{}{} // blocks until the upstream waits: only reachable if the event came through
		}
	}
	if len(events) != 4 || events[3] != "data: [DONE]" {
		t.Fatalf("events %v", events)
	}
}

func TestClientDisconnectCancelsUpstreamAndReleases(t *testing.T) {
	f := newFixture(t, 2)
	canceled := make(chan struct{})
	started := make(chan struct{})
	for _, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {}\n\n")
			w.(http.Flusher).Flush()
			close(started)
			<-r.Context().Done()
			close(canceled)
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	var inflight int64
	for _, e := range mustStatus(f) {
		inflight += e.LocalRequests
	}
	if inflight != 1 {
		t.Fatalf("in flight %d while streaming, want 1", inflight)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream request not canceled after the client left")
	}
	waitIdle(t, f) // the lease is settled (its first byte came): Total alone reads 0 already
}

// TestDeadUpstreamIsRetriedOnNextCandidate: requests homed on a closed
// upstream go to their next candidate; no request fails.
func TestDeadUpstreamIsRetriedOnNextCandidate(t *testing.T) {
	f := newFixture(t, 3)
	dead := f.ups[1]
	dead.Close()
	deadID := mustID(t, dead.URL)
	fallbacks := 0
	for i := range 60 {
		resp := f.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"prompt number %d"}`, i))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d %s", i, resp.StatusCode, readAll(t, resp.Body))
		}
		if resp.Header.Get("X-Prefixring-Endpoint") == mustName(t, dead.URL) {
			t.Fatalf("request %d answered by the dead endpoint", i)
		}
		if resp.Header.Get("X-Prefixring-Decision") == "fallback" {
			fallbacks++
		}
		readAll(t, resp.Body)
	}
	if fallbacks == 0 {
		t.Fatal("no request was homed on the dead endpoint; the test proves nothing")
	}
	st, _ := f.balancer.Status()
	for _, e := range st {
		if e.ID == deadID && e.Healthy {
			t.Fatalf("dead endpoint still healthy after %d failures", fallbacks)
		}
	}
}

func TestAllUpstreamsDownIs502(t *testing.T) {
	f := newFixture(t, 2, func(c *Config) { c.MaxRetries = 5 })
	for _, u := range f.ups {
		u.Close()
	}
	resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
	assertAPIError(t, resp, 502, "upstream_error")
}

func TestNoHealthyEndpointIs503(t *testing.T) {
	f := newFixture(t, 2)
	f.setHealthy(nil)
	resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
	assertAPIError(t, resp, 503, "service_unavailable")
	for _, u := range f.ups {
		if n := u.served.Load(); n != 0 {
			t.Fatalf("%s served %d requests while unhealthy", u.name, n)
		}
	}
}

func TestBadRequestsGetOpenAIErrors(t *testing.T) {
	f := newFixture(t, 1, func(c *Config) { c.MaxBodyBytes = 1024 })
	cases := []struct {
		name, method, path, body string
		status                   int
		kind                     string
	}{
		{"malformed JSON", "POST", "/v1/chat/completions", `{"model":"m","messages":[`, 400, "invalid_request_error"},
		{"missing messages", "POST", "/v1/chat/completions", `{"model":"m"}`, 400, "invalid_request_error"},
		{"wrong prompt type", "POST", "/v1/completions", `{"model":"m","prompt":42}`, 400, "invalid_request_error"},
		{"model a number", "POST", "/v1/completions", `{"model":42,"prompt":"hi"}`, 400, "invalid_request_error"},
		{"model an object", "POST", "/v1/chat/completions", `{"model":{"id":"m"},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"model an array", "POST", "/v1/completions", `{"model":["m"],"prompt":"hi"}`, 400, "invalid_request_error"},
		{"model a bool", "POST", "/v1/embeddings", `{"model":false,"input":"hi"}`, 400, "invalid_request_error"},
		{"not an object", "POST", "/v1/completions", `[1,2]`, 400, "invalid_request_error"},
		{"too large", "POST", "/v1/completions", `{"model":"m","prompt":"` + strings.Repeat("a", 2000) + `"}`, 413, "invalid_request_error"},
		{"unknown route", "POST", "/admin/secret", `{}`, 404, "invalid_request_error"},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, "invalid_request_error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, f.srv.URL+tc.path, strings.NewReader(tc.body))
			resp, err := f.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			assertAPIError(t, resp, tc.status, tc.kind)
		})
	}
	if n := f.ups[0].served.Load(); n != 0 {
		t.Fatalf("upstream served %d bad requests", n)
	}
}

// TestEmptyBodiesAre400: an empty or whitespace-only body on a JSON route
// the router keys (chat, completions, embeddings) gets the router's own
// 400 in OpenAI's shape, as {"model":"m"} does, with or without a session
// header (whose requests are otherwise forwarded unparsed), and never
// reaches an upstream. Before the fix an empty body skipped the keyer and
// was forwarded, so the client got whatever the upstream made of it.
func TestEmptyBodiesAre400(t *testing.T) {
	f := newFixture(t, 1)
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
		for _, body := range []string{"", " \r\n\t "} {
			for _, session := range []string{"", "user-42"} {
				t.Run(fmt.Sprintf("%s %q session %q", path, body, session), func(t *testing.T) {
					resp := f.post(t, path, body, "X-Session-ID", session)
					assertAPIError(t, resp, http.StatusBadRequest, "invalid_request_error")
				})
			}
		}
	}
	if n := f.ups[0].served.Load(); n != 0 {
		t.Fatalf("upstream served %d empty bodies", n)
	}
}

// TestMissingOrNullModelIsForwarded: vLLM's request models declare
// model Optional[str] = None and serve the first served model for a
// missing or null model (SGLang serves its default too), so the router
// must not refuse such a body: it reaches the engine byte for byte, keyed
// as model "" (the name that selects the default as well), and two with
// the same prompt share a key and an endpoint. A model that is present
// but not a string is still the router's 400 (TestBadRequestsGetOpenAIErrors).
// Before the fix both got 400: "model" is required, "model" must be a
// string.
func TestMissingOrNullModelIsForwarded(t *testing.T) {
	f := newFixture(t, 4)
	for _, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Write(b)
		})
	}
	chat := `"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan a trip to Lyon"}],"max_tokens":4`
	for _, tc := range []struct {
		route       prefix.Route
		path, named string // named: the body with "model":"" in place of none
		unnamed     []string
	}{
		{prefix.RouteChat, "/v1/chat/completions", `{"model":"",` + chat + `}`, []string{
			`{` + chat + `}`,
			`{"model":null,` + chat + `}`,
			`{` + chat + `, "model" : null }`,
		}},
		{prefix.RouteCompletions, "/v1/completions", `{"model":"","prompt":"Once upon a time"}`, []string{
			`{"prompt":"Once upon a time"}`,
			`{"model":null,"prompt":"Once upon a time"}`,
		}},
		{prefix.RouteEmbeddings, "/v1/embeddings", `{"model":"","input":"a sentence to embed"}`, []string{
			`{"input":"a sentence to embed"}`,
			`{"input":"a sentence to embed","model":null}`,
		}},
	} {
		key := func(body string) uint64 {
			t.Helper()
			r := httptest.NewRequest(http.MethodPost, tc.path, nil)
			req, aerr := f.router.requestOf(r, tc.route, []byte(body))
			if aerr != nil || !req.Keyed {
				t.Fatalf("%s: %+v %v", body, req, aerr)
			}
			return req.Key
		}
		want := key(tc.named)
		if key(strings.Replace(tc.named, `"model":""`, `"model":"m"`, 1)) == want {
			t.Fatalf("%s: model \"\" keys like model m", tc.path)
		}
		home := ""
		for _, body := range tc.unnamed {
			for range 2 {
				resp := f.post(t, tc.path, body)
				got := readAll(t, resp.Body)
				if resp.StatusCode != http.StatusOK || got != body {
					t.Fatalf("%s: %d, the engine got %s", body, resp.StatusCode, got)
				}
				ep := resp.Header.Get("X-Prefixring-Endpoint")
				if d := resp.Header.Get("X-Prefixring-Decision"); d != "home" || home != "" && ep != home {
					t.Fatalf("%s: decision %q on %s, want home on %s", body, d, ep, home)
				}
				home = ep
			}
			if got := key(body); got != want {
				t.Errorf("%s keyed %#x, want model \"\"'s %#x", body, got, want)
			}
		}
	}
}

func TestSessionHeaderOverridesPrefix(t *testing.T) {
	f := newFixture(t, 4)
	homes := map[string]bool{}
	for i := range 30 {
		resp := f.post(t, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"different prompt %d"}`, i), "X-Session-ID", "user-42")
		homes[resp.Header.Get("X-Prefixring-Endpoint")] = true
		readAll(t, resp.Body)
	}
	if len(homes) != 1 {
		t.Fatalf("one session went to %d endpoints", len(homes))
	}
}

// A session that switches models keeps one cache per model on its
// servers, so the session header's key includes the body's model
// (prefix.SessionKey(model, lora, session)): one session, two models, two keys;
// one model, any prompt, one key. The session path still forwards bodies
// the keyer would refuse: a body whose model cannot be read keys as the
// session alone instead of being rejected.
func TestSessionKeyIncludesTheModel(t *testing.T) {
	f := newFixture(t, 1)
	r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	r.Header.Set("X-Session-ID", "user-42")
	key := func(body string) uint64 {
		t.Helper()
		req, aerr := f.router.requestOf(r, prefix.RouteCompletions, []byte(body))
		if aerr != nil || !req.Keyed || !req.Session {
			t.Fatalf("%s: %+v %v", body, req, aerr)
		}
		return req.Key
	}
	llama := key(`{"model":"llama","prompt":"hello"}`)
	if want := prefix.SessionKey("llama", "", "user-42"); llama != want {
		t.Fatalf("session key %#x, want SessionKey(llama, user-42) %#x", llama, want)
	}
	if qwen := key(`{"prompt":"hello","model":"qwen"}`); qwen == llama {
		t.Fatal("one session under two models got one key")
	}
	if other := key(`{"model":"ll\u0061ma","prompt":"a different prompt"}`); other != llama {
		t.Fatal("one session and one model (escaped) got two keys")
	}
	if odd := key(`not json at all`); odd != prefix.SessionKey("", "", "user-42") {
		t.Fatalf("unreadable body keyed %#x, want the session alone", odd)
	}
}

// TestSessionKeyIncludesTheLoraPath: SGLang picks a LoRA adapter per
// request with a string lora_path, and an adapter keeps its own cache as a
// model does, so a session that switches adapters gets a key per adapter;
// a lora_path that is not a string is left to SGLang and keys as none.
func TestSessionKeyIncludesTheLoraPath(t *testing.T) {
	f := newFixture(t, 1)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Header.Set("X-Session-ID", "user-42")
	key := func(body string) uint64 {
		t.Helper()
		req, aerr := f.router.requestOf(r, prefix.RouteChat, []byte(body))
		if aerr != nil || !req.Keyed || !req.Session {
			t.Fatalf("%s: %+v %v", body, req, aerr)
		}
		return req.Key
	}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	base := key(`{"model":"llama",` + msgs + `}`)
	sql := key(`{"model":"llama","lora_path":"sql",` + msgs + `}`)
	if want := prefix.SessionKey("llama", "sql", "user-42"); sql != want {
		t.Fatalf("session key %#x, want SessionKey(llama, sql, user-42) %#x", sql, want)
	}
	if sql == base {
		t.Fatal("a session with and without an adapter got one key")
	}
	if code := key(`{"lora_path":"code",` + msgs + `,"model":"llama"}`); code == sql || code == base {
		t.Fatal("one session under two adapters got one key")
	}
	if again := key(`{` + msgs + `,"lora_path":"sql","model":"llama"}`); again != sql {
		t.Fatal("one session and one adapter got two keys")
	}
	if odd := key(`{"model":"llama","lora_path":["sql"],` + msgs + `}`); odd != base {
		t.Fatal("a lora_path that is not a string changed the key")
	}
}

func TestOtherRoutesAreProxied(t *testing.T) {
	f := newFixture(t, 2)
	resp, err := f.srv.Client().Get(f.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(body, `"path":"/v1/models"`) || resp.Header.Get("X-Prefixring-Decision") != "fallback" {
		t.Fatalf("GET /v1/models: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	a := f.post(t, "/v1/embeddings", `{"model":"e","input":"embed this text"}`)
	b := f.post(t, "/v1/embeddings", `{"input":"embed this text","model":"e"}`)
	if a.Header.Get("X-Prefixring-Decision") != "home" || a.Header.Get("X-Prefixring-Endpoint") != b.Header.Get("X-Prefixring-Endpoint") {
		t.Fatalf("embeddings not keyed: %v / %v", a.Header, b.Header)
	}
}

func mustStatus(f *fixture) []ring.EndpointStatus {
	st, _ := f.balancer.Status()
	return st
}

// Under the tokens signal a request weighs its body's tokens (bytes / 4)
// until its first byte comes back, then nothing (the default decode
// weight), and is counted as one in-flight request throughout.
func TestStreamSettlesAtTheFirstByte(t *testing.T) {
	f := newFixture(t, 1)
	first, more := make(chan struct{}), make(chan struct{})
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush() // headers only: the prefill is still running
		<-first
		io.WriteString(w, "data: {}\n\n")
		w.(http.Flusher).Flush()
		<-more
		io.WriteString(w, "data: [DONE]\n\n")
	})
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", 4000) + `"}]}`
	resp := f.post(t, "/v1/chat/completions", body)
	id := mustID(t, f.ups[0].URL)
	if got := f.balancer.Inflight().Load(id); got != int64(len(body)/4) {
		t.Fatalf("load %d before the first byte, want %d (body bytes / 4)", got, len(body)/4)
	}
	close(first)
	buf := make([]byte, 8)
	if _, err := io.ReadAtLeast(resp.Body, buf, 8); err != nil {
		t.Fatal(err)
	}
	if got, reqs := f.balancer.Inflight().Load(id), f.balancer.Inflight().Requests(id); got != 0 || reqs != 1 {
		t.Fatalf("after the first byte: load %d, requests %d; want 0, 1", got, reqs)
	}
	close(more)
	readAll(t, resp.Body)
}

// A chat request's new tokens are known to the ring (a first turn's are
// all new); a completion's are not, since it is sent as one growing
// prompt: the ring bounds the first without P's floor when its key alone
// places it (ring.Request.NewKnown).
func TestChatRequestsKnowTheirNewTokens(t *testing.T) {
	f := newFixture(t, 1)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	first, aerr := f.router.requestOf(r, prefix.RouteChat, []byte(chatBody("You are terse.", "hello")))
	if aerr != nil || !first.Keyed || !first.NewKnown || first.NewTokens != 0 {
		t.Fatalf("chat first turn: %+v %v", first, aerr)
	}
	later := `{"model":"llama","messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"hi"},{"role":"user","content":"and then?"}]}`
	turn, aerr := f.router.requestOf(r, prefix.RouteChat, []byte(later))
	if aerr != nil || !turn.NewKnown || turn.NewTokens <= 0 || turn.NewTokens >= turn.Tokens {
		t.Fatalf("chat later turn: %+v %v", turn, aerr)
	}
	comp, aerr := f.router.requestOf(r, prefix.RouteCompletions, []byte(`{"model":"llama","prompt":"hello there, a long prompt"}`))
	if aerr != nil || !comp.Keyed || comp.NewKnown {
		t.Fatalf("completion: %+v %v", comp, aerr)
	}
}

// A completion whose key's last prompt the router saw is weighed at its
// home by what that prompt did not cover (the History); the first turn,
// and every turn with the history off, by its whole prompt. It stays a
// guess (NewKnown false): the last turn may not have gone home.
func TestCompletionNewTokensFromTheLastPrompt(t *testing.T) {
	turn1 := strings.Repeat("Earlier turns of a long conversation. ", 100)
	turn2 := turn1 + "An answer, and the user's next question."
	body := func(p string) []byte { return []byte(`{"model":"llama","prompt":"` + p + `"}`) }
	r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	for _, size := range []int{prefix.DefaultHistoryKeys, 0} {
		f := newFixture(t, 1, func(c *Config) { c.CompletionHistory = size })
		first, aerr := f.router.requestOf(r, prefix.RouteCompletions, body(turn1))
		if aerr != nil || !first.Keyed || first.NewTokens != 0 {
			t.Fatalf("history %d, first turn: %+v %v", size, first, aerr)
		}
		next, aerr := f.router.requestOf(r, prefix.RouteCompletions, body(turn2))
		if aerr != nil || next.Key != first.Key || next.NewKnown {
			t.Fatalf("history %d, next turn: %+v %v", size, next, aerr)
		}
		if size == 0 {
			if next.NewTokens != 0 {
				t.Errorf("history off: new tokens %d, want 0 (all of the prompt)", next.NewTokens)
			}
			continue
		}
		// What turn1 left uncovered (under a chunk) plus turn2's new text, and
		// the body's JSON around the prompt.
		added := int64(len(turn2)-len(turn1)) / 4
		if next.NewTokens < added || next.NewTokens > added+prefix.ChunkChars/4+16 {
			t.Errorf("new tokens %d of %d, want %d to %d", next.NewTokens, next.Tokens, added, added+prefix.ChunkChars/4+16)
		}
	}
}
