package chaos

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prefixring/prefixring/gossip/core"
	"github.com/prefixring/prefixring/ring"
)

func window(outs []Outcome, from, to time.Time) []Outcome {
	var w []Outcome
	for _, o := range outs {
		if !o.Start.Before(from) && o.Start.Before(to) {
			w = append(w, o)
		}
	}
	return w
}

// Scenario 3: the gossip links split 2|1 for 15 s, then heal. Both sides
// keep serving every request; the hit rate's dip and the bound's overshoot
// during the split are measured. The split must take (15 s in, each side
// counts only its own side's entries: three times the staleness expiry,
// and past memberlist's suspicion, so each side holds the other dead, as
// after 30 s until stop 44), and within two push/pull intervals of the
// heal every replica counts every other's entry again and the replicas
// agree.
func TestGossipPartition(t *testing.T) {
	scenario(t, requestsSignal(DefaultConfig()), func(t *testing.T, c *Cluster) {
		wait := heavy(c, 30*time.Second)
		var baseExcess []int64
		stopBase := Sample(100*time.Millisecond, func() { baseExcess = append(baseExcess, c.Excess(c.cfg.Engines)) })
		time.Sleep(4 * time.Second)
		stopBase()
		split := time.Now()
		c.Gossip.Partition([]string{gossipAddr(0), gossipAddr(1)}, []string{gossipAddr(2)})
		var excess []int64
		stopSampling := Sample(100*time.Millisecond, func() { excess = append(excess, c.Excess(c.cfg.Engines)) })
		time.Sleep(15 * time.Second)
		stopSampling()
		// The split took: each side's views count the other side's
		// entries no longer (they went stale), only their own side's.
		for i, r := range c.Live() {
			for j, peer := range c.Live() {
				same := (i == 2) == (j == 2)
				if i != j && countsEntry(r, peer.Name) != same {
					t.Fatalf("15 s into the split, %s counts %s's entry: %v", r.Name, peer.Name, !same)
				}
			}
		}
		healed := time.Now()
		c.Gossip.Heal()
		// The views join again: every replica counts every other's entry
		// (agreement alone would not show it: the ring's homes agree
		// whatever the loads read while no key is at the bound).
		joined := waitViewsJoined(t, c, 2*c.cfg.Gossip.PushPull)
		recovered := waitAgreement(t, c, 2*c.cfg.Gossip.PushPull)
		cl := wait()
		outs := cl.Outcomes()
		tally := Count(outs)
		if tally.OK != tally.Requests {
			t.Fatalf("a side stopped serving: %v", tally)
		}
		before, during, after := HitRate(window(outs, split.Add(-4*time.Second), split)), HitRate(window(outs, split, healed)), HitRate(window(outs, healed.Add(2*time.Second), healed.Add(11*time.Second)))
		report(t, "%v; hit rate %.3f before, %.3f split, %.3f after; bound excess max %d before, %d during the split; views joined %v and agreement back %v after the heal",
			tally, before, during, after, slices.Max(baseExcess), slices.Max(excess), joined, recovered)
		checkNoGhostLoad(t, c)
	})
}

// requestsSignal is cfg with the load counted in requests (the bound's
// floor then 4), as the real-process partition and endpoint-skew run
// (chaos/proc's requestsSignal): the heavy load then reaches the floor, so
// the bound decides picks, and Excess reads requests against CHWBL's
// bound. Under the default tokens signal the floor is 16384 tokens, far
// above what the heavy load holds on an engine: Excess read about -15000
// in every phase, and a comparison of two such figures could not fail
// for a reason.
func requestsSignal(cfg Config) Config {
	cfg.Ring.Signal, cfg.Ring.MinBound = ring.SignalRequests, ring.DefaultMinRequests
	return cfg
}

// countsEntry reports whether r's view counts peer's entry now (fresh,
// from a member, not a tombstone).
func countsEntry(r *Replica, peer string) bool {
	for _, e := range r.Node.Status().Entries {
		if e.Node == peer {
			return e.Counted
		}
	}
	return false
}

