package ring

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var epoch = time.Unix(1_700_000_000, 0)

// observeRates gives each endpoint n samples of 1000 tokens at its rate
// (milliseconds per 1000 tokens, the overhead included), one every 10 ms
// from start, interleaved; it returns the time after the last.
func observeRates(p *Pace, rates map[string]float64, n int, start time.Time) time.Time {
	at := start
	ids := sortedKeys(rates)
	for range n {
		for _, id := range ids {
			p.Observe(id, 1000-p.cfg.Overhead, time.Duration(rates[id]*float64(time.Millisecond)), at)
			at = at.Add(10 * time.Millisecond)
		}
	}
	return at
}

func sortedKeys(m map[string]float64) []string {
	var ids []string
	for id := range m {
		ids = append(ids, id)
	}
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			if ids[j] < ids[i] {
				ids[i], ids[j] = ids[j], ids[i]
			}
		}
	}
	return ids
}

func TestPaceFindsASlowEndpoint(t *testing.T) {
	p := NewPace(DefaultPaceConfig())
	observeRates(p, map[string]float64{"a": 40, "b": 50, "c": 60, "d": 500}, 20, epoch)
	got := p.Factors()
	if len(got) != 1 || got["d"] < 9 || got["d"] > 11 {
		t.Fatalf("factors %v, want only d at about 10 (500 ms against the median's 50)", got)
	}
	if f := p.Factor("a"); f != 1 {
		t.Fatalf("a's factor %v, want 1", f)
	}
}

// With half the fleet slow, the fast half is the yardstick (the lower
// median).
func TestPaceHalfTheFleetSlow(t *testing.T) {
	p := NewPace(DefaultPaceConfig())
	observeRates(p, map[string]float64{"a": 50, "b": 50, "c": 400, "d": 400}, 20, epoch)
	if got := p.Factors(); len(got) != 2 || math.Abs(got["c"]-8) > 1e-9 || math.Abs(got["d"]-8) > 1e-9 {
		t.Fatalf("factors %v, want c and d at 8", got)
	}
}

// An even fleet, its endpoints' paces within 2× of each other by load and
// luck, has no slow endpoint: Pace changes no pick there.
func TestPaceEvenFleetHasNoSlowEndpoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		p := NewPace(DefaultPaceConfig())
		at := epoch
		for range 400 {
			id := string(rune('a' + rng.IntN(8)))
			ms := 20 + rng.Float64()*20 // 20-40 ms per 1000 tokens
			p.Observe(id, 1000-p.cfg.Overhead, time.Duration(ms*float64(time.Millisecond)), at)
			at = at.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		}
		if got := p.Factors(); len(got) != 0 {
			t.Fatalf("trial %d: factors %v on an even fleet", trial, got)
		}
	}
}

func TestPaceNeedsThreeEndpointsWithSamples(t *testing.T) {
	p := NewPace(DefaultPaceConfig())
	observeRates(p, map[string]float64{"a": 50, "d": 500}, 20, epoch)
	if got := p.Factors(); len(got) != 0 {
		t.Fatalf("factors %v from two endpoints, want none", got)
	}
	// A third with fewer than MinSamples samples is not compared yet.
	at := observeRates(p, map[string]float64{"b": 50}, 7, epoch.Add(time.Second))
	if got := p.Factors(); len(got) != 0 {
		t.Fatalf("factors %v with the third endpoint at 7 samples, want none", got)
	}
	observeRates(p, map[string]float64{"b": 50}, 2, at)
	if got := p.Factors(); got["d"] < 9 {
		t.Fatalf("factors %v with three endpoints measured, want d about 10", got)
	}
}

