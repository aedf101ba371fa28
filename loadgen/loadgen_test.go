package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/prefixring/prefixring/sim/vllm"
	"github.com/prefixring/prefixring/sim/workload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// simServers starts n simulated vLLM servers on loopback.
func simServers(t *testing.T, n int) []string {
	t.Helper()
	var urls []string
	for range n {
		hs := httptest.NewServer(simEngine(t))
		t.Cleanup(hs.Close)
		urls = append(urls, hs.URL)
	}
	return urls
}

// simEngine runs a simulated vLLM engine serving model "m" until the test
// ends, and returns its handler. Cleanups run last first: a server made
// on the handler after this call closes before the engine stops.
func simEngine(t *testing.T) http.Handler {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := vllm.DefaultConfig()
	cfg.Model = "m"
	s, err := vllm.New(cfg, reg, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s.Handler()
}

func multiTurn(t *testing.T, conversations, turns int) []workload.Session {
	t.Helper()
	w := workload.DefaultMultiTurn(workload.Chat)
	w.Conversations, w.Turns, w.OutputTokens = conversations, turns, 8
	ss, err := w.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

func config(urls ...string) Config {
	c := DefaultConfig()
	c.URLs, c.ThinkScale, c.Timeout = urls, 0, 30*time.Second
	return c
}

// Against simulated engines, every request succeeds, every answer is
// checked by its echoed id, and the cached share the responses report is
// the one the engines' own counters report.
func TestClosedLoopAgainstSimulatedEngines(t *testing.T) {
	urls := simServers(t, 2)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			cfg := config(urls...)
			cfg.Concurrency, cfg.Stream, cfg.EngineMetrics = 4, stream, urls
			rep, err := Run(context.Background(), cfg, multiTurn(t, 8, 3))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Requests != 24 || rep.OK != 24 || rep.Verified != 24 {
				t.Fatalf("requests %d ok %d verified %d, want 24 each; errors %v %v", rep.Requests, rep.OK, rep.Verified, rep.Errors, rep.FirstErrors)
			}
			if rep.Model != "m" {
				t.Errorf("model %q, want the one /v1/models lists", rep.Model)
			}
			if rep.Engine == nil || rep.Engine.Source != "vllm" || rep.Engine.PromptTokens != float64(rep.PromptTokens) ||
				rep.Engine.CachedTokens != float64(rep.CachedTokens) {
				t.Fatalf("engine counts %+v, responses: %d prompt, %d cached", rep.Engine, rep.PromptTokens, rep.CachedTokens)
			}
			if rep.CachedTokens == 0 {
				t.Error("no cached tokens over conversations that share system prompts")
			}
			if rep.OutputTokens != 24*8 || rep.TTFT.N != 24 || rep.TTFT.P50 <= 0 || rep.E2E.P99 < rep.TTFT.P99 {
				t.Errorf("output %d, ttft %+v, e2e %+v", rep.OutputTokens, rep.TTFT, rep.E2E)
			}
			if stream && rep.ITL.N == 0 {
				t.Error("streams measured no inter-token latency")
			}
			// Two URLs in turn, turns sequential per conversation: later
			// turns land on both engines, counted in LaterTurns.
			if rep.LaterTurns != 16 || len(rep.Endpoints) != 2 {
				t.Errorf("later turns %d, endpoints %v", rep.LaterTurns, rep.Endpoints)
			}
		})
	}
}

// NewConns counts the requests that went out on a connection opened for
// them: one for a whole conversation's turns in turn on a keep-alive
// server, every request where the server closes each connection.
func TestNewConnectionsAreCounted(t *testing.T) {
	engine := simEngine(t)
	keep := httptest.NewServer(engine)
	defer keep.Close()
	closing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		engine.ServeHTTP(w, r)
	}))
	defer closing.Close()
	for _, c := range []struct {
		url  string
		want int
	}{{keep.URL, 1}, {closing.URL, 4}} {
		cfg := config(c.url)
		cfg.Model, cfg.Concurrency = "m", 1
		rep, err := Run(context.Background(), cfg, multiTurn(t, 1, 4))
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK != 4 || rep.NewConns != c.want {
			t.Errorf("%s: ok %d of 4, new connections %d, want %d", c.url, rep.OK, rep.NewConns, c.want)
		}
	}
}