// waitViewsJoined waits until every live replica counts every other live
// replica's entry, and returns how long that took.
func waitViewsJoined(t *testing.T, c *Cluster, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		missing := ""
		for _, r := range c.Live() {
			for _, peer := range c.Live() {
				if peer != r && !countsEntry(r, peer.Name) {
					missing += fmt.Sprintf(" %s lacks %s;", r.Name, peer.Name)
				}
			}
		}
		if missing == "" {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("views not joined after %v:%s", limit, missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Scenario 7: 20% packet loss and 50 ms ± 25 ms delay between the
// replicas, against the same load without them, with the load counted in
// requests so that the bound decides picks (under the tokens default the
// heavy load stays far below the floor: no key left its home, and
// agreement read 1.000 with and without loss whatever the views held).
// The bound sends keys away from home in both phases, so the agreement
// reported for both (sampled every 250 ms under load) can fail. Under
// loss every replica keeps hearing every other's entry anew within a
// heartbeat: a lost publication is repaired by the next ones, not by
// push/pull or the staleness expiry. The bound's excess stays within two
// requests of its excess without loss, every request is answered, and
// when the load stops the views drain to zero and agree again.
func TestLossyGossip(t *testing.T) {
	scenario(t, requestsSignal(DefaultConfig()), func(t *testing.T, c *Cluster) {
		type phase struct {
			agree, spilled []float64
			excess         []int64
			silent         time.Duration // the longest a replica went without a peer's news
			missing        string        // a sample's replicas that counted no entry of a peer
		}
		measure := func() (p phase, tally Tally) {
			wait := heavy(c, 10*time.Second)
			stop := Sample(250*time.Millisecond, func() {
				p.agree = append(p.agree, c.Agreement(probeKeys))
				p.spilled = append(p.spilled, spilledShare(c))
				p.excess = append(p.excess, c.Excess(c.cfg.Engines))
				age, missing := peerAge(c)
				p.silent = max(p.silent, age)
				p.missing = cmp.Or(p.missing, missing)
			})
			tally = Count(wait().Outcomes())
			stop()
			return
		}
		clean, _ := measure()
		c.Gossip.SetLoss(0.2)
		c.Gossip.SetLatency(50*time.Millisecond, 25*time.Millisecond)
		lossy, tally := measure()
		if tally.OK != tally.Requests {
			t.Fatalf("%v", tally)
		}
		settle := checkNoGhostLoad(t, c)
		idle := waitAgreement(t, c, 2*c.cfg.Gossip.PushPull)
		report(t, "%v; agreement under load mean %.3f (no loss: %.3f), probe keys off home %.3f (%.3f); bound excess p95 %d, max %d (no loss: p95 %d, max %d); a peer's entry heard anew within %v (no loss: %v); views drained to 0 in %v after the load stopped, agreed %v later",
			tally, Mean(lossy.agree), Mean(clean.agree), Mean(lossy.spilled), Mean(clean.spilled),
			p95(lossy.excess), slices.Max(lossy.excess), p95(clean.excess), slices.Max(clean.excess), lossy.silent, clean.silent, settle, idle)
		if lossy.missing != "" {
			t.Fatalf("under loss, a replica counted no entry of a peer:%s", lossy.missing)
		}
		if lossy.silent > c.cfg.Gossip.Heartbeat {
			t.Fatalf("under loss, a replica heard nothing new from a peer for %v (heartbeat %v): lost publications were not repaired by the next ones", lossy.silent, c.cfg.Gossip.Heartbeat)
		}
		// The bound must decide picks, or agreement could not fail.
		if Mean(clean.spilled) < 0.05 || Mean(lossy.spilled) < 0.05 {
			t.Fatalf("probe keys off home %.3f without loss, %.3f with: the bound decided too few picks to measure agreement", Mean(clean.spilled), Mean(lossy.spilled))
		}
		// Compared at the 95th percentile of the samples, as in
		// TestEndpointSetSkew: the maximum is one burst's luck. The delay
		// costs up to a request (p95 1-2 against 1 in six runs); lost
		// gossip costs no more at this load, so this check does not
		// detect it: the checks above do.
		if p95(lossy.excess) > p95(clean.excess)+2 {
			t.Fatalf("the bound's excess (p95 of samples) was %d under loss, %d without", p95(lossy.excess), p95(clean.excess))
		}
	})
}

// peerAge is the longest any live replica has gone without hearing a
// newer entry of another live replica, and which replicas count no entry
// of which other ("" when every one counts every other's).
func peerAge(c *Cluster) (time.Duration, string) {
	oldest, missing := time.Duration(0), ""
	live := c.Live()
	for _, r := range live {
		heard := map[string]time.Duration{}
		for _, e := range r.Node.Status().Entries {
			if e.Counted {
				heard[e.Node] = time.Duration(e.AgeMillis) * time.Millisecond
			}
		}
		for _, peer := range live {
			if peer == r {
				continue
			}
			age, ok := heard[peer.Name]
			if !ok {
				missing += fmt.Sprintf(" %s lacks %s;", r.Name, peer.Name)
			}
			oldest = max(oldest, age)
		}
	}
	return oldest, missing
}

func p95(xs []int64) int64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)*95/100]
}

