package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestVerdictNeverAddsAnEndpoint runs three replicas whose --endpoints
// differ, as during a DNS lag or a rolling config change: r1 lacks the
// fourth upstream, which the majority lists. The cluster's verdict may take
// endpoints out of a replica's set but never put one in that its own
// discovery did not name (a peer holding the key cannot point it at a
// server of its own), so r1 never routes to the fourth while r0 does.
// Before, r1 routed to it on the verdict alone.
func TestVerdictNeverAddsAnEndpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	up := newUpstreams(t, 4)
	all, lagging := strings.Join(up.urls, ","), strings.Join(up.urls[:3], ",")
	common := []string{"--gossip-key", testKey, "--gossip-interval", "50ms", "--gossip-bind", "127.0.0.1:0"}
	r0 := startServe(t, "r0", append(common, "--endpoints", all)...)
	seed := r0.selfAddr(t)
	r2 := startServe(t, "r2", append(common, "--endpoints", all, "--join", seed)...)
	r1 := startServe(t, "r1", append(common, "--endpoints", lagging, "--join", seed)...)
	for _, r := range []*proc{r0, r1, r2} {
		waitFor(t, r.name+" to see 3 members", 10*time.Second, func() bool { return len(r.cluster(t).Members) == 3 })
	}
	fourth := strings.TrimPrefix(up.urls[3], "http://")
	seen := map[string]map[string]int{}
	for _, r := range []*proc{r0, r1} { // r2 only votes with r0
		seen[r.name] = map[string]int{}
		for i := range 200 {
			ep, _ := sendBody(t, r, fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"skew %d"}]}`, i))
			seen[r.name][ep]++
		}
	}
	if seen["r0"][fourth] == 0 {
		t.Fatalf("r0 never routed to %s, which it discovered: %v", fourth, seen["r0"])
	}
	if seen["r1"][fourth] != 0 {
		t.Fatalf("r1 routed %d requests to %s, which only the verdict names: %v", seen["r1"][fourth], fourth, seen["r1"])
	}
}
