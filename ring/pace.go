package ring

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// An engine much slower than the rest (a throttled GPU, a noisy
// neighbour, a smaller card in the pool) answers its keys' requests that
// many times later. P alone does not steer away from it while the fleet
// is lightly loaded: the slow engine's queued prefill grows with its
// slowness, but stays under P's floor (16384 tokens) long before its
// requests take ten times as long. A count of requests in flight
// (HAProxy's CHWBL) does steer, by the requests its slowness keeps in
// flight, but only as far as c·average allows.
//
// Pace measures it directly. Each replica times its own answers per
// endpoint, those of requests that found the endpoint quiet (State.quiet:
// a busy engine is slow because it is busy, which the bound already
// weighs; counted, its answers made an even fleet's hot engines read as
// slow in the demo's memory-bound waves): a streamed answer's time to
// first token against the prompt tokens the pick weighed it at (a home's
// turn its new tokens), and an answer sent whole by its time (see
// [Pace.update] for how the two are compared). An endpoint at least [PaceConfig.Threshold] times slower
// than the fleet's median is slow by a factor f, and the bound reads its
// P as f·(P + overhead) − overhead (State.paced): a ten-times-slow engine
// reaches the bound at a tenth of the prefill, and a cached turn does not
// stay at a slow home for its history's sake, so its keys spill to their
// next candidates unless it is nearly idle. An engine within the
// threshold, as every engine of an even fleet is below overload, is
// bounded as before.
//
// An engine so slow that its answers have not come back yet (a ten-times
// slow engine's whole answers take a minute where the fleet's take
// seconds) is found by the requests it has not answered: each lease tells
// when it was sent ([Lease.Sent]), and an endpoint's unanswered requests,
// once they have waited Threshold times the fleet's median answer, are
// evidence as their answers would be (see [Pace.update]). Before stop 44
// only answers counted, and such an engine took its keys' requests for a
// minute before its first answer told that it was slow.
//
// The evidence fades with time ([PaceConfig.HalfLife]). An engine whose
// keys spilled away gets few samples; as its evidence falls under
// [PaceConfig.MinSamples] its factor shrinks, its keys come back a few at
// a time, and it is measured again: a slow engine is retried as Envoy's
// outlier detection retries an ejected host, and one that recovered is
// seen to.
//
// Each replica measures its own requests and, with gossip, pools its
// peers' evidence with its own ([Pace.Sums] is what it publishes,
// [Pace.SetPeer] what it heard): with three replicas each saw a third of
// a slow engine's answers, and needed MinSamples of its own. Its
// unanswered requests count for it alone. Replicas can still disagree on
// an engine's factor near the threshold, by what each heard last; a
// ten-times-slow engine is far from it on every replica.

// PaceConfig configures [Pace]. The zero value turns it off.
type PaceConfig struct {
	// Threshold is how many times the fleet's median time (per token of a
	// stream's first token, per whole answer) an endpoint must take
	// before its P is counted at its pace; 0 turns Pace off, else at
	// least 1.5.
	Threshold float64
	// HalfLife is how fast old samples fade; > 0 where Threshold is set.
	HalfLife time.Duration
	// MinSamples is the (faded) count of samples an endpoint needs to be
	// compared; > 0 where Threshold is set.
	MinSamples float64
	// Overhead is the tokens a request's fixed cost (an engine step,
	// the network) is worth: a sample counts tokens + Overhead, so that
	// cached turns of few new tokens are not read as slow.
	Overhead int64
	// Max caps a factor.
	Max float64
}