// Scenario 8: one replica's endpoint list lags (it lacks an engine, as
// DNS lag would cause) for 12 s. Every lease still counts everywhere, so
// loads stay within the bound on every endpoint, and the lists re-converge.
func TestEndpointSetSkew(t *testing.T) {
	scenario(t, requestsSignal(DefaultConfig()), func(t *testing.T, c *Cluster) {
		wait := heavy(c, 20*time.Second)
		var baseExcess []int64
		stopBase := Sample(50*time.Millisecond, func() { baseExcess = append(baseExcess, c.Excess(c.cfg.Engines)) })
		time.Sleep(6 * time.Second)
		stopBase()
		lagging := c.Replica(2)
		if err := lagging.Set.SetSource("static", c.EngineURLs()[:3]); err != nil {
			t.Fatal(err)
		}
		var excess []int64
		stopSampling := Sample(50*time.Millisecond, func() { excess = append(excess, c.Excess(c.cfg.Engines)) })
		time.Sleep(12 * time.Second)
		stopSampling()
		if err := lagging.Set.SetSource("static", c.EngineURLs()); err != nil {
			t.Fatal(err)
		}
		cl := wait()
		tally := Count(cl.Outcomes())
		if tally.OK != tally.Requests {
			t.Fatalf("%v", tally)
		}
		// The lagging replica's leases stay counted (it carries them in its
		// entry although it does not list the engine), so the bound holds
		// as well as with equal lists.
		// Compared at the 95th percentile of 50 ms samples: the maximum of
		// one run is one burst's luck either way. (Until stop 44 the phases
		// were 8 s and 20 s, sampled every 100 ms: halving the interval
		// keeps the samples' count near theirs, so the p95 is not the
		// few highest samples' luck.)
		if skew, base := p95(excess), p95(baseExcess); skew > base+2 {
			t.Fatalf("the bound's excess (p95 of samples) was %d while the lists differed, %d with equal lists", skew, base)
		}
		report(t, "%v; bound excess while one replica lacked an engine p95 %d, max %d (equal lists: p95 %d, max %d)",
			tally, p95(excess), slices.Max(excess), p95(baseExcess), slices.Max(baseExcess))
		checkNoGhostLoad(t, c)
	})
}

// Scenario 7b: the same loss and delay, at a
// load where the bound decides picks (no floor: MinBound 0), with the
// shared view, which agrees on every pick when publications arrive at once
// (so what is measured is what the network costs; the default view,
// overlay, keeps each replica's own unpublished placements private and
// agrees on ~0.89 of the probe keys at this bound with no loss at all).
// The shared view does not meet the goal (agreement under load >= 0.9):
// each replica applies its own publication at once and the others' on
// receipt, so at most instants they hold different ones; the aligned view
// (7c) meets it. Here the goal is checked only with CHAOS_GOALS=1; by
// default the scenario asserts that every request is answered and reports
// the figures.
func TestLossyGossipAgreement(t *testing.T) {
	lossyAgreement(t, core.ViewShared, os.Getenv("CHAOS_GOALS") != "")
}

