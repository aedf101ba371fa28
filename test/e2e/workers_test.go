package e2e

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prefixring/prefixring/internal/e2eproc"
	"github.com/prefixring/prefixring/internal/e2etest"
)

// logBook keeps every stderr line of the processes it is handed.
type logBook struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBook) add(name string) func(string) {
	return func(line string) {
		b.mu.Lock()
		b.lines = append(b.lines, name+": "+line)
		b.mu.Unlock()
	}
}

func (b *logBook) text() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

func startLogged(t *testing.T, logs *logBook, name string, args ...string) *proc {
	t.Helper()
	args = append([]string{"--health-interval", "200ms", "--node-name", name, "--log-level", "debug", "--drain-delay", "0s"}, args...)
	p, err := e2eproc.LaunchServe(e2etest.Binary(t), name, logs.add(name), args...)
	if p != nil {
		t.Cleanup(func() {
			_ = p.Cmd.Process.Kill()
			p.Exit(time.Minute)
		})
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, logs.text())
	}
	return &proc{Proc: p, name: name}
}

// workersCall makes one of dstack's calls and decodes the JSON answer.
func workersCall(t *testing.T, method, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode, out
}

// workerURLs lists GET /workers' urls and ids, as dstack reads them.
func workerURLs(t *testing.T, base, token string) (urls, ids []string) {
	code, body := workersCall(t, "GET", base+"/workers", token, "")
	if code != 200 {
		t.Fatalf("GET %s/workers: %d %v", base, code, body)
	}
	for _, w := range body["workers"].([]any) {
		m := w.(map[string]any)
		urls = append(urls, m["url"].(string))
		ids = append(ids, m["id"].(string))
	}
	return urls, ids
}

func routed(t *testing.T, p *proc) int {
	resp, err := http.Get(p.Admin + "/debug/ring")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct{ Endpoints []json.RawMessage }
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return len(v.Endpoints)
}

// Two gossiping replicas: r0 serves the workers API on its public port
// (dstack's router replica group), r1 on its admin port; both also read an
// endpoints file. dstack's calls through either reach both, a restarted
// replica (a new process, an empty set) gets the registered workers back
// from its peer, and the token
// never shows in a log line.
func TestWorkersAPIReplicatedMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	up := newUpstreams(t, 3)
	const token = "tok-7f3a9c1e5b2d4f60"
	dir := t.TempDir()
	file, tokenFile := filepath.Join(dir, "endpoints"), filepath.Join(dir, "token")
	writeFile := func(path, s string) {
		if err := os.WriteFile(path+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil { // as config tools write
			t.Fatal(err)
		}
	}
	writeFile(file, "# the fleet\n"+up.urls[0]+"\n")
	writeFile(tokenFile, token+"\n")
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	common := []string{"--endpoints-file", file, "--endpoints-file-interval", "200ms", "--gossip-key", key,
		"--gossip-interval", "50ms", "--gossip-bind", "127.0.0.1:0", "--routing-headers"}
	logs := &logBook{}
	r0 := startLogged(t, logs, "r0", append(common, "--workers-api", "public", "--admin-token", token)...)
	seed := r0.selfAddr(t)
	r1args := append(common, "--workers-api", "admin", "--admin-token-file", tokenFile, "--join", seed)
	r1 := startLogged(t, logs, "r1", r1args...)
	waitFor(t, "2 members", 10*time.Second, func() bool { return len(r1.cluster(t).Members) == 2 })

	// Unauthenticated calls are refused, on both listeners.
	for _, base := range []string{r0.URL, r0.Admin, r1.Admin} {
		if code, _ := workersCall(t, "GET", base+"/workers", "", ""); code != http.StatusUnauthorized {
			t.Fatalf("GET %s/workers without the token: %d", base, code)
		}
	}
	if code, _ := workersCall(t, "GET", r1.URL+"/workers", token, ""); code == http.StatusOK {
		t.Fatal("r1's public port serves /workers though --workers-api admin")
	}

	// dstack's add, through r0's service port: both replicas route it.
	if urls, _ := workerURLs(t, r0.URL, token); len(urls) != 0 {
		t.Fatalf("workers before any registration: %v", urls)
	}
	code, body := workersCall(t, "POST", r0.URL+"/workers", token, `{"url":"`+up.urls[1]+`/","worker_type":"regular"}`)
	if code != http.StatusAccepted || body["status"] != "accepted" {
		t.Fatalf("POST: %d %v", code, body)
	}
	waitFor(t, "r1 to list the worker and both to route 2 endpoints", 5*time.Second, func() bool {
		urls, _ := workerURLs(t, r1.Admin, token)
		return slices.Equal(urls, []string{up.urls[1]}) && routed(t, r0) == 2 && routed(t, r1) == 2
	})

	// The file changes: both route its new endpoint beside the worker.
	writeFile(file, up.urls[0]+"\n"+up.urls[2]+" # added\n")
	waitFor(t, "both to route 3 endpoints", 5*time.Second, func() bool { return routed(t, r0) == 3 && routed(t, r1) == 3 })

	// dstack's remove, by the id GET handed out, through r1.
	_, ids := workerURLs(t, r1.Admin, token)
	if code, body := workersCall(t, "DELETE", r1.Admin+"/workers/"+ids[0], token, ""); code != http.StatusAccepted || body["status"] != "accepted" {
		t.Fatalf("DELETE: %d %v", code, body)
	}
	waitFor(t, "r0 to drop the worker", 5*time.Second, func() bool {
		urls, _ := workerURLs(t, r0.URL, token)
		return len(urls) == 0 && routed(t, r0) == 2
	})

	// Registered again; r1 dies and restarts empty: its peer resends the set.
	workersCall(t, "POST", r0.URL+"/workers", token, `{"url":"`+up.urls[1]+`","worker_type":"regular"}`)
	waitFor(t, "r1 to list the worker", 5*time.Second, func() bool { u, _ := workerURLs(t, r1.Admin, token); return len(u) == 1 })
	_ = r1.Cmd.Process.Kill()
	r1.Exit(time.Minute)
	// A new pod of the Deployment: a new name (the old one stays a
	// member until memberlist declares it dead, and a name is refused
	// while its holder lives).
	r1 = startLogged(t, logs, "r1b", r1args...)
	waitFor(t, "the restarted r1 to list the worker again", 10*time.Second, func() bool {
		urls, _ := workerURLs(t, r1.Admin, token)
		return slices.Equal(urls, []string{up.urls[1]})
	})

	if text := logs.text(); strings.Contains(text, token) {
		t.Fatalf("the admin token appears in the logs:\n%s", text)
	} else if !strings.Contains(text, "registered workers changed") {
		t.Fatalf("the logs were not captured:\n%s", text)
	}
}