// A slow endpoint's evidence fades while it takes no requests: its factor
// falls back to 1 by degrees, so its keys return a few at a time and
// measure it again.
func TestPaceEvidenceFades(t *testing.T) {
	cfg := DefaultPaceConfig()
	p := NewPace(cfg)
	at := observeRates(p, map[string]float64{"a": 50, "b": 50, "c": 50, "d": 500}, 20, epoch)
	last := p.Factor("d")
	if last < 9 {
		t.Fatalf("d's factor %v, want about 10", last)
	}
	// The others keep being sampled; d gets nothing.
	for k := range 6 {
		at = observeRates(p, map[string]float64{"a": 50, "b": 50, "c": 50}, 100, at.Add(cfg.HalfLife-3*time.Second))
		f := p.Factor("d")
		if k >= 1 && f >= last {
			t.Fatalf("after %v without samples d's factor is %v, %v before", at.Sub(epoch), f, last)
		}
		last = f
	}
	if last > 1.5 {
		t.Fatalf("d's factor %v after %v without samples, want near 1", last, at.Sub(epoch))
	}
	// Measured again, and still slow.
	observeRates(p, map[string]float64{"d": 500}, 20, at)
	if f := p.Factor("d"); f < 9 {
		t.Fatalf("d measured slow again: factor %v", f)
	}
}

// Whole answers are compared apart from streams, each against its own
// median: an endpoint slow at both is slow by the larger factor, and
// streams that are all slow on one endpoint do not make its whole answers
// the yardstick of the others'.
func TestPaceWholeAnswers(t *testing.T) {
	p := NewPace(DefaultPaceConfig())
	at := epoch
	for range 20 {
		for _, id := range []string{"a", "b", "c", "d"} {
			d := 2 * time.Second // a whole answer: its decode
			if id == "b" {
				d = 8 * time.Second
			}
			p.ObserveWhole(id, d, at)
			at = at.Add(10 * time.Millisecond)
		}
	}
	if got := p.Factors(); len(got) != 1 || math.Abs(got["b"]-4) > 1e-9 {
		t.Fatalf("whole answers alone: factors %v, want b at 4", got)
	}
	// Streams, whose first tokens come in tens of milliseconds, have a
	// median of their own: d is slow there.
	observeRates(p, map[string]float64{"a": 50, "b": 50, "c": 50, "d": 300}, 20, at)
	if got := p.Factors(); len(got) != 2 || math.Abs(got["b"]-4) > 1e-9 || got["d"] < 5.9 || got["d"] > 6.1 {
		t.Fatalf("both kinds: factors %v, want b at 4 and d at 6", got)
	}
}

func TestPaceForget(t *testing.T) {
	p := NewPace(DefaultPaceConfig())
	observeRates(p, map[string]float64{"a": 50, "b": 50, "c": 50, "d": 500}, 20, epoch)
	p.Forget([]string{"a", "b", "c"})
	if got := p.Factors(); len(got) != 0 {
		t.Fatalf("factors %v after d left, want none", got)
	}
}

func TestPaceConfigValidate(t *testing.T) {
	ok := []PaceConfig{{}, DefaultPaceConfig()}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []func(*PaceConfig){
		func(c *PaceConfig) { c.Threshold = 1 },
		func(c *PaceConfig) { c.HalfLife = 0 },
		func(c *PaceConfig) { c.MinSamples = 0 },
		func(c *PaceConfig) { c.Overhead = -1 },
		func(c *PaceConfig) { c.Max = 2 },
	}
	for i, f := range bad {
		c := DefaultPaceConfig()
		f(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("case %d: %+v accepted", i, c)
		}
		cfg := DefaultConfig()
		cfg.Pace = c
		if _, err := NewBalancer(cfg); err == nil {
			t.Errorf("case %d: NewBalancer accepted %+v", i, c)
		}
	}
}