// DefaultPaceConfig returns Pace's defaults: an endpoint three times the
// median's time per token is slow (an even fleet's homes, loaded
// differently by hashing, stay well under it: docs/routing.md, "Slow
// engines"), samples fade with a half-life of 30 s (10 s, stop 43's,
// let a slow engine's keys come back in waves: docs/study.md, "A slow
// engine"), 8 are needed, a
// request's fixed cost is worth 256 tokens (about one step: Llama-3.1-8B
// on an H100 decodes a step in 7-9 ms and prefills 8192 tokens in about
// 246 ms, 256 in about 8: ../shared/calibration), and a factor is at most
// 32.
func DefaultPaceConfig() PaceConfig {
	return PaceConfig{Threshold: 3, HalfLife: 30 * time.Second, MinSamples: 8, Overhead: 256, Max: 32}
}

// WithThreshold is c with threshold t, as serve's --pace-threshold sets
// it: 0 turns Pace off; any other t keeps Max at least t.
func (c PaceConfig) WithThreshold(t float64) PaceConfig {
	if t == 0 {
		return PaceConfig{}
	}
	c.Threshold, c.Max = t, max(c.Max, t)
	return c
}

// Validate reports a configuration Pace cannot use.
func (c PaceConfig) Validate() error {
	if c.Threshold == 0 {
		return nil
	}
	switch {
	case !(c.Threshold >= 1.5) || math.IsInf(c.Threshold, 0):
		return fmt.Errorf("ring: pace threshold %v must be 0 (off) or at least 1.5", c.Threshold)
	case c.HalfLife <= 0:
		return fmt.Errorf("ring: pace half-life %v must be positive", c.HalfLife)
	case !(c.MinSamples > 0) || math.IsInf(c.MinSamples, 0):
		return fmt.Errorf("ring: pace min samples %v must be positive", c.MinSamples)
	case c.Overhead < 0:
		return fmt.Errorf("ring: pace overhead %d must be >= 0", c.Overhead)
	case !(c.Max >= c.Threshold) || math.IsInf(c.Max, 0):
		return fmt.Errorf("ring: pace max %v must be at least the threshold %v", c.Max, c.Threshold)
	}
	return nil
}

// Pace is one replica's measure of its endpoints' pace. It reads no
// clock: each sample carries its time. Safe for concurrent use; picks
// read its factors without a lock.
type Pace struct {
	cfg     PaceConfig
	mu      sync.Mutex
	eps     map[string]*paceEndpoint
	updated time.Time // the factors' time
	// wholeMed is the fleet's median whole answer, in seconds, as of
	// updated (0: none yet): what a whole answer is clipped by
	// (paceClip) and unanswered requests' ages are read against.
	wholeMed float64
	factors  atomic.Pointer[map[string]float64] // the slow endpoints' factors; nil or empty: none
	// peers are the other replicas' published sums, by node: pooled
	// with this replica's own, each replica judges an endpoint by every
	// replica's answers, as HAProxy's count of requests in flight is
	// every replica's.
	peers map[string]pacePeer
	known map[string]bool // the endpoints, as Forget last set them; nil: any
}

// paceRecompute is how often, in the samples' time, the factors are
// recomputed: each recomputation reads every endpoint and sorts, which a
// large fleet's replica would otherwise do at every answer
// (BenchmarkPaceObserve).
const paceRecompute = 10 * time.Millisecond

// Two kinds of samples are compared apart, each against its own median:
// a streamed answer's time to first token per prompt token (its first
// byte is its first token), and an answer sent whole's time per answer
// (its first byte comes when the whole answer is written, after a decode
// as long as the answer, which does not depend on the endpoint: keys
// hash evenly, so every endpoint's answers are alike in length).
//
// Alike in their spread, not in their few latest samples: answers'
// lengths are heavy-tailed (one of 8000 tokens among answers of 128),
// and one such answer among an endpoint's eight samples put its mean at
// eight times the fleet's median, slow by pace. So whole answers are
// read two ways, each against its own median, and an endpoint is slow by
// the larger:
//   - whole: their mean, each answer counted for at most paceClip times
//     the threshold times the fleet's median whole answer (nine times
//     it, at the default threshold), so that one long answer among
//     eight brings their mean to at most twice the median, under the
//     threshold; an engine that slows mid-run, all of its answers late
//     from then, is found as soon as by the plain mean, but its factor
//     stops near nine;
//   - wholeGeo: their geometric mean (the faded mean of their logs): a
//     slower engine multiplies every answer's time, which shifts the
//     log mean by the log of its factor whatever the answers' lengths,
//     and one answer 64 times the median moves eight samples' geometric
//     mean 1.7 times; it gives a slow engine its whole factor, but moves
//     slowly when an engine slows after many fast answers (after 75, it
//     needs about twice as many slow ones as the mean to read three
//     times slow).
//
// Either alone lost somewhere the other won (docs/study.md, "Heavy-tailed
// answers (stop 45)"). A streamed sample is per prompt token, which the
// pick knows, so its answers' lengths do not enter it.
const (
	streamed = iota
	whole
	wholeGeo
	channels
)