// A refused connection moves the request to the next URL, as a client of
// DNS round-robin with several A records does.
func TestRefusedConnectionMovesToTheNextURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	urls := simServers(t, 1)
	cfg := config(dead, urls[0])
	cfg.Concurrency = 2
	rep, err := Run(context.Background(), cfg, multiTurn(t, 4, 2))
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK != 8 || rep.Failovers == 0 {
		t.Fatalf("ok %d of 8, failovers %d; errors %v", rep.OK, rep.Failovers, rep.FirstErrors)
	}

	cfg = config(dead)
	cfg.Model = "m"
	rep, err = Run(context.Background(), cfg, multiTurn(t, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors[ErrConnect] != 1 {
		t.Fatalf("errors %v, want one %s", rep.Errors, ErrConnect)
	}
}

// swapper answers each request with another request's answer: the echoed
// id of the request before it, or, with noEcho, a prompt-token count that
// shrinks. tokens, where set, gives the nth answer's prompt tokens instead.
type swapper struct {
	mu     sync.Mutex
	prev   string
	noEcho bool
	tokens func(n int64) int64
	n      atomic.Int64
}

func (s *swapper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	id := s.prev
	s.prev = r.Header.Get("X-Request-Id")
	s.mu.Unlock()
	if id == "" {
		id = r.Header.Get("X-Request-Id")
	}
	if !s.noEcho {
		w.Header().Set("X-Request-Id", id)
	}
	w.Header().Set("Content-Type", "application/json")
	n := s.n.Add(1)
	prompt := 1000 - n
	if s.tokens != nil {
		prompt = s.tokens(n)
	}
	fmt.Fprintf(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":%d,"completion_tokens":1}}`, prompt)
}

// A response that answers another request fails the run: by its echoed
// X-Request-Id, or, from a server that echoes none, by a later turn that
// reports fewer prompt tokens than the turn before it.
func TestAnswersToOtherRequestsAreCaught(t *testing.T) {
	for _, noEcho := range []bool{false, true} {
		t.Run(fmt.Sprint("noEcho=", noEcho), func(t *testing.T) {
			hs := httptest.NewServer(&swapper{noEcho: noEcho})
			defer hs.Close()
			cfg := config(hs.URL)
			cfg.Model, cfg.Concurrency = "m", 1
			rep, err := Run(context.Background(), cfg, multiTurn(t, 2, 3))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Errors[ErrMismatch] == 0 {
				t.Fatalf("no mismatch caught: %+v", rep.Errors)
			}
		})
	}
}

// Each of the two checks catches a foreign answer by itself. An echoed
// X-Request-Id of another request is a mismatch even where the prompt
// tokens grow as a conversation's do; and, where no id is echoed, a later
// turn that reports as many prompt tokens as the turn before it is one
// too: its history is the earlier turn's and more, so a count no larger is
// another conversation's (a turn that reports none is not). A mismatch
// ends its conversation, so each run counts exactly the turns named here.
func TestEachMismatchCheckCatchesAlone(t *testing.T) {
	for _, c := range []struct {
		name           string
		s              *swapper
		conversations  int
		mismatches, ok int
		detail         string
	}{
		// Turn 0 of conversation 0 gets its own id; turn 1 gets turn 0's,
		// and conversation 1's turn 0 gets that turn 1's.
		{"echo", &swapper{tokens: func(n int64) int64 { return 1000 + 100*n }}, 2, 2, 1, "X-Request-Id"},
		{"same prompt", &swapper{noEcho: true, tokens: func(int64) int64 { return 500 }}, 1, 1, 1, "reports 500 prompt tokens, turn 0 reported 500"},
		// A turn that reports no usage says nothing of whose answer it is.
		{"no usage", &swapper{noEcho: true, tokens: func(n int64) int64 { return 500 * max(0, 2-n) }}, 1, 0, 3, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			hs := httptest.NewServer(c.s)
			defer hs.Close()
			cfg := config(hs.URL)
			cfg.Model, cfg.Concurrency = "m", 1
			rep, err := Run(context.Background(), cfg, multiTurn(t, c.conversations, 3))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Errors[ErrMismatch] != c.mismatches || rep.OK != c.ok || !strings.Contains(rep.FirstErrors[ErrMismatch], c.detail) {
				t.Fatalf("mismatches %d ok %d, want %d and %d, the first naming %q; errors %v %v",
					rep.Errors[ErrMismatch], rep.OK, c.mismatches, c.ok, c.detail, rep.Errors, rep.FirstErrors)
			}
		})
	}
}

// Failures are counted by kind: a 5xx (500 too), a 4xx, a stream cut
// before [DONE], an error event in a stream, a body that is no completion
// (streamed, or whole with no choices), a timeout.
func TestErrorsAreCountedByKind(t *testing.T) {
	cases := map[string]http.HandlerFunc{
		ErrHTTP5xx:          func(w http.ResponseWriter, r *http.Request) { http.Error(w, `{"error":{}}`, 503) },
		ErrHTTP5xx + "/500": func(w http.ResponseWriter, r *http.Request) { http.Error(w, `{"error":{}}`, 500) },
		ErrHTTP4xx:          func(w http.ResponseWriter, r *http.Request) { http.Error(w, `{"error":{}}`, 400) },
		ErrStream + "/cut": func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		},
		ErrStream + "/event": func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "data: {\"error\":{\"message\":\"upstream gone\",\"code\":\"stream_interrupted\"}}\n\ndata: [DONE]\n\n")
		},
		ErrDecode:            func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "data: not json\n\n") },
		ErrDecode + "/plain": func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"choices":[]}`) }, // not streamed, no answer
		ErrTimeout: func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // so the server sees the client hang up
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			hs := httptest.NewServer(h)
			defer hs.Close()
			cfg := config(hs.URL)
			cfg.Model, cfg.Stream, cfg.Concurrency = "m", !strings.HasSuffix(name, "/plain"), 1
			if name == ErrTimeout {
				cfg.Timeout = 200 * time.Millisecond
			}
			rep, err := Run(context.Background(), cfg, multiTurn(t, 2, 3))
			if err != nil {
				t.Fatal(err)
			}
			kind, _, _ := strings.Cut(name, "/")
			// A failed turn ends its conversation: one failure each.
			if rep.Requests != 2 || rep.Errors[kind] != 2 || rep.OK != 0 {
				t.Fatalf("requests %d, errors %v, want 2 of kind %s", rep.Requests, rep.Errors, kind)
			}
		})
	}
}

// Open loop: sessions start on a Poisson process at the rate asked, and
// --requests caps the requests sent, whatever the workload holds.
func TestOpenLoopRateAndRequestCap(t *testing.T) {
	urls := simServers(t, 1)
	cfg := config(urls...)
	cfg.Rate, cfg.Requests = 200, 10
	start := time.Now()
	rep, err := Run(context.Background(), cfg, multiTurn(t, 40, 1))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 10 || rep.OK != 10 {
		t.Fatalf("sent %d, ok %d; want 10", rep.Requests, rep.OK)
	}
	// 10 starts at 200/s take ~45 ms; the workload's own starts (2/s)
	// would take seconds.
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v: the rate was not applied", d)
	}
}

func TestEngineMetricsOfLlamaCpp(t *testing.T) {
	var calls atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1) // before: 100 computed, 0 cached; after: 160 computed, 240 cached
		fmt.Fprintf(w, "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total %d\n"+
			"# TYPE llamacpp:prompt_tokens_cached_total counter\nllamacpp:prompt_tokens_cached_total %d\n", 100+60*(n-1), 240*(n-1))
	}))
	defer hs.Close()
	a, err := scrapeAll(context.Background(), []string{hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	b, err := scrapeAll(context.Background(), []string{hs.URL + "/metrics"})
	if err != nil {
		t.Fatal(err)
	}
	got := b.minus(a)
	if got.Source != "llamacpp" || got.PromptTokens != 300 || got.CachedTokens != 240 || got.CachedShare != 0.8 {
		t.Fatalf("%+v, want 300 prompt tokens of which 240 cached (share 0.8)", got)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "up 1") }))
	defer bad.Close()
	if _, err := scrapeAll(context.Background(), []string{bad.URL}); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Fatalf("metrics without cache counters: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{
		{},
		{URLs: []string{"127.0.0.1:8000"}, Timeout: time.Second},
		{URLs: []string{"http://a"}, Timeout: time.Second, Rate: 1, Concurrency: 1},
		{URLs: []string{"http://a"}, Timeout: time.Second, Rate: -1},
		{URLs: []string{"http://a"}, Timeout: 0},
		{URLs: []string{"http://a"}, Timeout: time.Second, EngineMetrics: []string{"a:1"}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	good := config("http://a")
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := SplitList(" http://a/, ,http://b"); strings.Join(got, " ") != "http://a http://b" {
		t.Fatalf("SplitList: %q", got)
	}
}

func TestReportRoundTripAndCompare(t *testing.T) {
	urls := simServers(t, 1)
	cfg := config(urls...)
	cfg.Concurrency = 2
	rep, err := Run(context.Background(), cfg, multiTurn(t, 2, 2))
	if err != nil {
		t.Fatal(err)
	}
	rep.Label = "one"
	p := filepath.Join(t.TempDir(), "r.json")
	if err := rep.WriteJSON(p); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(p)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(rep)
	b, _ := json.Marshal(back)
	if string(a) != string(b) {
		t.Fatalf("round trip changed the report:\n%s\n%s", a, b)
	}
	// The samples file holds every request, by session and turn, with the
	// report's own measurements.
	sp := filepath.Join(t.TempDir(), "s.jsonl")
	if err := rep.WriteSamples(sp); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(sp)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != rep.Requests {
		t.Fatalf("%d sample lines, %d requests:\n%s", len(lines), rep.Requests, raw)
	}
	var ttft time.Duration
	for i, l := range lines {
		var s Sample
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatal(err)
		}
		if s.Session != i/2 || s.Turn != i%2 || s.URL != urls[0] || s.TTFT <= 0 || s.E2E < s.TTFT || s.PromptTokens == 0 || !s.Verified {
			t.Errorf("line %d: %+v", i, s)
		}
		ttft = max(ttft, s.TTFT)
	}
	if got := float64(ttft) / float64(time.Millisecond); got != rep.TTFT.Max {
		t.Errorf("largest sample TTFT %v ms, report's max %v ms", got, rep.TTFT.Max)
	}
	var out strings.Builder
	back.Label = "two"
	PrintCompare(&out, rep, back)
	if !strings.Contains(out.String(), "one") || !strings.Contains(out.String(), "two") || !strings.Contains(out.String(), "4 / 4") {
		t.Fatalf("compare table:\n%s", out.String())
	}
}

func TestDistQuantiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	d := dist(ds)
	want := Dist{N: 100, Mean: 50.5, P50: 50, P90: 90, P95: 95, P99: 99, Max: 100}
	if d != want {
		t.Fatalf("dist(1..100 ms) = %+v, want %+v", d, want)
	}
	// Nearest rank, as prefixring eval's quantiles (sim/eval): the p-th
	// percentile of n is the ceil(p·n)-th smallest. Until stop 40 it was the
	// (floor(p·n)+1)-th, one rank high wherever p·n is whole (the p95 of a
	// 300-request run was the 286th of 300, not the 285th).
	for _, c := range []struct {
		n             int
		p50, p95, p99 float64
	}{{1, 1, 1, 1}, {20, 10, 19, 20}, {300, 150, 285, 297}, {768, 384, 730, 761}} {
		var ds []time.Duration
		for i := 1; i <= c.n; i++ {
			ds = append(ds, time.Duration(i)*time.Millisecond)
		}
		if d := dist(ds); d.P50 != c.p50 || d.P95 != c.p95 || d.P99 != c.p99 {
			t.Errorf("n=%d: p50/p95/p99 %v/%v/%v, want %v/%v/%v", c.n, d.P50, d.P95, d.P99, c.p50, c.p95, c.p99)
		}
	}
}

// A streamed answer whose server ends its chunked body in a write of its
// own after [DONE] (the router's last flush, or uvicorn's) must not cost
// the conversation's next turn a new connection: the client reads the
// body to its end, as OpenAI's Python client does after [DONE], so
// whether a connection is reused does not depend on how a proxy groups
// its last writes. Before stop 40 the client stopped at [DONE], and each
// of these 4 turns opened a connection of its own.
func TestStreamReadToItsEndKeepsTheConnection(t *testing.T) {
	var n atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":1}}\n\n", 100*n.Add(1))
		fmt.Fprint(w, "data: [DONE]\n\n")
		w.(http.Flusher).Flush()
		// The body's end goes out in a write of its own, a moment later.
		// The pause shapes the server's writes; it waits for nothing:
		// a client that reads to the end passes whatever the timing, one
		// that stops at [DONE] fails unless this machine stalls it past
		// the pause.
		time.Sleep(5 * time.Millisecond)
	}))
	defer hs.Close()
	cfg := config(hs.URL)
	cfg.Model, cfg.Stream, cfg.Concurrency = "m", true, 1
	rep, err := Run(context.Background(), cfg, multiTurn(t, 1, 4))
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK != 4 || rep.NewConns != 1 {
		t.Fatalf("ok %d of 4, new connections %d, want 1 (errors %v)", rep.OK, rep.NewConns, rep.FirstErrors)
	}
}

// TTFT is the time to the first chunk that carries content, as vLLM's
// benchmark_serving.py counts it: a chat stream's first event, which
// carries the assistant's role and no text, is not a token. (vLLM sends
// that event in the same step as the first token, so `vllm bench serve`,
// which counts any event with choices, reads the same there.) The times
// are synctest's fake clock.
func TestTTFTIsTheFirstContentChunk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rd, wr := io.Pipe()
		go func() {
			for _, ev := range []struct {
				after time.Duration
				data  string
			}{
				{10 * time.Millisecond, `{"choices":[{"delta":{"role":"assistant","content":""}}]}`},
				{40 * time.Millisecond, `{"choices":[{"delta":{"content":"a"}}]}`},
				{20 * time.Millisecond, `{"choices":[{"delta":{"content":"b"}}]}`},
				{20 * time.Millisecond, `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}`},
				{0, `[DONE]`},
			} {
				time.Sleep(ev.after)
				fmt.Fprintf(wr, "data: %s\n\n", ev.data)
			}
			wr.Close()
		}()
		cl := &caller{cfg: &Config{Stream: true}}
		var s Sample
		text := cl.readStream(context.Background(), rd, time.Now(), &s)
		if s.Err != "" || text != "ab" {
			t.Fatalf("error %q %s, text %q", s.Err, s.Detail, text)
		}
		if s.TTFT != 50*time.Millisecond || s.ITL != 20*time.Millisecond || s.E2E != 90*time.Millisecond || s.OutputTokens != 2 {
			t.Fatalf("TTFT %v ITL %v E2E %v output %d; want 50ms, 20ms, 90ms, 2", s.TTFT, s.ITL, s.E2E, s.OutputTokens)
		}
	})
}

// Open loop with --requests: once the sessions started hold the whole
// budget, the run does not wait for the next session's start time, which
// would send nothing and only stretch the run's wall time (and so cut its
// requests and tokens per second): a trace replayed as recorded starts
// its ticks seconds apart. Here the second session starts an hour in.
func TestOpenLoopEndsWhenTheRequestCapIsSpent(t *testing.T) {
	urls := simServers(t, 1)
	cfg := config(urls...)
	cfg.Requests = 1
	ss := multiTurn(t, 2, 1)
	ss[0].Start, ss[1].Start = 0, time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := Run(ctx, cfg, ss)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the run waited for a session past its request cap, until its context ended (%.1f s)", rep.Duration)
	}
	if rep.Requests != 1 || rep.OK != 1 {
		t.Fatalf("sent %d, ok %d; want 1", rep.Requests, rep.OK)
	}
}