// answerAll sends b 400 keyed requests of 1000 tokens, one every 10 ms
// from epoch (keys drawn from seed), and has tell time each one's answer:
// 500 ms on endpoint slow, 50 ms elsewhere; then releases it.
func answerAll(t *testing.T, b *Balancer, slow string, seed uint64, tell func(l Lease, d time.Duration, at time.Time)) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	at := epoch
	for range 400 {
		l, err := b.Acquire(Request{Key: rng.Uint64(), Keyed: true, Tokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		d := 50 * time.Millisecond
		if l.Endpoint == slow {
			d = 500 * time.Millisecond
		}
		tell(l, d, at)
		l.Release()
		at = at.Add(10 * time.Millisecond)
	}
}

// slowBalancer is a default balancer over four endpoints whose leases
// have told it that slow answers ten times later than the others.
func slowBalancer(t *testing.T, pace PaceConfig) (*Balancer, string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Pace = pace
	b, err := NewBalancer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c", "d"}
	if err := b.SetEndpoints(ids); err != nil {
		t.Fatal(err)
	}
	const slow = "c"
	answerAll(t, b, slow, 3, func(l Lease, d time.Duration, at time.Time) {
		l.Settle()
		l.FirstToken(d, at)
		l.FirstToken(time.Hour, at) // only the first call counts
	})
	return b, slow
}

// A slow endpoint's keys spill while it holds a little prefill, far
// below P's floor; with Pace off they stay home.
func TestSlowEndpointsKeysSpill(t *testing.T) {
	for _, tc := range []struct {
		name string
		pace PaceConfig
		want Decision
	}{
		{"pace on", DefaultPaceConfig(), DecisionSpill},
		{"pace off", PaceConfig{}, DecisionHome},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, slow := slowBalancer(t, tc.pace)
			if f := b.Pace().Factor(slow); tc.pace.Threshold > 0 && (f < 9 || f > 11) {
				t.Fatalf("slow's factor %v, want about 10", f)
			}
			// One 2000-token prompt in flight on the slow endpoint.
			var key uint64
			for k := uint64(1); ; k++ {
				if h, _ := b.Home(k); h == slow {
					key = k
					break
				}
			}
			held := b.AcquireOn(Request{Tokens: 2000}, slow, DecisionFallback)
			defer held.Release()
			l, err := b.Acquire(Request{Key: key, Keyed: true, Tokens: 2000})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			if l.Decision != tc.want || (tc.want == DecisionSpill) == (l.Endpoint == slow) {
				t.Fatalf("went to %s (%v), want %v", l.Endpoint, l.Decision, tc.want)
			}
		})
	}
}

// An idle slow endpoint still takes a short request of its own keys: its
// samples keep coming, so a recovered engine is seen to recover.
func TestIdleSlowEndpointTakesAShortRequest(t *testing.T) {
	b, slow := slowBalancer(t, DefaultPaceConfig())
	var key uint64
	for k := uint64(1); ; k++ {
		if h, _ := b.Home(k); h == slow {
			key = k
			break
		}
	}
	l, err := b.Acquire(Request{Key: key, Keyed: true, Tokens: 500})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l.Endpoint != slow || l.Decision != DecisionHome {
		t.Fatalf("went to %s (%v), want home %s", l.Endpoint, l.Decision, slow)
	}
}

// A fallback, every endpoint over its bound, weighs the slow endpoint's
// load at its pace.
func TestFallbackAvoidsASlowEndpoint(t *testing.T) {
	b, slow := slowBalancer(t, DefaultPaceConfig())
	var leases []Lease
	defer func() {
		for _, l := range leases {
			l.Release()
		}
	}()
	// 30000 tokens on each fast endpoint, 5000 on the slow one: by
	// tokens the slow one is least loaded; at its pace (50000) it is not.
	for _, id := range []string{"a", "b", "c", "d"} {
		w := int64(30000)
		if id == slow {
			w = 5000
		}
		leases = append(leases, b.AcquireOn(Request{Tokens: w}, id, DecisionFallback))
	}
	l, err := b.Acquire(Request{Tokens: 20000})
	if err != nil {
		t.Fatal(err)
	}
	leases = append(leases, l)
	if l.Endpoint == slow {
		t.Fatalf("an unkeyed request went to the slow endpoint at 5000 tokens (50000 at its pace) against 30000")
	}
}

