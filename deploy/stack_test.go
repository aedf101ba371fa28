package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// proc is a prefixring process started by a test, stopped by its cleanup.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs the built binary with args and waits for a log line matching
// each of wants, returning each one's first submatch.
func start(t *testing.T, name string, wants []*regexp.Regexp, args ...string) []string {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	found := make(chan [2]string, 16)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			for i, re := range wants {
				if m := re.FindStringSubmatch(sc.Text()); m != nil {
					found <- [2]string{fmt.Sprint(i), m[1]}
				}
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	out := make([]string, len(wants))
	timeout := time.After(30 * time.Second)
	for n := 0; n < len(wants); {
		select {
		case f := <-found:
			var i int
			fmt.Sscan(f[0], &i)
			if out[i] == "" {
				out[i] = f[1]
				n++
			}
		case <-p.done:
			t.Fatalf("%s exited before it logged %v", name, wants)
		case <-timeout:
			t.Fatalf("%s did not log %v within 30 s", name, wants)
		}
	}
	return out
}

var (
	simListenRe = regexp.MustCompile(`simulated vLLM server listening.* addr=(\S+)`)
	servingRe   = regexp.MustCompile(`msg=serving listen=(\S+)`)
	adminRe     = regexp.MustCompile(`msg=admin listen=(\S+)`)
)

// router starts `prefixring serve` on loopback; it returns the API's and
// the admin listener's URLs.
func router(t *testing.T, name string, args ...string) (api, admin string) {
	t.Helper()
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--gossip-bind", "127.0.0.1:0", "--gossip-key", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "--node-name", name, "--drain-delay", "0s", "--drain-timeout", "1s"}, args...)
	a := start(t, name, []*regexp.Regexp{servingRe, adminRe}, args...)
	return "http://" + a[0], "http://" + a[1]
}

// scrape is the series names and label names of one or more /metrics.
type scrape struct {
	router, engine             map[string]bool // series names
	routerLabels, engineLabels map[string]bool
}

var (
	stackOnce sync.Once
	stack     scrape
	stackErr  string
)

// seriesRe reads a series line of Prometheus' text format.
var seriesRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
var labelNameRe = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// parseScrape adds text's series and label names to names and labels.
func parseScrape(text string, names, labels map[string]bool) {
	for _, line := range strings.Split(text, "\n") {
		m := seriesRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		names[m[1]] = true
		for _, l := range labelNameRe.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = true
		}
	}
}

func scrapeOf(t *testing.T, urls ...string) (map[string]bool, map[string]bool) {
	names, labels := map[string]bool{}, map[string]bool{}
	for _, u := range urls {
		parseScrape(get(t, u+"/metrics"), names, labels)
	}
	return names, labels
}

// waitFor polls ok every 50 ms for up to limit.
func waitFor(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
	}
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func put(t *testing.T, url, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: %d", url, resp.StatusCode)
	}
}

// deadEndpoint is a loopback address nothing listens on.
func deadEndpoint(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func chat(content string, stream bool) string {
	b, _ := json.Marshal(map[string]any{
		"model": "m", "max_tokens": 4, "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": content}},
	})
	return string(b)
}

// scrapeStack runs, once per test binary, a simulated vLLM server and two
// gossiping routers on loopback, drives them until every family of series
// the dashboard reads exists, and scrapes them. Router a ejects a dead
// endpoint at its first probe (ejections); router b never does, so some
// of its requests fail there and are retried (retries); a stream the
// server cuts is b's (stream errors); the two join (members, state age).
func scrapeStack(t *testing.T) scrape {
	t.Helper()
	stackOnce.Do(func() {
		// A failure inside Do must fail the callers that come later too.
		stackErr = "the stack failed to start in an earlier test"
		defer func() {
			if !t.Failed() {
				stackErr = ""
			}
		}()
		buildStack(t)
	})
	if stackErr != "" {
		t.Fatal(stackErr)
	}
	return stack
}

func buildStack(t *testing.T) {
	sim := start(t, "sim", []*regexp.Regexp{simListenRe}, "sim", "--listen", "127.0.0.1:0", "--model", "m")[0]
	dead := deadEndpoint(t)
	endpoints := sim + "," + dead
	apiA, adminA := router(t, "a", "--endpoints", endpoints, "--failure-threshold", "1", "--health-interval", "200ms")
	var self struct{ Members []struct{ Name, Addr string } }
	if err := json.Unmarshal([]byte(get(t, adminA+"/debug/cluster")), &self); err != nil || len(self.Members) != 1 {
		t.Fatalf("router a's /debug/cluster: %v %+v", err, self)
	}
	apiB, adminB := router(t, "b", "--endpoints", endpoints, "--failure-threshold", "1000", "--health-interval", "1h",
		"--join", self.Members[0].Addr)

	has := func(admin, name string) bool {
		n, _ := scrapeOf(t, admin)
		return n[name]
	}
	waitFor(t, "router a to eject the dead endpoint", 10*time.Second, func() bool { return has(adminA, "prefixring_ejections_total") })
	waitFor(t, "the routers to see each other's state", 10*time.Second, func() bool {
		return has(adminA, "prefixring_gossip_peer_state_age_seconds") && has(adminB, "prefixring_gossip_peer_state_age_seconds")
	})
	if code, body := post(t, apiA+"/v1/chat/completions", chat("hello", false)); code != http.StatusOK {
		t.Fatalf("request through router a: %d %s", code, body)
	}
	// Keys spread over both endpoints: about one in two starts at the dead one.
	for i := 0; !has(adminB, "prefixring_retries_total"); i++ {
		if i == 64 {
			t.Fatal("64 requests through router b, none retried")
		}
		if code, body := post(t, apiB+"/v1/chat/completions", chat(fmt.Sprint("question ", i), false)); code != http.StatusOK {
			t.Fatalf("request %d through router b: %d %s", i, code, body)
		}
	}
	put(t, sim+"/admin/faults", `{"close_rate":1,"close_after_tokens":1}`)
	_, body := post(t, apiB+"/v1/chat/completions", chat("a cut stream", true))
	put(t, sim+"/admin/faults", `{}`)
	if !strings.Contains(body, "stream_interrupted") {
		t.Fatalf("the cut stream ended without the router's error event:\n%s", body)
	}
	stack.router, stack.routerLabels = scrapeOf(t, adminA, adminB)
	stack.engine, stack.engineLabels = scrapeOf(t, sim)
}