// Scenario 7c: the same, with the aligned view: every replica applies each
// publication (its own included) at its stamp plus the apply lag, so the
// replicas that heard the same publications read the same loads at the
// same instant whatever the 50±25 ms delay, and each publication's repeat
// at the next tick arrives before it is due, so a lost one is missed only
// when all three sends are. The goal (>= 0.9 under loss and delay) is
// checked on every run.
func TestLossyGossipAgreementAligned(t *testing.T) {
	lossyAgreement(t, core.ViewAligned, true)
}

// lossyAgreement measures agreement under load at the bound in view,
// without and then with 20% loss and 50±25 ms delay; goal: fail below 0.9.
// It samples every 250 ms: a publication that reaches one replica later
// than the others (lost twice, then delayed) makes them disagree on most
// keys for an instant, and with one-second samples one such instant weighed
// a fifteenth of the mean, two of them failed the goal.
func lossyAgreement(t *testing.T, view core.ViewMode, goal bool) {
	cfg := DefaultConfig()
	cfg.Ring.MinBound = 0
	cfg.Gossip.View = view
	scenario(t, cfg, func(t *testing.T, c *Cluster) {
		// spilled is the share of probe keys some replica would send
		// away from home: the bound decides them, so the loads must agree.
		measure := func() (agree, spilled []float64, tally Tally) {
			wait := heavy(c, 8*time.Second)
			stop := Sample(250*time.Millisecond, func() {
				agree = append(agree, c.Agreement(probeKeys))
				spilled = append(spilled, spilledShare(c))
			})
			tally = Count(wait().Outcomes())
			stop()
			return
		}
		clean, cleanSpilled, _ := measure()
		c.Gossip.SetLoss(0.2)
		c.Gossip.SetLatency(50*time.Millisecond, 25*time.Millisecond)
		lossy, spilled, tally := measure()
		if tally.OK != tally.Requests {
			t.Fatalf("%v", tally)
		}
		report(t, "%v; view %s: agreement under load at the bound, 20%% loss and 50±25 ms: mean %.3f (no loss: %.3f); probe keys off home %.3f (%.3f)",
			tally, view, Mean(lossy), Mean(clean), Mean(spilled), Mean(cleanSpilled))
		if goal && Mean(lossy) < 0.9 {
			t.Fatalf("view %s: agreement under load with loss and delay %.3f (no loss: %.3f), want >= 0.9: %v", view, Mean(lossy), Mean(clean), lossy)
		}
	})
}

// spilledShare is the share of probe keys that some live replica would
// send away from their home.
func spilledShare(c *Cluster) float64 {
	homes := c.Homes(probeKeys)
	off := 0
	for k, picks := range c.Probe(probeKeys) {
		for _, ep := range picks {
			if ep != homes[k] {
				off++
				break
			}
		}
	}
	return float64(off) / float64(len(probeKeys))
}

