package e2e

import (
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMismatchedEndpointListsKeepEveryLeaseCounted runs three replicas
// whose --endpoints differ, as during a DNS lag or a rolling config change:
// r1 lacks the fourth upstream, which the majority lists, so r1 routes to
// it on the cluster's verdict without having discovered it. r1's leases
// there must count in every replica's bound (gossiping leases only for
// discovered endpoints would lose them: 5 leases held, the bound read 0).
func TestMismatchedEndpointListsKeepEveryLeaseCounted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	up := newUpstreams(t, 4)
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	all, lagging := strings.Join(up.urls, ","), strings.Join(up.urls[:3], ",")
	// --min-bound 10: r1 reads its own leases as last published, so how
	// many of the five held requests the bound would spill depends on how
	// they straddle a publication; with room for ten none spill.
	common := []string{"--gossip-key", key, "--gossip-interval", "50ms", "--gossip-bind", "127.0.0.1:0", "--min-bound", "10"}
	r0 := startServe(t, "r0", append(common, "--endpoints", all)...)
	seed := r0.selfAddr(t)
	r2 := startServe(t, "r2", append(common, "--endpoints", all, "--join", seed)...)
	r1 := startServe(t, "r1", append(common, "--endpoints", lagging, "--join", seed)...)
	for _, r := range []*proc{r0, r1, r2} {
		waitFor(t, r.name+" to see 3 members", 10*time.Second, func() bool { return len(r.cluster(t).Members) == 3 })
	}
	fourth := strings.TrimPrefix(up.urls[3], "http://")
	// Find 5 prompts r1 sends to the fourth upstream, then hold them there.
	var prompts []string
	for i := 0; len(prompts) < 5 && i < 400; i++ {
		p := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"skew %d"}]}`, i)
		if ep, _ := sendBody(t, r1, p); ep == fourth {
			prompts = append(prompts, p)
		}
	}
	if len(prompts) < 5 {
		t.Fatalf("r1 never routes to %s, which the majority lists", fourth)
	}
	up.delay.Store(int64(time.Minute)) // released below
	var held sync.WaitGroup
	for _, p := range prompts {
		held.Go(func() { sendBody(t, r1, p) })
	}
	waitFor(t, "r0 to count r1's leases on the fourth upstream", 10*time.Second, func() bool {
		return r0.cluster(t).Loads[up.urls[3]] >= 5
	})
	up.delay.Store(0)
	held.Wait()
}
