package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines and, with CHAOS_TABLE=1, prints
// every scenario's figures after all of them ran (a test for it could run
// before the scenarios, whatever its name).
func TestMain(m *testing.M) { goleak.VerifyTestMain(tableAfter{m}) }

type tableAfter struct{ m *testing.M }

func (t tableAfter) Run() int {
	code := t.m.Run()
	if os.Getenv("CHAOS_TABLE") != "" {
		table.mu.Lock()
		fmt.Println(strings.Join(table.rows, "\n"))
		table.mu.Unlock()
	}
	return code
}

var probeKeys = ProbeKeys(200)

// table collects each scenario's figures for CHAOS_TABLE=1.
var table struct {
	mu   sync.Mutex
	rows []string
}

func report(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf("%-22s ", t.Name()) + fmt.Sprintf(format, args...)
	t.Log(line)
	table.mu.Lock()
	table.rows = append(table.rows, line)
	table.mu.Unlock()
}

// scenario runs body inside a synctest bubble on a started cluster, and
// closes everything after.
func scenario(t *testing.T, cfg Config, body func(t *testing.T, c *Cluster)) {
	t.Parallel() // each scenario is a bubble of its own, in virtual time
	synctest.Test(t, func(t *testing.T) {
		c := New(cfg)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		body(t, c)
	})
}

// waitAgreement waits until the live replicas agree on at least 99% of
// the probe keys, and returns how long that took; limit 0 means the test
// fails only when agreement never comes within a minute.
func waitAgreement(t *testing.T, c *Cluster, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < cmpOr(limit, time.Minute) {
		if c.Agreement(probeKeys) >= 0.99 {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("agreement %.3f after %v", c.Agreement(probeKeys), time.Since(start))
	return 0
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// checkNoGhostLoad: with no request in flight, every live replica's own
// counters and its cluster-wide view read 0, within the staleness expiry.
func checkNoGhostLoad(t *testing.T, c *Cluster) time.Duration {
	t.Helper()
	start := time.Now()
	limit := 2 * c.cfg.Gossip.StaleAfter
	for {
		ghost := ""
		for _, r := range c.Live() {
			if n := r.Bal.Inflight().Total(); n != 0 {
				ghost += fmt.Sprintf(" %s holds %d leases;", r.Name, n)
			}
			if n := r.Node.Loads().Total(); n != 0 {
				ghost += fmt.Sprintf(" %s reads %d cluster-wide;", r.Name, n)
			}
		}
		if ghost == "" {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("load left after %v:%s", limit, ghost)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// steady runs the standard load for d in the background; wait returns the
// client when it is done.
func steady(c *Cluster, d time.Duration, streamEvery int) (wait func() *Client) {
	wait, _ = steadyStop(c, d, streamEvery)
	return wait
}

// steadyStop is steady whose load can also end early: stop(after) ends
// it after more of it (0: at once; never past d) and returns the client
// once its last requests are answered.
func steadyStop(c *Cluster, d time.Duration, streamEvery int) (wait func() *Client, stop func(after time.Duration) *Client) {
	return steadyN(c, d, streamEvery, 12, 200*time.Millisecond)
}

// heavy is a load at which the bound matters: 16 clients, 30 ms think
// (about 4 requests in flight per engine, at the bound's floor).
func heavy(c *Cluster, d time.Duration) (wait func() *Client) {
	wait, _ = steadyN(c, d, 0, 16, 30*time.Millisecond)
	return wait
}

// steadyN runs clients conversing with think time between turns, for at
// most d; wait and stop are steadyStop's.
func steadyN(c *Cluster, d time.Duration, streamEvery, clients int, think time.Duration) (wait func() *Client, stop func(after time.Duration) *Client) {
	return loadFor(c.NewClient(), d, func(ctx context.Context, cl *Client) {
		cl.Steady(ctx, clients, 6, 4, streamEvery, think)
	})
}

// loadFor runs load on cl in the background for at most d; wait and stop
// are steadyStop's.
func loadFor(cl *Client, d time.Duration, load func(ctx context.Context, cl *Client)) (wait func() *Client, stop func(after time.Duration) *Client) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	done := make(chan struct{})
	go func() {
		load(ctx, cl)
		close(done)
	}()
	stop = func(after time.Duration) *Client {
		end := time.AfterFunc(after, cancel)
		<-done
		end.Stop()
		cancel()
		cl.Close()
		return cl
	}
	return func() *Client { return stop(d) }, stop
}

// No faults: every request answered by its own engine, conversations
// mostly keep their engine, nothing left in flight, the replicas agree.
func TestBaseline(t *testing.T) {
	scenario(t, DefaultConfig(), func(t *testing.T, c *Cluster) {
		waitAgreement(t, c, time.Second)
		cl := steady(c, 10*time.Second, 5)()
		tally := Count(cl.Outcomes())
		if tally.OK != tally.Requests || tally.Requests < 100 {
			t.Fatalf("baseline: %v", tally)
		}
		// Conversations mostly keep their engine: three runs kept 0.73–0.79 of the
		// later turns on their conversation's first engine (a turn's key
		// is not always its first turn's), and with keys ignored (every
		// request placed as an unkeyed one) 0.25, chance over 4 engines.
		kept := stickiness(cl.Outcomes())
		if kept < 0.5 {
			t.Fatalf("only %.2f of later turns went to their conversation's first engine", kept)
		}
		settle := checkNoGhostLoad(t, c)
		report(t, "%v; %.2f of later turns on their conversation's first engine; loads 0 after %v", tally, kept, settle)
	})
}

// stickiness is the share of conversations' later turns that went to the
// engine their first turn went to.
func stickiness(outs []Outcome) float64 {
	first := map[string]string{}
	later, kept := 0, 0
	for _, o := range outs {
		ep, seen := first[o.Key]
		if !seen {
			first[o.Key] = o.Endpoint
			continue
		}
		later++
		if o.Endpoint == ep {
			kept++
		}
	}
	return float64(kept) / float64(max(later, 1))
}
