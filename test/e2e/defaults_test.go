package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// completion is turn k of conversation c sent as one growing completions
// prompt behind a shared system prompt of about 900 characters.
func completion(c, k int) string {
	var p strings.Builder
	p.WriteString(strings.Repeat("You are the support assistant of ACME Corp. ", 20))
	for i := 0; i <= k; i++ {
		fmt.Fprintf(&p, "\n\nUser: conversation %d asks question %d %s\n\nAssistant:", c, i, strings.Repeat("about the order ", 20))
		if i < k {
			p.WriteString(strings.Repeat(" an answer", 40))
		}
	}
	return fmt.Sprintf(`{"model":"m","prompt":%q}`, p.String())
}

func sendCompletion(t *testing.T, p *proc, body string) string {
	t.Helper()
	resp, err := http.Post(p.URL+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d", p.name, resp.StatusCode)
	}
	return resp.Header.Get("X-Prefixring-Endpoint")
}

var sharedPrefixes = regexp.MustCompile(`(?m)^prefixring_gossip_sketch_common_prefixes (\S+)$`)

// common reads how many shared prefixes the replica's keys skip now.
func (p *proc) common(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(p.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := sharedPrefixes.FindSubmatch(b)
	if m == nil {
		return -1
	}
	n, _ := strconv.ParseFloat(string(m[1]), 64)
	return int(n)
}

// TestDefaultsMultiProcess runs three replicas with every default (load
// in prefill tokens, the overlay view, the gossiped shared-prefix sketch):
// conversations sent as growing completions prompts behind one system
// prompt reach the replicas in turn; once the replicas' sketches have
// seen the system prompt continued by a few conversations (and gossiped
// it), every turn of a conversation, through whichever replica, goes to
// the conversation's one endpoint, and two conversations are not all on
// one endpoint.
func TestDefaultsMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	up := newUpstreams(t, 8)
	common := []string{"--endpoints", strings.Join(up.urls, ","), "--gossip-key", testKey, "--gossip-interval", "50ms", "--sketch-interval", "100ms"}
	r0 := startServe(t, "d0", append(common, "--gossip-bind", "127.0.0.1:0")...)
	seed := r0.selfAddr(t)
	reps := []*proc{r0}
	for _, name := range []string{"d1", "d2"} {
		reps = append(reps, startServe(t, name, append(common, "--gossip-bind", "127.0.0.1:0", "--join", seed)...))
	}
	for _, r := range reps {
		waitFor(t, r.name+" to see 3 members", 10*time.Second, func() bool { return len(r.cluster(t).Members) == 3 })
	}
	// Without the table, every conversation keys on the system prompt's
	// first chunk: one endpoint for all. Three conversations continue the
	// system prompt three ways, one fewer than the default --sketch-fanout
	// (4), so no replica can learn the table while they are sent: with
	// six, a slow machine let the sketch publish between the fourth and
	// the sixth, and the last ones went elsewhere. Over 8 endpoints, three
	// conversations keyed past the system prompt would all meet on one
	// with odds 1 in 64.
	before := map[string]bool{}
	for c := range 3 {
		for k := range 2 {
			before[sendCompletion(t, reps[(c+k)%3], completion(c, k))] = true
		}
	}
	if len(before) != 1 {
		t.Fatalf("before the sketch: %d endpoints, want the system prompt's one", len(before))
	}
	for _, r := range reps {
		if n := r.common(t); n != 0 {
			t.Fatalf("%s learned %d shared prefixes from three continuations; the default fanout is 4", r.name, n)
		}
	}
	// Three more conversations make six continuations: enough to learn.
	for c := 3; c < 6; c++ {
		sendCompletion(t, reps[c%3], completion(c, 0))
	}
	for _, r := range reps {
		waitFor(t, r.name+" to learn the shared system prompt", 10*time.Second, func() bool { return r.common(t) >= 1 })
	}
	homes := map[string]bool{}
	for c := 100; c < 112; c++ {
		first := sendCompletion(t, reps[c%3], completion(c, 0))
		homes[first] = true
		for k := 1; k < 5; k++ {
			if got := sendCompletion(t, reps[(c+k)%3], completion(c, k)); got != first {
				t.Fatalf("conversation %d turn %d went to %s through %s; its first turn to %s", c, k, got, reps[(c+k)%3].name, first)
			}
		}
	}
	if len(homes) < 2 {
		t.Fatalf("12 conversations on %d endpoint(s): the key did not reach past the shared system prompt", len(homes))
	}
}