// A request sent to an endpoint that already holds more than P's floor,
// or more than half its KV capacity, measures its queue, not its pace: its
// streamed first token does not count, and a busy endpoint is not taken
// for a slow one. An answer sent whole is timed by its decode, which
// queued prefill barely slows: only memory keeps it from counting. Idle
// again, every answer counts.
func TestBusyEndpointsAnswersDoNotCount(t *testing.T) {
	for _, tc := range []struct {
		busy  string
		whole bool
		count bool
	}{
		{"prefill", false, false},
		{"prefill", true, true},
		{"memory", false, false},
		{"memory", true, false},
		{"", false, true},
		{"", true, true},
	} {
		cfg := DefaultConfig()
		cfg.MinBound = 1 << 20 // so that P's bound takes the busy endpoint's keys too
		b := kvBalancer(t, cfg)
		const hot = "c"
		switch tc.busy {
		case "prefill":
			held := b.AcquireOn(Request{Tokens: quietTokens + 1}, hot, DecisionFallback)
			defer held.Release()
		case "memory": // prefill over (settled), its prompt still held in KV
			held := b.AcquireOn(Request{Tokens: 50001}, hot, DecisionFallback)
			held.Settle()
			defer held.Release()
		}
		answerAll(t, b, hot, 5, func(l Lease, d time.Duration, at time.Time) {
			if tc.whole {
				l.WholeAnswer(d, at)
			} else {
				l.FirstToken(d, at)
			}
		})
		got := b.Pace().Factors()
		if tc.count != (got[hot] >= 9) || len(got) > 1 {
			t.Errorf("busy with %q, whole %v: factors %v, want %s about 10: %v", tc.busy, tc.whole, got, hot, tc.count)
		}
	}
}

// kvBalancer is a balancer of cfg over a, b, c and d, healthy, of KV
// capacity 100000 tokens each.
func kvBalancer(t *testing.T, cfg Config) *Balancer {
	t.Helper()
	b, err := NewBalancer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var eps []Endpoint
	for _, id := range []string{"a", "b", "c", "d"} {
		eps = append(eps, Endpoint{ID: id, Healthy: true, KVCapacity: 100000})
	}
	if err := b.Update(eps); err != nil {
		t.Fatal(err)
	}
	return b
}

// unansweredBalancer is a default balancer over a, b, c and d (KV
// capacity 100000 tokens each) whose leases told it that a, b and c
// answer whole in 1 s (20 answers each, the last at the time it returns).
func unansweredBalancer(t *testing.T) (*Balancer, time.Time) {
	t.Helper()
	b := kvBalancer(t, DefaultConfig())
	at := epoch
	for range 20 {
		for _, id := range []string{"a", "b", "c"} {
			answerOn(b, id, at, time.Second)
			at = at.Add(10 * time.Millisecond)
		}
	}
	return b, at
}

// answerOn sends a 1000-token request to id at time sent and has it
// answered whole after d.
func answerOn(b *Balancer, id string, sent time.Time, d time.Duration) {
	l := b.AcquireOn(Request{Tokens: 1000}, id, DecisionHome)
	l.Sent(sent)
	l.WholeAnswer(d, sent.Add(d))
	l.Release()
}

// tick has the fast endpoints answer at time at, so that Pace looks
// again.
func tick(b *Balancer, at time.Time) {
	for _, id := range []string{"a", "b", "c"} {
		answerOn(b, id, at.Add(-time.Second), time.Second)
	}
}

// An engine so slow that its answers have not come back is found by the
// requests it has not answered: three quiet requests to d, unanswered
// for 4 s where the fleet answers in 1 s, make it slow by 4, more the
// longer they wait; two are not evidence enough; their answers, when
// they come, keep it slow; released unanswered (failed), they are
// forgotten.
func TestPaceUnansweredRequestsFindASlowEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sent  int
		end   string // "answer", "release"
		slowD bool   // d is found slow by its unanswered requests
	}{
		{"three unanswered", 3, "answer", true},
		{"three, released unanswered", 3, "release", true},
		{"two unanswered", 2, "answer", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, t0 := unansweredBalancer(t)
			var ls []Lease
			for i := range tc.sent {
				l := b.AcquireOn(Request{Tokens: 1000}, "d", DecisionHome)
				l.Sent(t0.Add(time.Duration(i) * time.Millisecond))
				l.Sent(t0.Add(time.Hour)) // only the first call counts
				ls = append(ls, l)
			}
			tick(b, t0.Add(2*time.Second))
			if f := b.Pace().Factor("d"); f != 1 {
				t.Fatalf("after 2 s: d's factor %v, want 1 (under 3 times the fleet's 1 s)", f)
			}
			tick(b, t0.Add(4*time.Second))
			f4 := b.Pace().Factor("d")
			tick(b, t0.Add(8*time.Second))
			f8 := b.Pace().Factor("d")
			if !tc.slowD {
				if f4 != 1 || f8 != 1 {
					t.Fatalf("d's factors %v, %v with %d unanswered, want 1", f4, f8, tc.sent)
				}
				return
			}
			if f4 < 3.9 || f4 > 4.1 || f8 < 7.9 || f8 > 8.1 {
				t.Fatalf("d's factor %v after 4 s, %v after 8 s; want 4 and 8, the requests' ages over the fleet's 1 s", f4, f8)
			}
			at := t0.Add(10 * time.Second)
			for _, l := range ls {
				if tc.end == "answer" {
					l.WholeAnswer(at.Sub(t0), at)
				}
				l.Release()
			}
			tick(b, at.Add(20*time.Millisecond))
			f := b.Pace().Factor("d")
			if tc.end == "answer" && (f < 4 || f > 4.8) {
				// Three answers of 10 s against 1 s: 1 + 9 × 3/8 by
				// their geometric mean (their clipped mean, 9 s each,
				// gives 4).
				t.Fatalf("d's factor %v once its 10 s answers came, want about 4.4 (three samples of eight)", f)
			}
			if tc.end == "release" && f != 1 {
				t.Fatalf("d's factor %v once its requests failed, want 1", f)
			}
			if n := unanswered(b.pace, "d"); n != 0 {
				t.Fatalf("%d of d's requests still counted as unanswered", n)
			}
		})
	}
}