// paceSums are one endpoint's faded sums of one kind of sample, as of
// at: the seconds they took (for wholeGeo, the log of each answer's
// seconds), what they weigh (tokens plus the overhead
// for streamed ones, 1 for whole answers), and their count.
type paceSums struct {
	seconds, weight, n float64
	at                 time.Time
	// slow: the endpoint was found slow on this kind with MinSamples
	// samples, and its factor has not yet faded back to 1.
	slow bool
}

// paceEndpoint is what Pace knows of one endpoint: its faded sums per
// kind of sample, and its requests not yet answered (those sent while it
// had room in its KV cache: see [Lease.Sent]), by when they were sent.
type paceEndpoint struct {
	ch  [channels]paceSums
	out map[*hold]time.Time
	// pool is ch with the peers' sums added (see [Pace.SetPeer]), as of
	// the last update: what the factors are read from. ch keeps the
	// slow flags.
	pool [channels]paceSums
}

// PaceSample is one kind of a replica's faded evidence of one endpoint:
// the seconds its samples took (for whole answers' geometric mean, the
// sum of their logs), what they weigh, and their count.
type PaceSample struct{ Seconds, Weight, N float64 }

// PaceSums is a replica's faded evidence of one endpoint, per kind of
// sample (indexed by PaceStreamed, PaceWhole, PaceWholeLogs), as it
// publishes it for its peers ([Pace.Sums], [Pace.SetPeer]).
type PaceSums [channels]PaceSample

// The kinds of sample in a [PaceSums].
const (
	PaceStreamed  = streamed
	PaceWhole     = whole
	PaceWholeLogs = wholeGeo
)

// PacePublishEvery is how often a replica sends its pace sums to its
// peers: the evidence fades over PaceConfig.HalfLife (30 s), so a second's
// lag costs little, and the sums, nine numbers an endpoint, are not sent
// at the loads' 10 ms.
const PacePublishEvery = time.Second

// paceForgetPeer is how many half-lives after a peer was last heard its
// sums are dropped: they weigh under a thousandth by then.
const paceForgetPeer = 10

// pacePeer is a peer replica's published sums and when they were heard.
type pacePeer struct {
	sums  map[string]PaceSums
	heard time.Time
}

// paceClip is how many times the threshold over the fleet's median whole
// answer one whole answer counts for at most in the whole channel's mean
// (see the channels above).
const paceClip = 3

// paceOverdue is how many unanswered requests an endpoint needs before
// their ages count (see [Pace.update]).
const paceOverdue = 3

// NewPace returns a Pace; nil when cfg turns it off.
func NewPace(cfg PaceConfig) *Pace {
	if cfg.Threshold == 0 {
		return nil
	}
	return &Pace{cfg: cfg, eps: map[string]*paceEndpoint{}}
}

// fade brings s's sums to time at.
func (s *paceSums) fade(at time.Time, halfLife time.Duration) {
	if dt := at.Sub(s.at); dt > 0 {
		k := math.Exp2(-float64(dt) / float64(halfLife))
		s.seconds, s.weight, s.n = s.seconds*k, s.weight*k, s.n*k
	}
	if at.After(s.at) {
		s.at = at
	}
}

