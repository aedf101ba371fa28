package chaos

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/vllm"
)

// waitRouted waits until every live replica routes id (want) or holds it
// out (!want), and returns how long it took.
func waitRouted(t *testing.T, c *Cluster, id string, want bool, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !c.Routed(id, want) {
		if time.Since(start) > limit {
			t.Fatalf("%s routed=%v not reached within %v", id, want, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// moved compares two home maps: how many keys moved, and how many of them
// were not on the endpoint that changed (which must be none).
func moved(before, after []string, changed string) (moves, others int) {
	for k := range before {
		if before[k] != after[k] {
			moves++
			if before[k] != changed && after[k] != changed {
				others++
			}
		}
	}
	return
}

// Scenario 2: an engine dies mid-run and returns at the same address (the
// Kubernetes NotReady -> Ready path). Requests that had not reached it are
// retried elsewhere; only requests in flight on it at its death fail (cut
// streams end with the error event); its keys, and only its keys, move,
// and come home when it returns.
func TestEngineDeathAndReturn(t *testing.T) {
	scenario(t, DefaultConfig(), func(t *testing.T, c *Cluster) {
		victim := EngineURL(1)
		before := c.Homes(probeKeys)
		// 25 s of load (60 s until stop 44) outlast the death, the
		// ejection (0.8 s), 5 s out and the return (under a second).
		wait := steady(c, 25*time.Second, 4)
		time.Sleep(5 * time.Second)
		killed := time.Now()
		c.KillEngine(1)
		ejected := waitRouted(t, c, victim, false, 10*time.Second)
		during := c.Homes(probeKeys)
		time.Sleep(5 * time.Second)
		if err := c.StartEngine(1); err != nil {
			t.Fatal(err)
		}
		// Its refused requests eject it, but its probes fail too, so it is
		// out for its probes (upstream's probeFailedLocked) and returns
		// once they pass, within a second; the limit allows a full
		// BaseEjection besides.
		back := waitRouted(t, c, victim, true, c.cfg.Health.BaseEjection+15*time.Second)
		after := c.Homes(probeKeys)
		cl := wait()

		tally := Count(cl.Outcomes())
		late := 0
		for _, o := range cl.Outcomes() {
			if !o.OK() && !(o.Start.Before(killed) && o.Endpoint == hostOf(victim)) && !(o.Start.Before(killed) && o.Err != "") {
				late++
			}
		}
		if late != 0 || tally.Mismatched != 0 {
			t.Fatalf("%d requests failed that were not in flight on the dead engine: %v", late, tally)
		}
		gone, others := moved(before, during, victim)
		if others != 0 {
			t.Fatalf("%d keys of other engines moved when %s left", others, victim)
		}
		// Its keys must move, every one: a ring that kept routing an
		// ejected engine's keys to it (the retries hiding the refusals)
		// would move none and pass the two checks above.
		if own := countOn(before, victim); own == 0 || gone != own {
			t.Fatalf("%d of the %d probe keys homed on %s moved when it was ejected", gone, own, victim)
		}
		if !slices.Equal(before, after) {
			back, _ := moved(before, after, victim)
			t.Fatalf("%d keys did not come home", back)
		}
		report(t, "%v; ejected after %v; %d of %d probe keys moved, all its own; back after %v, every key home",
			tally, ejected, gone, len(probeKeys), back)
		checkNoGhostLoad(t, c)
	})
}

func hostOf(url string) string { return url[len("http://"):] }

// Scenario 4: an engine whose port goes up and down every second, ten
// times (twenty until stop 44). Each flap moves its keys and only its
// keys; no flap moves anything else, and nothing is lost.
func TestFlappingEngine(t *testing.T) {
	scenario(t, DefaultConfig(), func(t *testing.T, c *Cluster) {
		victim := EngineURL(2)
		base := c.Homes(probeKeys)
		wait := steady(c, 13*time.Second, 0)
		prev, flaps, maxMoves, others := base, 0, 0, 0
		for k := range 10 {
			time.Sleep(time.Second)
			if k%2 == 0 {
				c.KillEngine(2)
			} else if err := c.StartEngine(2); err != nil {
				t.Fatal(err)
			}
			flaps++
			time.Sleep(50 * time.Millisecond)
			cur := c.Homes(probeKeys)
			m, o := moved(prev, cur, victim)
			maxMoves, others = max(maxMoves, m), others+o
			prev = cur
		}
		if err := c.StartEngine(2); err != nil && c.Engine(2) == nil {
			t.Fatal(err)
		}
		cl := wait()
		tally := Count(cl.Outcomes())
		if others != 0 || tally.Mismatched != 0 {
			t.Fatalf("other keys moved %d times; %v", others, tally)
		}
		// Nothing is lost: a request that met the engine down is retried
		// elsewhere (no stream here, so none is cut mid-answer).
		if tally.OK != tally.Requests {
			t.Fatalf("requests lost while the engine flapped: %v", tally)
		}
		// A health flip moves all of its keys at once, and a flap that
		// moved none would pass the checks above: some flap must have
		// moved them all.
		if own := countOn(base, victim); own == 0 || maxMoves != own {
			t.Fatalf("a flap moved at most %d keys; the engine owns %d", maxMoves, own)
		}
		report(t, "%v; %d flaps; at most %d of its %d probe keys moved per flap, 0 of others'", tally, flaps, maxMoves, countOn(base, victim))
	})
}

func countOn(homes []string, id string) int {
	n := 0
	for _, h := range homes {
		if h == id {
			n++
		}
	}
	return n
}

// Scenario 5: one engine answers 10x slower. The bound moves its
// overflow elsewhere: it takes well under its fair share of the requests,
// more requests are spilled from their home than before it slowed,
// nothing is lost, and the other engines' requests keep their latency.
//
//   - requests: load counted in requests (floor 4), HAProxy's unit: its
//     requests stay in flight ten times longer, so it reaches the bound.
//   - tokens, the default: this load never reaches P's floor of 16384
//     tokens, and before ring.Pace the slow engine kept its fair share
//     (24.4%). Each replica's pace, told by the streamed half of the
//     requests and pooled with its peers' over gossip (checked at the
//     end: every replica holds both others' sums), counts its load ten
//     times over.
func TestSlowEngine(t *testing.T) {
	for _, tc := range []struct {
		signal      string
		cfg         Config
		streamEvery int
	}{
		{"requests", requestsSignal(DefaultConfig()), 0},
		{"tokens", DefaultConfig(), 2},
	} {
		t.Run(tc.signal, func(t *testing.T) { slowEngine(t, tc.cfg, tc.streamEvery) })
	}
}

func slowEngine(t *testing.T, cfg Config, streamEvery int) {
	scenario(t, cfg, func(t *testing.T, c *Cluster) {
		base := Count(steady(c, 10*time.Second, streamEvery)().Outcomes())
		p99 := func(outs []Outcome, on func(string) bool) time.Duration {
			var d []time.Duration
			for _, o := range outs {
				if o.OK() && on(o.Endpoint) {
					d = append(d, o.TTFB)
				}
			}
			slices.Sort(d)
			if len(d) == 0 {
				return 0
			}
			return d[(len(d)*99)/100]
		}
		slow := hostOf(EngineURL(0))
		others := func(ep string) bool { return ep != slow }
		on := func(ep string) bool { return ep == slow }
		share := func(outs []Outcome, is func(Outcome) bool) float64 {
			n := 0
			for _, o := range outs {
				if is(o) {
					n++
				}
			}
			return float64(n) / float64(max(len(outs), 1))
		}
		onSlow := func(o Outcome) bool { return on(o.Endpoint) }
		spilled := func(o Outcome) bool { return o.Decision == ring.DecisionSpill.String() }
		baseline := steady(c, 10*time.Second, streamEvery)().Outcomes()
		baseOthers := p99(baseline, others)
		if err := c.Engine(0).Server.SetFaults(vllm.Faults{Latency: 500 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		outs := steady(c, 20*time.Second, streamEvery)().Outcomes()
		tally := Count(outs)
		slowShare, slowOthers := share(outs, onSlow), p99(outs, others)
		baseSpill, slowSpill := share(baseline, spilled), share(outs, spilled)
		report(t, "%v (baseline %d ok); slow engine p99 %v, took %.1f%% of requests (before it slowed: %.1f%%); %.1f%% spilled from their home (before: %.1f%%); others' p99 %v (before: %v)",
			tally, base.OK, p99(outs, on), 100*slowShare, 100*share(baseline, onSlow), 100*slowSpill, 100*baseSpill, slowOthers, baseOthers)
		if tally.OK != tally.Requests {
			t.Fatalf("%v", tally)
		}
		// Its fair share is 1/4. Seven runs: 13.8-14.3%; with the bound
		// never firing (the ring reading every load as 0), 24.6%. Its
		// share before it slowed (29-31%, its keys' share) is no yardstick:
		// without the bound the slowness alone lowered it to 24.6%.
		if fair := 1 / float64(c.cfg.Engines); slowShare > 0.8*fair {
			t.Fatalf("the slow engine took %.1f%% of requests, its fair share %.1f%%: the bound moved no overflow elsewhere", 100*slowShare, 100*fair)
		}
		if slowSpill <= baseSpill {
			t.Fatalf("%.1f%% of requests spilled from their home while an engine was slow, %.1f%% before", 100*slowSpill, 100*baseSpill)
		}
		if slowOthers > 2*baseOthers+50*time.Millisecond {
			t.Fatalf("other engines' p99 %v against %v before", slowOthers, baseOthers)
		}
		// Each replica pooled its peers' pace sums (gossip tag 3), not its
		// own evidence alone: both others' are held.
		for _, r := range c.Live() {
			if peers := r.Bal.Pace().PeerNodes(); len(peers) != c.cfg.Replicas-1 {
				t.Fatalf("%s pools the pace sums of %v, want its %d peers'", r.Name, peers, c.cfg.Replicas-1)
			}
		}
		c.Engine(0).Server.SetFaults(vllm.Faults{})
	})
}

// Scenario 6: an engine that answers 500 to everything, then one that
// hangs. Each is ejected after a few failures (reported), requests then
// go elsewhere, and it returns when it heals.
func TestFailingEngine(t *testing.T) {
	for _, mode := range []string{"errors", "hang"} {
		t.Run(mode, func(t *testing.T) {
			cfg := DefaultConfig()
			// A hung engine still passes /health; only its requests' timeouts
			// show it. Operators set --upstream-timeout to their longest
			// expected wait for headers; 3 s here.
			cfg.Proxy.UpstreamTimeout = 3 * time.Second
			scenario(t, cfg, func(t *testing.T, c *Cluster) {
				victim := EngineURL(3)
				_, stop := steadyStop(c, 40*time.Second, 0)
				time.Sleep(3 * time.Second)
				f := vllm.Faults{ErrorRate: 1}
				if mode == "hang" {
					f = vllm.Faults{HangRate: 1}
				}
				if err := c.Engine(3).Server.SetFaults(f); err != nil {
					t.Fatal(err)
				}
				ejected := waitRouted(t, c, victim, false, 20*time.Second)
				time.Sleep(5 * time.Second)
				if err := c.Engine(3).Server.SetFaults(vllm.Faults{}); err != nil {
					t.Fatal(err)
				}
				// The load ends as the engine heals (until stop 44 it ran
				// 40 s, past the return of errors and short of hang's):
				// its return is the probes' doing.
				cl := stop(0)
				returned := waitRouted(t, c, victim, true, 2*time.Minute)
				tally := Count(cl.Outcomes())
				if tally.Mismatched != 0 || tally.Failed > tally.Requests/20 {
					t.Fatalf("%v", tally)
				}
				report(t, "%v; ejected after %v; back %v after healing", tally, ejected, returned)
			})
		})
	}
}

// A poison prompt: every engine answers one prompt with 500. A client sends
// it 20 times (100 until stop 44; three 5xx in a row would eject an
// engine if they counted), retrying each twice as the OpenAI SDKs do, while the
// standard load runs: the 5xx each poison call gets from several engines is
// the request's fault and counts against none, so nothing is ejected and
// the other clients keep every answer.
func TestPoisonPrompt(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Engine.Faults.Poison = "POISON-PROMPT"
	scenario(t, cfg, func(t *testing.T, c *Cluster) {
		waitAgreement(t, c, time.Second)
		wait := steady(c, 6*time.Second, 5)
		poison := c.NewClient()
		body := []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":8,"messages":[{"role":"user","content":"POISON-PROMPT please"}]}`)
		bad := 0
		for i := range 20 {
			for try := 0; try < 3; try++ { // the SDKs' default: 2 retries
				o := poison.Do(context.Background(), fmt.Sprintf("poison-%d-%d", i, try), body, false)
				if o.Status < 500 {
					t.Fatalf("the poison prompt got %d", o.Status)
				}
				bad++
				time.Sleep(50 * time.Millisecond)
			}
		}
		poison.Close()
		tally := Count(wait().Outcomes())
		if tally.OK != tally.Requests || tally.Requests < 100 {
			t.Fatalf("others under the poison prompt: %v", tally)
		}
		for _, u := range c.EngineURLs() {
			if !c.Routed(u, true) {
				t.Fatalf("%s was ejected by a prompt every engine fails", u)
			}
		}
		report(t, "%d poison calls (20 x 3 tries): %s; no engine ejected", bad, tally)
	})
}
