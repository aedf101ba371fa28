package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// viewsAgree reports whether every replica reads the same cluster-wide
// loads, and that they add up to want requests.
func viewsAgree(t *testing.T, reps []*proc, want int64) bool {
	var first string
	for i, r := range reps {
		v := r.cluster(t)
		var total int64
		for _, n := range v.Loads {
			total += n
		}
		s := fmt.Sprint(v.Loads)
		if total != want || (i > 0 && s != first) {
			return false
		}
		first = s
	}
	return true
}

// TestGossipConvergenceMultiProcess measures, with real processes and the
// default intervals (publish 100 ms, push/pull 5 s, stale after 5 s), how
// long the replicas' views take to agree again after a replica joins and
// after one is killed (SIGKILL: no leave message). Goal: <= 2 push/pull
// intervals (10 s).
func TestGossipConvergenceMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	up := newUpstreams(t, 4)
	// Loads in requests, so the views' totals count the held requests.
	common := []string{"--endpoints", strings.Join(up.urls, ","), "--gossip-key", testKey, "--gossip-bind", "127.0.0.1:0", "--load-signal", "requests"}
	r0 := startServe(t, "c0", common...)
	seed := r0.selfAddr(t)
	r1 := startServe(t, "c1", append(common, "--join", seed)...)
	waitFor(t, "2 members", 10*time.Second, func() bool { return len(r0.cluster(t).Members) == 2 })

	// r1 holds 3 requests, r0 holds 2, for long enough to measure.
	up.delay.Store(int64(20 * time.Second))
	defer up.delay.Store(0)
	for i := range 5 {
		go post(r0, r1, i)
	}
	waitFor(t, "5 held requests in both views", 10*time.Second, func() bool { return viewsAgree(t, []*proc{r0, r1}, 5) })

	// A third replica joins: how long until its view matches?
	start := time.Now()
	r2 := startServe(t, "c2", append(common, "--join", seed)...)
	reps := []*proc{r0, r1, r2}
	waitFor(t, "the joiner's view to agree", 10*time.Second, func() bool { return viewsAgree(t, reps, 5) })
	t.Logf("join: views agree %v after the joiner started (process start included)", time.Since(start).Round(10*time.Millisecond))

	// r1 dies without a word: its 3 requests must leave every view.
	_ = r1.Cmd.Process.Signal(syscall.SIGKILL)
	start = time.Now()
	waitFor(t, "the dead replica's counts to expire everywhere", 10*time.Second, func() bool {
		return viewsAgree(t, []*proc{r0, r2}, 2)
	})
	t.Logf("crash: views agree without the dead replica's counts %v after SIGKILL", time.Since(start).Round(10*time.Millisecond))
}

// post sends the i-th distinct prompt through r1 for even i and r0 for odd
// i (3 and 2 of 5), and ignores the outcome: a killed replica drops its
// requests.
func post(r0, r1 *proc, i int) {
	via := r1
	if i%2 == 1 {
		via = r0
	}
	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"held question %d"}]}`, i)
	resp, err := httpPost(via.URL+"/v1/chat/completions", body)
	if err == nil {
		resp.Body.Close()
	}
}

func httpPost(url, body string) (*http.Response, error) {
	return http.Post(url, "application/json", strings.NewReader(body))
}