// Observe records that a streamed request to endpoint id, weighed at
// tokens by its pick, had its first token after ttft, at time at; and
// updates the factors.
func (p *Pace) Observe(id string, tokens int64, ttft time.Duration, at time.Time) {
	if p != nil {
		p.answer(id, nil, true, streamed, p.streamWeight(tokens), ttft, at)
	}
}

// ObserveWhole records that endpoint id sent a whole answer after d, at
// time at; and updates the factors.
func (p *Pace) ObserveWhole(id string, d time.Duration, at time.Time) {
	if p != nil {
		p.answer(id, nil, true, whole, 1, d, at)
	}
}

// streamWeight is what a streamed sample of a prompt weighed at tokens
// weighs: its tokens and a request's fixed cost.
func (p *Pace) streamWeight(tokens int64) float64 {
	return float64(max(tokens, 0) + p.cfg.Overhead)
}

// answer, under one lock, takes h (nil: none) out of endpoint id's
// unanswered requests and, with count, records a sample of kind ch
// weighing weight that took d, at time at, and updates the factors.
func (p *Pace) answer(id string, h *hold, count bool, ch int, weight float64, d time.Duration, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h != nil {
		if e := p.eps[id]; e != nil {
			delete(e.out, h)
		}
	}
	if !count || d < 0 {
		return
	}
	e := p.endpoint(id, at)
	s := &e.ch[ch]
	s.fade(at, p.cfg.HalfLife)
	sec := d.Seconds()
	if ch == whole {
		g := &e.ch[wholeGeo]
		g.fade(at, p.cfg.HalfLife)
		g.seconds += math.Log(max(sec, minWholeAnswer))
		g.weight += weight
		g.n++
		if p.wholeMed > 0 {
			sec = min(sec, paceClip*p.cfg.Threshold*p.wholeMed)
		}
	}
	s.seconds += sec
	s.weight += weight
	s.n++
	p.recompute(at)
}

// minWholeAnswer is the least time, in seconds, a whole answer counts
// for in the geometric mean: about an engine step, so that an answer
// timed at 0 does not take the log of 0.
const minWholeAnswer = 1e-3

// pace is the sums' time per unit of weight: per prompt token for
// streams, per answer for whole answers (their geometric mean for
// wholeGeo, whose sums are of logs).
func (s *paceSums) pace(ch int) float64 {
	if ch == wholeGeo {
		return math.Exp(s.seconds / s.weight)
	}
	return s.seconds / s.weight
}

// endpoint returns id's entry, made at time at if new; p.mu must be held.
func (p *Pace) endpoint(id string, at time.Time) *paceEndpoint {
	e := p.eps[id]
	if e == nil {
		e = &paceEndpoint{}
		for c := range e.ch {
			e.ch[c].at = at
		}
		p.eps[id] = e
	}
	return e
}

// recompute updates the factors at time at, at most every paceRecompute
// of the samples' time; p.mu must be held.
func (p *Pace) recompute(at time.Time) {
	if at.Sub(p.updated) >= paceRecompute || at.Before(p.updated) {
		p.update(at)
		p.updated = at
	}
}

// sent records that h, a request to endpoint id, was sent at time at; it
// counts until [Pace.answer] takes it out (see [Lease.Sent]).
func (p *Pace) sent(id string, h *hold, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.w.Load() < 0 || h.timed.Load() {
		return // released or answered while Sent was on its way here
	}
	e := p.endpoint(id, at)
	if e.out == nil {
		e.out = map[*hold]time.Time{}
	}
	e.out[h] = at
	p.recompute(at)
}