// Scenario 11: a replica's host is black-holed under
// load: its gossip address stops answering without resetting anything, so
// every dial to it hangs for memberlist's TCP timeout (10 s). Then, while
// memberlist still lists it, new shared prompts arrive and workers are
// registered at the survivors. A member that does not answer must delay
// no send to the others: the survivors key requests alike (their tables
// of shared prefixes agree) and route each new worker within 2 s.
func TestBlackHole(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Engines = 7
	synctest.Test(t, func(t *testing.T) {
		c := New(cfg)
		defer c.Close()
		for i := range cfg.Engines {
			if err := c.StartEngine(i); err != nil {
				t.Fatal(err)
			}
		}
		for i := range cfg.Replicas {
			if err := c.StartReplica(i, c.EngineURLs()[:4]); err != nil {
				t.Fatal(err)
			}
		}
		wait := steadyGroups(c, 30*time.Second, 6)
		time.Sleep(8 * time.Second)
		c.BlackHoleReplica(2)
		dead := time.Now()
		// New shared preambles (documents longer than a chunk at the top of
		// the first user message) at the survivors: their sketches learn
		// them and publish, which changes how these bodies key.
		survivors := NewClient([]string{"http://" + ReplicaAddr(0), "http://" + ReplicaAddr(1)}, c.transport(), c.Crashes)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		preambled := make(chan struct{})
		go func() { survivors.Preamble(ctx, 8, 6, 200*time.Millisecond); close(preambled) }()
		var bodies [][]byte
		for g := range 6 {
			for conv := range 4 {
				bodies = append(bodies, PreambleBody(g, 1000+conv))
			}
		}
		keysAt := func() []keying {
			var out []keying
			for _, b := range bodies {
				k, err := c.keyingOf(0, b)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, k)
			}
			return out
		}
		first := keysAt()
		var st Stretches
		stop := Sample(100*time.Millisecond, func() { st.Observe(time.Now(), c.KeyAgreement(bodies) == 1) })
		var took []time.Duration
		for k := range 3 {
			at := k % 2 // r0, r1, r0
			url := EngineURL(4 + k)
			code, err := c.Workers(at, http.MethodPost, url, workersToken)
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusAccepted {
				t.Fatalf("registering %s at r%d: %d", url, at, code)
			}
			took = append(took, waitRouted(t, c, url, true, 15*time.Second))
		}
		time.Sleep(time.Until(dead.Add(15 * time.Second)))
		stop()
		st.Finish(time.Now())
		// The measure means something only if the tables moved meanwhile.
		changed := 0
		for k, key := range keysAt() {
			if key != first[k] {
				changed++
			}
		}
		if changed == 0 {
			t.Fatalf("no body's keying changed after the black hole: the agreement check could not fail")
		}
		<-preambled
		cancel()
		survivors.Close()
		tally := Count(append(wait().Outcomes(), survivors.Outcomes()...))
		longest := st.Longest()
		report(t, "%v; after the black hole: %d of %d bodies keyed anew, keys disagreed %d times, longest %v; new workers routed by every survivor after %v",
			tally, changed, len(bodies), len(st.Spans), longest, took)
		if longest > 2*time.Second || slices.Max(took) > 2*time.Second {
			t.Fatalf("with a member black-holed, the survivors disagreed on keys for up to %v and routed new workers after %v (want both within 2s)", longest, took)
		}
	})
}

// steadyGroups is the standard load over groups system prompts.
func steadyGroups(c *Cluster, d time.Duration, groups int) (wait func() *Client) {
	cl := c.NewClient()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	done := make(chan struct{})
	go func() {
		cl.Steady(ctx, 8, groups, 4, 0, 200*time.Millisecond)
		close(done)
	}()
	return func() *Client {
		<-done
		cancel()
		cl.Close()
		return cl
	}
}

// Spans of disagreement run from the first disagreeing sample to the
// first agreeing one; one still open at the end is closed there.
func TestStretches(t *testing.T) {
	var s Stretches
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, x := range []struct {
		ms    int
		agree bool
	}{{0, true}, {100, false}, {200, false}, {400, true}, {500, false}, {600, true}, {700, false}} {
		s.Observe(at(x.ms), x.agree)
	}
	s.Finish(at(1700))
	want := []time.Duration{300 * time.Millisecond, 100 * time.Millisecond, time.Second}
	if !slices.Equal(s.Spans, want) || s.Longest() != time.Second {
		t.Fatalf("spans %v, longest %v", s.Spans, s.Longest())
	}
	var none Stretches
	none.Finish(at(5))
	if none.Longest() != 0 || len(none.Spans) != 0 {
		t.Fatal("no disagreement, yet spans")
	}
}
