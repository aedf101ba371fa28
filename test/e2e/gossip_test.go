// Package e2e runs built prefixring binaries as separate processes on
// 127.0.0.1.
package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prefixring/prefixring/internal/e2eproc"
	"github.com/prefixring/prefixring/internal/e2etest"
)

// proc is a replica: a running `prefixring serve` with its node name.
type proc struct {
	*e2eproc.Proc
	name string
}

// startServe runs a replica and waits for it to listen.
func startServe(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	// No drain delay: a replica leaves the cluster once it has drained,
	// and these tests watch the leave, not the drain.
	// --routing-headers-address: the tests match X-Prefixring-Endpoint to
	// their upstreams' host:port.
	args = append([]string{"--health-interval", "200ms", "--node-name", name, "--log-level", "info", "--drain-delay", "0s",
		"--routing-headers-address"}, args...)
	return &proc{Proc: e2etest.Serve(t, name, args...), name: name}
}

// clusterView is the part of /debug/cluster the test reads.
type clusterView struct {
	Members  []struct{ Name, Addr string } `json:"members"`
	Loads    map[string]int64              `json:"loads"`
	Isolated bool                          `json:"isolated"`
}

func (p *proc) cluster(t *testing.T) clusterView {
	t.Helper()
	resp, err := http.Get(p.Admin + "/debug/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v clusterView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (p *proc) selfAddr(t *testing.T) string {
	for _, m := range p.cluster(t).Members {
		if m.Name == p.name {
			return m.Addr
		}
	}
	t.Fatalf("%s not among its own members", p.name)
	return ""
}

func waitFor(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out after %v waiting for %s", limit, what)
}

// upstreams are n HTTP servers that hold each request for the current delay.
type upstreams struct {
	urls  []string
	delay atomic.Int64
}

func newUpstreams(t *testing.T, n int) *upstreams {
	u := &upstreams{}
	for i := range n {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if r.URL.Path != "/health" {
				// Held while the delay lasts (re-read, so lowering it
				// releases held requests), unless the router hangs up.
				for start := time.Now(); time.Since(start) < time.Duration(u.delay.Load()); {
					select {
					case <-time.After(5 * time.Millisecond):
					case <-r.Context().Done():
						return
					}
				}
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"object":"chat.completion","upstream":%d}`, i)
		}))
		t.Cleanup(s.Close)
		u.urls = append(u.urls, s.URL)
	}
	return u
}

const prompt = `{"model":"m","messages":[{"role":"system","content":"You are the support assistant of ACME Corp. Answer briefly."},{"role":"user","content":"same question"}]}`

// send posts the shared prompt and returns the endpoint and decision.
func send(t *testing.T, p *proc) (string, string) { return sendBody(t, p, prompt) }

// sendBody posts a chat body and returns the endpoint and decision.
func sendBody(t *testing.T, p *proc, body string) (string, string) {
	resp, err := http.Post(p.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return "", ""
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("%s: status %d", p.name, resp.StatusCode)
	}
	return resp.Header.Get("X-Prefixring-Endpoint"), resp.Header.Get("X-Prefixring-Decision")
}

// spillSequence sends 10 requests of the hot prompt to replicas in turn,
// each once every replica in reps counts the ones before it, and returns
// where each went. The upstreams hold them all until the last is placed:
// each pick sees every earlier one, on a machine of any speed (a fixed
// 250 ms between sends and a 4 s hold raced the gossip on a busy one).
func spillSequence(t *testing.T, up *upstreams, reps []*proc) []string {
	up.delay.Store(int64(time.Hour))
	var wg sync.WaitGroup
	out := make([]string, 10)
	for i := range out {
		waitFor(t, fmt.Sprintf("every replica to count %d held requests", i), time.Minute, func() bool { return viewsAgree(t, reps, int64(i)) })
		wg.Go(func() {
			ep, d := send(t, reps[i%len(reps)])
			out[i] = ep + " " + d
		})
	}
	waitFor(t, "every replica to count 10 held requests", time.Minute, func() bool { return viewsAgree(t, reps, 10) })
	up.delay.Store(0) // releases the held requests
	wg.Wait()
	return out
}

func TestGossipMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	up := newUpstreams(t, 4)
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	// --min-bound 4 (the default, named because the test depends on it):
	// sequential requests must stay home. With the textbook bound alone (1
	// slot at 1 in flight over 4 endpoints) a replica that reads another's
	// count of 1 still published from the previous, finished request would
	// spill: a ghost load of up to one interval, from each of the three
	// replicas when their publications run late on a busy machine (a floor
	// of 2 flaked here that way).
	// In request units and the shared view: this test is about the
	// replicas' agreement on CHWBL's own decisions, which the shared view
	// makes exact (TestDefaultsMultiProcess covers the defaults).
	common := []string{"--endpoints", strings.Join(up.urls, ","), "--gossip-key", key, "--gossip-interval", "50ms", "--min-bound", "4",
		"--load-signal", "requests", "--gossip-view", "shared"}
	r0 := startServe(t, "r0", append(common, "--gossip-bind", "127.0.0.1:0")...)
	seed := r0.selfAddr(t)
	reps := []*proc{r0}
	for _, name := range []string{"r1", "r2"} {
		reps = append(reps, startServe(t, name, append(common, "--gossip-bind", "127.0.0.1:0", "--join", seed)...))
	}
	for _, r := range reps {
		waitFor(t, r.name+" to see 3 members", 10*time.Second, func() bool { return len(r.cluster(t).Members) == 3 })
	}

	// One prefix, each replica in turn: one endpoint.
	first, _ := send(t, r0)
	for i := range 9 {
		if ep, _ := send(t, reps[i%3]); ep != first {
			t.Fatalf("request %d via %s went to %s, first went to %s", i, reps[i%3].name, ep, first)
		}
	}

	// A hot prefix spills the same way whichever replica receives it: the
	// sequence through all three equals the sequence through r0 alone.
	alone := spillSequence(t, up, reps[:1])
	waitFor(t, "loads to drain", 10*time.Second, func() bool { return len(r0.cluster(t).Loads) == 0 })
	spread := spillSequence(t, up, reps)
	t.Logf("through r0: %v\nround-robin: %v", alone, spread)
	if fmt.Sprint(alone) != fmt.Sprint(spread) {
		t.Fatalf("hot prefix spilled differently:\nthrough r0:  %v\nround-robin: %v", alone, spread)
	}
	if !strings.Contains(fmt.Sprint(spread), "spill") {
		t.Fatalf("10 held requests on one prefix never spilled: %v", spread)
	}
	waitFor(t, "loads to drain", 10*time.Second, func() bool { return len(r0.cluster(t).Loads) == 0 })

	// A replica with the wrong key is refused and changes nothing.
	wrong := base64.StdEncoding.EncodeToString([]byte("fedcba9876543210fedcba9876543210"))
	intruder := startServe(t, "r3", "--endpoints", strings.Join(up.urls, ","), "--gossip-key", wrong,
		"--gossip-bind", "127.0.0.1:0", "--join", seed)
	up.delay.Store(int64(3 * time.Second))
	var held sync.WaitGroup
	for range 2 {
		held.Go(func() { send(t, intruder) })
	}
	time.Sleep(time.Second)
	if n := len(intruder.cluster(t).Members); n != 1 {
		t.Fatalf("wrong-key replica sees %d members", n)
	}
	// The island says so: /debug/cluster, and /readyz stays ready (it still
	// answers every request) with the reason in its body.
	waitFor(t, "the wrong-key replica to report itself isolated", 15*time.Second, func() bool { return intruder.cluster(t).Isolated })
	if resp, err := http.Get(intruder.URL + "/readyz"); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "gossip isolated") {
			t.Fatalf("island /readyz: %d %s", resp.StatusCode, b)
		}
	}
	for _, r := range reps {
		v := r.cluster(t)
		if len(v.Members) != 3 || len(v.Loads) != 0 {
			t.Fatalf("%s after the wrong-key replica: %d members, loads %v", r.name, len(v.Members), v.Loads)
		}
	}
	held.Wait()
	up.delay.Store(0)

	// A clean shutdown leaves the cluster at once.
	_ = reps[2].Cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "r0 to drop r2 after its leave", 3*time.Second, func() bool { return len(r0.cluster(t).Members) == 2 })
}

// testKey is the gossip key of the tests' clusters (gossip refuses to run
// without one).
var testKey = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
