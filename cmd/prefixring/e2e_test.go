package main

import (
	"bufio"
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
	"syscall"
	"testing"
	"time"

	"github.com/prefixring/prefixring/internal/e2eproc"
	"github.com/prefixring/prefixring/internal/e2etest"
)

// The end-to-end tests run the built binary in front of real HTTP upstreams
// on 127.0.0.1.

func startRouter(t *testing.T, args ...string) *e2eproc.Proc {
	t.Helper()
	// --routing-headers-address: the tests match X-Prefixring-Endpoint to
	// their upstreams' host:port.
	return e2etest.Serve(t, "router", append([]string{"--health-interval", "200ms", "--routing-headers-address"}, args...)...)
}

// upstreamFleet is n upstreams that answer after delay, or as handler says.
type upstreamFleet struct {
	servers []*httptest.Server
	delay   atomic.Int64
	handler atomic.Pointer[http.HandlerFunc]
}

func newFleet(t *testing.T, n int) *upstreamFleet {
	f := &upstreamFleet{}
	for i := range n {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" {
				return
			}
			if h := f.handler.Load(); h != nil {
				(*h)(w, r)
				return
			}
			io.Copy(io.Discard, r.Body)
			time.Sleep(time.Duration(f.delay.Load()))
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"object":"chat.completion","upstream":%d}`, i)
		}))
		t.Cleanup(s.Close)
		f.servers = append(f.servers, s)
	}
	return f
}

func (f *upstreamFleet) urls() string {
	var u []string
	for _, s := range f.servers {
		u = append(u, s.URL)
	}
	return strings.Join(u, ",")
}

func chat(user string) string {
	return fmt.Sprintf(`{"model":"llama","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":%q}]}`, user)
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestServeEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	fleet := newFleet(t, 4)
	r := startRouter(t, "--endpoints", fleet.urls())

	t.Run("same prefix, same endpoint", func(t *testing.T) {
		seen := map[string]int{}
		for range 10 {
			resp, body := post(t, r.URL, chat("How tall is Everest?"))
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			seen[resp.Header.Get("X-Prefixring-Endpoint")]++
		}
		if len(seen) != 1 {
			t.Fatalf("one prefix, endpoints %v", seen)
		}
	})

	t.Run("hot prefix spills within the bound", func(t *testing.T) {
		fleet.delay.Store(int64(300 * time.Millisecond))
		defer fleet.delay.Store(0)
		const n = 16
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := map[string]int{}
		decisions := map[string]int{}
		// 5000 tokens each (body bytes / 4), held until their answers
		// come: the load signal counts their prefill.
		hot := chat("the one hot question " + strings.Repeat("with a long pasted document ", 715))
		for range n {
			wg.Go(func() {
				resp, body := post(t, r.URL, hot)
				if resp.StatusCode != 200 {
					t.Errorf("%d %s", resp.StatusCode, body)
				}
				mu.Lock()
				got[resp.Header.Get("X-Prefixring-Endpoint")]++
				decisions[resp.Header.Get("X-Prefixring-Decision")]++
				mu.Unlock()
			})
		}
		wg.Wait()
		// 16 concurrent prompts of ~5000 tokens on 4 endpoints, c = 1.25:
		// the bound ends at ceil(1.25*16*5000/4) = 25000 tokens, five of
		// them, so no endpoint takes more than 6.
		for ep, c := range got {
			if c > 6 {
				t.Errorf("%s took %d of %d concurrent requests", ep, c, n)
			}
		}
		if decisions["spill"] == 0 || len(got) < 3 {
			t.Errorf("no spread: endpoints %v decisions %v", got, decisions)
		}
	})

	t.Run("SSE events arrive as produced", func(t *testing.T) {
		gate := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
				w.(http.Flusher).Flush()
				select {
				case <-gate:
				case <-time.After(20 * time.Second):
					return
				}
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		})
		fleet.handler.Store(&h)
		defer fleet.handler.Store(nil)
		resp, err := http.Post(r.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama","stream":true,"messages":[{"role":"user","content":"stream"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		events := 0
		for sc.Scan() {
			if !strings.HasPrefix(sc.Text(), "data: ") {
				continue
			}
			events++
			if sc.Text() != "data: [DONE]" {
				gate <- struct{}{} // the upstream waits for this: the event came through first
			}
		}
		if events != 4 {
			t.Fatalf("%d events, want 4", events)
		}
	})

	t.Run("bad bodies get OpenAI errors", func(t *testing.T) {
		for body, status := range map[string]int{`{"model":"llama"`: 400, `{"model":"llama"}`: 400, `{"model":"llama","messages":"hi"}`: 400} {
			resp, got := post(t, r.URL, body)
			if resp.StatusCode != status || !strings.Contains(got, `"error"`) || !strings.Contains(got, `"invalid_request_error"`) {
				t.Errorf("%s: %d %s", body, resp.StatusCode, got)
			}
		}
		resp, err := http.Get(r.URL + "/nope")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("unknown route: %d", resp.StatusCode)
		}
	})

	t.Run("upstream killed mid-test fails no request", func(t *testing.T) {
		fleet.delay.Store(int64(20 * time.Millisecond))
		defer fleet.delay.Store(0)
		var wg sync.WaitGroup
		var failed, total atomic.Int64
		stop := make(chan struct{})
		for c := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					resp, body := post(t, r.URL, chat(fmt.Sprintf("client %d question %d", c, i)))
					total.Add(1)
					if resp.StatusCode != 200 {
						failed.Add(1)
						t.Errorf("status %d: %s", resp.StatusCode, body)
					}
				}
			})
		}
		// Requests flow, the victim dies, the router ejects it, and more
		// requests flow: each step waits for what it needs, not for a
		// time in which a busy machine may serve only a few requests.
		waitUntil(t, "25 requests before the kill", func() bool { return total.Load() >= 25 })
		victim := fleet.servers[1]
		victim.CloseClientConnections()
		victim.Close()
		waitUntil(t, "the router to eject the killed upstream", func() bool { return ejected(t, r.Admin, victim.URL) })
		after := total.Load()
		waitUntil(t, "25 requests after the ejection", func() bool { return total.Load() >= after+25 })
		close(stop)
		wg.Wait()
		if failed.Load() != 0 || total.Load() < 50 {
			t.Fatalf("%d of %d requests failed", failed.Load(), total.Load())
		}
	})

	t.Run("operator routes only on the admin listener", func(t *testing.T) {
		for base, want := range map[string]int{r.URL: 404, r.Admin: 200} {
			for _, p := range []string{"/metrics", "/debug/ring"} {
				resp, err := http.Get(base + p)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("%s%s: %d, want %d", base, p, resp.StatusCode, want)
				}
			}
		}
	})
}

// waitUntil polls ok until it holds, for up to a minute.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// ejected reports whether the router with admin address admin has
// ejected the endpoint at url.
func ejected(t *testing.T, admin, url string) bool {
	t.Helper()
	resp, err := http.Get(admin + "/debug/endpoints")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eps []struct {
		ID      string `json:"id"`
		Ejected bool   `json:"ejected"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&eps); err != nil {
		t.Fatal(err)
	}
	for _, e := range eps {
		if e.ID == url {
			return e.Ejected
		}
	}
	t.Fatalf("%s not in /debug/endpoints: %+v", url, eps)
	return false
}