// Sums returns this replica's own evidence, faded to at, for its peers:
// the endpoints it has samples of.
func (p *Pace) Sums(at time.Time) map[string]PaceSums {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]PaceSums, len(p.eps))
	for id, e := range p.eps {
		var ps PaceSums
		has := false
		for c := range e.ch {
			sc := e.ch[c]
			sc.fade(at, p.cfg.HalfLife)
			ps[c] = PaceSample{sc.seconds, sc.weight, sc.n}
			has = has || sc.n > 0
		}
		if has {
			out[id] = ps
		}
	}
	return out
}

// SetPeer replaces what peer node published, heard at time heard (nil
// sums: forget the peer); its sums fade from then as this replica's own.
func (p *Pace) SetPeer(node string, sums map[string]PaceSums, heard time.Time) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if sums == nil {
		delete(p.peers, node)
		return
	}
	if p.peers == nil {
		p.peers = map[string]pacePeer{}
	}
	p.peers[node] = pacePeer{sums, heard}
	for id := range sums {
		if p.known == nil || p.known[id] {
			p.endpoint(id, heard)
		}
	}
}

// PeerNodes returns the peers whose sums are pooled, sorted.
func (p *Pace) PeerNodes() []string {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.peers))
	for n := range p.peers {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// PeerSums returns what peer node last published (nil: nothing).
func (p *Pace) PeerSums(node string) map[string]PaceSums {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peers[node].sums
}

// Forget drops the endpoints not in ids.
func (p *Pace) Forget(ids []string) {
	if p == nil {
		return
	}
	keep := make(map[string]bool, len(ids))
	for _, id := range ids {
		keep[id] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.known = keep
	for id := range p.eps {
		if !keep[id] {
			delete(p.eps, id)
		}
	}
	p.update(time.Time{})
}

// update recomputes the factors at time at (zero: without fading); p.mu
// must be held. Per kind of sample, the yardstick is the lower median of
// the endpoints with at least MinSamples (faded) samples, where at least
// three have them: with two, neither can be told the slow one. An
// endpoint whose rate is at least Threshold times it is slow, once it has
// MinSamples samples, by a factor f of its rate over the median (at most
// Max), taken in full while it has MinSamples samples and in proportion
// below that: as a slow endpoint's evidence fades (its keys spilled
// away), its factor falls back to 1 by degrees, so its keys return a few
// at a time and measure it again. Its factor is the larger of its two
// kinds'.
//
// An endpoint's answers can be too slow to count in time: a ten-times
// slow engine's whole answers take a minute where the fleet's take
// seconds, and its keys' requests pile up there meanwhile. So where the
// fleet's whole answers have a median, an endpoint that has not shown
// itself within the threshold (fewer than MinSamples samples of either
// kind, or found slow) is also judged by its requests not yet answered
// (those sent while it had room in its KV cache: one waiting for memory
// times the fleet's load): with at least paceOverdue of them, whose lower
// median age is at least Threshold times the median whole answer, it is
// slow by that age over the median. An age is less than the answer's
// time will be, so this factor only grows until the answers come, and
// those answers then count from the first as a slow endpoint's do (in
// proportion to MinSamples). An even fleet's endpoints, answering, have
// their samples and are never judged by their ages.
func (p *Pace) update(at time.Time) {
	var next map[string]float64
	slow := func(id string, g float64) {
		if next == nil {
			next = map[string]float64{}
		}
		next[id] = max(next[id], g)
	}
	p.wholeMed = 0 // the yardstick of unanswered requests' ages
	p.pool(at)
	rs := make([]float64, 0, len(p.eps))
	for ch := range channels {
		rs = rs[:0]
		for _, e := range p.eps {
			if s := &e.pool[ch]; s.n >= p.cfg.MinSamples && s.weight > 0 {
				rs = append(rs, s.pace(ch))
			}
		}
		if len(rs) < 3 {
			continue
		}
		// The lower median: with half the fleet slow, the fast half is
		// the yardstick.
		slices.Sort(rs)
		med := rs[(len(rs)-1)/2]
		if med <= 0 {
			continue
		}
		if ch == whole {
			p.wholeMed = med
		}
		for id, e := range p.eps {
			s, v := &e.ch[ch], &e.pool[ch]
			if v.n <= 0 || v.weight <= 0 {
				continue
			}
			f := v.pace(ch) / med
			switch {
			case f < p.cfg.Threshold:
				s.slow = false
			case v.n >= p.cfg.MinSamples:
				s.slow = true
			}
			if !s.slow {
				// Fewer than MinSamples samples of an endpoint not yet
				// found slow (a new one, or one's first requests after
				// a cold start) are not evidence enough.
				continue
			}
			g := 1 + (min(f, p.cfg.Max)-1)*min(1, v.n/p.cfg.MinSamples)
			if g < 1+1.0/64 {
				s.slow = false // faded: measured afresh from here
				continue
			}
			slow(id, g)
		}
	}
	if now := cmp.Or(at, p.updated); p.wholeMed > 0 && !now.IsZero() {
		for id, e := range p.eps {
			if len(e.out) < paceOverdue || e.answers(p.cfg.MinSamples) {
				continue
			}
			rs = rs[:0]
			for _, sent := range e.out {
				rs = append(rs, now.Sub(sent).Seconds())
			}
			slices.Sort(rs)
			if f := rs[(len(rs)-1)/2] / p.wholeMed; f >= p.cfg.Threshold {
				slow(id, min(f, p.cfg.Max))
				// Found slow: its first answers, when they come, count
				// in proportion, as a slow endpoint's fading evidence
				// does, unless they show it within the threshold.
				for c := range e.ch {
					e.ch[c].slow = true
				}
			}
		}
	}
	p.factors.Store(&next)
}

// answers reports whether e has shown itself within the threshold: at
// least need samples of a kind, not found slow.
func (e *paceEndpoint) answers(need float64) bool {
	for c, s := range e.pool {
		if s.n >= need && !e.ch[c].slow {
			return true
		}
	}
	return false
}

// pool fades every endpoint's own sums to at (zero: not at all) and sets
// its pool: them and the peers' sums, each faded from when it was heard.
func (p *Pace) pool(at time.Time) {
	for _, e := range p.eps {
		for c := range e.ch {
			if !at.IsZero() {
				e.ch[c].fade(at, p.cfg.HalfLife)
			}
			e.pool[c] = paceSums{seconds: e.ch[c].seconds, weight: e.ch[c].weight, n: e.ch[c].n}
		}
	}
	for node, peer := range p.peers {
		k := 1.0
		if dt := at.Sub(peer.heard); !at.IsZero() && dt > 0 {
			if dt > paceForgetPeer*p.cfg.HalfLife {
				// Faded to nothing (a replica that left, or a pod of a
				// past rollout): forgotten, so churn does not grow the map.
				delete(p.peers, node)
				continue
			}
			k = math.Exp2(-float64(dt) / float64(p.cfg.HalfLife))
		}
		for id, ps := range peer.sums {
			e := p.eps[id]
			if e == nil {
				continue
			}
			for c := range ps {
				e.pool[c].seconds += k * ps[c].Seconds
				e.pool[c].weight += k * ps[c].Weight
				e.pool[c].n += k * ps[c].N
			}
		}
	}
}

// Factor returns how many times over the bound counts endpoint id's P: 1
// unless it is slow.
func (p *Pace) Factor(id string) float64 {
	if p == nil {
		return 1
	}
	if m := p.factors.Load(); m != nil {
		if f, ok := (*m)[id]; ok {
			return f
		}
	}
	return 1
}

// Factors returns a copy of the slow endpoints' factors, for /debug and
// metrics.
func (p *Pace) Factors() map[string]float64 {
	out := map[string]float64{}
	if p == nil {
		return out
	}
	if m := p.factors.Load(); m != nil {
		for id, f := range *m {
			out[id] = f
		}
	}
	return out
}