// Unanswered requests are no evidence against an endpoint that answers
// within the threshold, where no whole answers give the fleet a
// yardstick, or where they wait for memory; nor once released.
func TestPaceUnansweredRequestsThatDoNotCount(t *testing.T) {
	t.Run("answers within the threshold", func(t *testing.T) {
		b, at := unansweredBalancer(t)
		sendUnanswered(b, "d", Request{Tokens: 1000}, at, 3)
		for i := range 10 {
			answerOn(b, "d", at.Add(8*time.Second+time.Duration(i)*time.Millisecond), 1500*time.Millisecond)
		}
		tick(b, at.Add(10*time.Second))
		if f := b.Pace().Factor("d"); f != 1 {
			t.Fatalf("d's factor %v, want 1: ten answers within the threshold", f)
		}
	})
	t.Run("no whole answers", func(t *testing.T) {
		b, err := NewBalancer(DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SetEndpoints([]string{"a", "b", "c", "d"}); err != nil {
			t.Fatal(err)
		}
		at := epoch
		for range 10 {
			for _, id := range []string{"a", "b", "c"} {
				l := b.AcquireOn(Request{Tokens: 1000}, id, DecisionHome)
				l.Sent(at)
				l.FirstToken(50*time.Millisecond, at.Add(50*time.Millisecond))
				l.Release()
				at = at.Add(10 * time.Millisecond)
			}
		}
		sendUnanswered(b, "d", Request{Tokens: 1000}, at, 3)
		l := b.AcquireOn(Request{Tokens: 1000}, "a", DecisionHome)
		l.FirstToken(50*time.Millisecond, at.Add(10*time.Second))
		if f := b.Pace().Factor("d"); f != 1 {
			t.Fatalf("d's factor %v, want 1: the fleet has streams' first tokens only", f)
		}
	})
	t.Run("waiting for memory", func(t *testing.T) {
		b, at := unansweredBalancer(t)
		held := b.AcquireOn(Request{Tokens: 50001}, "d", DecisionFallback) // over half d's KV
		held.Settle()
		sendUnanswered(b, "d", Request{Tokens: 1000}, at, 3)
		tick(b, at.Add(10*time.Second))
		if f := b.Pace().Factor("d"); f != 1 {
			t.Fatalf("d's factor %v, want 1: its requests were sent to a full cache", f)
		}
		held.Release()
	})
	t.Run("sent after release", func(t *testing.T) {
		b, at := unansweredBalancer(t)
		for range 3 {
			l := b.AcquireOn(Request{Tokens: 1000}, "d", DecisionHome)
			l.Release()
			l.Sent(at)
		}
		tick(b, at.Add(10*time.Second))
		if f, n := b.Pace().Factor("d"), unanswered(b.pace, "d"); f != 1 || n != 0 {
			t.Fatalf("d's factor %v, %d unanswered: want 1 and none", f, n)
		}
	})
}

// sendUnanswered sends n copies of req to id at time at, never answered.
func sendUnanswered(b *Balancer, id string, req Request, at time.Time, n int) {
	for range n {
		b.AcquireOn(req, id, DecisionHome).Sent(at)
	}
}

// unanswered is how many of id's requests p counts as unanswered.
func unanswered(p *Pace, id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.eps[id]; e != nil {
		return len(e.out)
	}
	return 0
}

// heavyTailedAnswers returns 30 minutes of whole answers on endpoints
// e0-e7 at 5 a second, sorted by when they came: each took 2 s times a
// Pareto(1.1) draw of median 1 (capped at 64) times its endpoint's
// slowness (1 unless given).
func heavyTailedAnswers(seed uint64, slow map[string]float64) []struct {
	id string
	d  time.Duration
	at time.Time
} {
	rng := rand.New(rand.NewPCG(seed, 7))
	type answer = struct {
		id string
		d  time.Duration
		at time.Time
	}
	var out []answer
	sent := epoch
	for range 5 * 1800 {
		sent = sent.Add(time.Duration(rng.ExpFloat64() / 5 * float64(time.Second)))
		x := min(64, math.Pow(1-rng.Float64(), -1/1.1)*math.Pow(2, -1/1.1))
		id := string(rune('0' + rng.IntN(8)))
		d := time.Duration(2 * x * cmp.Or(slow[id], 1) * float64(time.Second))
		out = append(out, answer{"e" + id, d, sent.Add(d)})
	}
	slices.SortFunc(out, func(a, b answer) int { return a.at.Compare(b.at) })
	return out
}

// Answers' lengths are heavy-tailed, so an endpoint's latest eight can
// hold one 64 times the median: an even fleet must not read it as slow
// (their plain mean, before stop 45, read seed 0's e3 3.4 times slow
// after 7 minutes; clipped at 12 times the median, not 9, seed 1's e7
// 3.2 times), and an engine ten times slow must still be found among
// such answers.
func TestPaceHeavyTailedWholeAnswers(t *testing.T) {
	for seed := range uint64(3) {
		p := NewPace(DefaultPaceConfig())
		for _, a := range heavyTailedAnswers(seed, nil) {
			p.ObserveWhole(a.id, a.d, a.at)
			if got := p.Factors(); len(got) != 0 {
				t.Fatalf("seed %d: factors %v at %v on an even fleet", seed, got, a.at.Sub(epoch))
			}
		}
		p = NewPace(DefaultPaceConfig())
		var found, checked int
		for _, a := range heavyTailedAnswers(seed, map[string]float64{"3": 10}) {
			p.ObserveWhole(a.id, a.d, a.at)
			if a.at.Sub(epoch) < 2*time.Minute {
				continue
			}
			checked++
			got := p.Factors()
			if len(got) > 1 || len(got) == 1 && got["e3"] == 0 {
				t.Fatalf("seed %d: factors %v at %v, want only e3's", seed, got, a.at.Sub(epoch))
			}
			if f := got["e3"]; f >= 3 {
				found++
			}
		}
		if found < checked*99/100 {
			t.Fatalf("seed %d: e3, ten times slow, found at 5-20 times at %d of %d answers after two minutes", seed, found, checked)
		}
	}
}

// An engine that slows mid-run, after a hundred answers of its own, is
// found after 30 slow ones, by the clipped mean (the geometric mean
// alone took 78: the chaos scenario's engine, slowed mid-run, kept 14 %
// of the requests against 8 %).
func TestPaceFindsAnEngineThatSlowsMidRun(t *testing.T) {
	p := NewPace(DefaultPaceConfig())
	at := epoch
	answer := func(id string, d time.Duration) {
		p.ObserveWhole(id, d, at)
		at = at.Add(10 * time.Millisecond)
	}
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for range 100 {
		for _, id := range ids {
			answer(id, time.Second)
		}
	}
	if got := p.Factors(); len(got) != 0 {
		t.Fatalf("factors %v before d slowed", got)
	}
	for k := 1; k <= 100; k++ {
		for _, id := range ids {
			d := time.Second
			if id == "d" {
				d = 10 * time.Second
			}
			answer(id, d)
		}
		if f := p.Factor("d"); f >= 3 {
			if k > 35 {
				t.Fatalf("d found slow (factor %v) after %d slow answers of its own, want within 35", f, k)
			}
			return
		}
	}
	t.Fatal("d, ten times slow for 100 answers, not found")
}

// Pooled, three replicas' evidence finds a slow endpoint none of them has
// enough samples of alone: each saw 3 of d's answers (8 are needed), 9
// together. A peer's sums fade from when they were heard, as the
// replica's own do; a peer forgotten, or one of an endpoint the replica
// does not route to, counts for nothing.
func TestPacePoolsPeersSums(t *testing.T) {
	reps := make([]*Pace, 3)
	for i := range reps {
		reps[i] = NewPace(DefaultPaceConfig())
		reps[i].Forget([]string{"a", "b", "c", "d"})
	}
	at := epoch
	for range 3 {
		for i, p := range reps {
			for _, id := range []string{"a", "b", "c"} {
				p.ObserveWhole(id, time.Second, at)
				p.ObserveWhole(id, time.Second, at)
				p.ObserveWhole(id, time.Second, at)
			}
			p.ObserveWhole("d", 10*time.Second, at)
			at = at.Add(time.Duration(i+1) * time.Millisecond)
		}
	}
	for i, p := range reps {
		if f := p.Factor("d"); f != 1 {
			t.Fatalf("replica %d alone: d's factor %v, want 1 (3 of its answers, 8 needed)", i, f)
		}
	}
	share := func(at time.Time) {
		for i, p := range reps {
			for j, q := range reps {
				if i != j {
					p.SetPeer(string(rune('0'+j)), q.Sums(at), at)
				}
			}
		}
	}
	share(at)
	for i, p := range reps {
		p.ObserveWhole("a", time.Second, at.Add(20*time.Millisecond)) // look again
		if f := p.Factor("d"); f < 9 || f > 10.5 {
			t.Fatalf("replica %d pooled: d's factor %v, want about 10 (9 answers of 10 s against 1 s)", i, f)
		}
	}
	// Two minutes on, with a, b and c answering: the pooled sums of d
	// have faded under the samples needed, and d's factor with them.
	later := at.Add(2 * time.Minute)
	for _, id := range []string{"a", "b", "c"} {
		for k := range 10 {
			reps[0].ObserveWhole(id, time.Second, later.Add(time.Duration(k)*time.Millisecond))
		}
	}
	if f := reps[0].Factor("d"); f > 1.5 {
		t.Fatalf("two minutes on: d's factor %v, want near 1 (its 9 answers faded to under one)", f)
	}
	// Forgetting its peers takes their sums out at once: replica 1 is
	// left with its own 3 answers of d, read in proportion to the 8
	// needed, as a slow endpoint's fading evidence is (1 + 9 × 3/8).
	reps[1].SetPeer("0", nil, at)
	reps[1].SetPeer("2", nil, at)
	reps[1].ObserveWhole("a", time.Second, at.Add(40*time.Millisecond))
	if f := reps[1].Factor("d"); f < 4 || f > 4.8 {
		t.Fatalf("peers forgotten: d's factor %v, want about 4.4 (its own 3 answers of 8)", f)
	}
	// A peer not heard for ten half-lives is forgotten: replica 2 last
	// heard its peers at the start.
	reps[2].ObserveWhole("a", time.Second, at.Add(10*DefaultPaceConfig().HalfLife+time.Second))
	if peers := reps[2].PeerNodes(); len(peers) != 0 {
		t.Fatalf("peers %v still held after ten half-lives of silence", peers)
	}
	// A peer's endpoint this replica does not route to is not taken in.
	q := NewPace(DefaultPaceConfig())
	q.Forget([]string{"a", "b", "c"})
	q.SetPeer("x", map[string]PaceSums{"e": {}}, at)
	q.mu.Lock()
	_, has := q.eps["e"]
	q.mu.Unlock()
	if has {
		t.Fatal("a peer's sums made an entry for an endpoint the replica does not route to")
	}
}