// TestDrainOnSIGTERM: on SIGTERM /readyz fails at once while new requests
// are still served for --drain-delay; then the listener closes (new
// connections are refused) while an open stream finishes; the process
// exits 0. Before the fix the listener closed in the same instant readiness
// flipped, so the failing /readyz was never seen (notes/proxy.md).
func TestDrainOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	fleet := newFleet(t, 2)
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if !strings.Contains(r.Header.Get("Content-Type"), "json") || r.Header.Get("X-Stream") == "" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"object":"chat.completion"}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"n\":0}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	fleet.handler.Store(&h)
	// A real process, so no clock to inject: the delay is long enough that
	// a busy machine's stalls of a few seconds fit in each half of it.
	const delay = 10 * time.Second
	r := startRouter(t, "--endpoints", fleet.urls(), "--drain-delay", delay.String(), "--drain-timeout", "20s")

	req, _ := http.NewRequest(http.MethodPost, r.URL+"/v1/chat/completions", strings.NewReader(`{"model":"llama","stream":true,"messages":[{"role":"user","content":"drain me"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Stream", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q", line)
	}

	signaled := time.Now()
	if err := r.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for {
		resp, err := client.Get(r.URL + "/readyz")
		if err != nil {
			t.Fatalf("/readyz during the drain delay: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if time.Since(signaled) > delay/2 {
			t.Fatalf("/readyz still %d %v after SIGTERM", resp.StatusCode, time.Since(signaled))
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp2, err := client.Post(r.URL+"/v1/chat/completions", "application/json", strings.NewReader(chat("a new request during the delay")))
	if err != nil {
		t.Fatalf("new request during the drain delay: %v", err)
	}
	io.Copy(io.Discard, resp2.Body)
	resp2.Body.Close()
	if resp2.StatusCode != 200 || time.Since(signaled) >= delay {
		t.Fatalf("new request during the delay: %d, %v after SIGTERM (delay %v)", resp2.StatusCode, time.Since(signaled), delay)
	}

	for {
		c, err := net.Dial("tcp", strings.TrimPrefix(r.URL, "http://"))
		if err != nil {
			break // refused: the listener is closed
		}
		c.Close()
		if time.Since(signaled) > delay+10*time.Second {
			t.Fatal("the listener still accepts long after the drain delay")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if closedAfter := time.Since(signaled); closedAfter < delay {
		t.Fatalf("listener closed %v after SIGTERM, before the %v delay", closedAfter, delay)
	}
	if exited, err := r.Exit(0); exited {
		t.Fatalf("exited with a stream open: %v", err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream cut during the drain: %q", rest)
	}
	exited, err := r.Exit(20 * time.Second)
	if !exited || err != nil {
		t.Fatalf("after the drain: exited %v, err %v", exited, err)
	}
}

// TestSIGHUPKeepsServing: SIGHUP re-reads --endpoints-file at once (here
// the file's interval is an hour) and neither kills the router nor cuts
// an open stream. Before, SIGHUP's default action killed the process.
func TestSIGHUPKeepsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	fleet := newFleet(t, 2)
	urls := strings.Split(fleet.urls(), ",")
	file := filepath.Join(t.TempDir(), "endpoints")
	if err := os.WriteFile(file, []byte(urls[0]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startRouter(t, "--endpoints-file", file, "--endpoints-file-interval", "1h")
	count := func() int {
		resp, err := http.Get(r.Admin + "/debug/ring")
		if err != nil {
			t.Fatalf("after SIGHUP: %v", err)
		}
		defer resp.Body.Close()
		var v struct{ Endpoints []json.RawMessage }
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return len(v.Endpoints)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d endpoints before the edit, want 1", n)
	}
	if err := os.WriteFile(file, []byte(strings.Join(urls, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); count() != 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the endpoints file was not re-read on SIGHUP")
		}
	}
}
