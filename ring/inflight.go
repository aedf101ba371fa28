package ring

import (
	"sync"
	"sync/atomic"
	"time"
)

// Inflight counts this replica's in-flight load per endpoint (P, in the
// balancer's [Signal] unit), the KV tokens its requests hold there (K, see
// [Inflight.KV]) and its in-flight requests. It implements [Loads] (P). Counters live outside the ring snapshots, so an
// endpoint-set rebuild never resets or double-counts them.
type Inflight struct {
	mu       sync.Mutex                          // serializes Track
	counters atomic.Pointer[map[string]*counter] // copy-on-write
	total    atomic.Int64
	kvTotal  atomic.Int64
	// sharedTotal is the part of kvTotal that is groups' shared parts.
	sharedTotal atomic.Int64
}

type counter struct {
	n       atomic.Int64 // load (P)
	reqs    atomic.Int64 // requests
	kv      atomic.Int64 // KV tokens held (K)
	shared  atomic.Int64 // the part of kv that is groups' shared parts
	total   *atomic.Int64
	kvTotal *atomic.Int64
	// sharedTotal is the Inflight's, as total and kvTotal are.
	sharedTotal *atomic.Int64
	mu          sync.Mutex            // guards groups
	groups      map[uint64]groupCount // per group with a shared part in flight
}

// groupCount is one group's hold on an endpoint's K: its requests in
// flight there, and the shared part that the first of them added, which
// the last to leave removes. Requests of one group may estimate the part
// differently, so removing the last one's own estimate would leave K off
// by the difference for good.
type groupCount struct {
	reqs   int
	shared int64
}

// NewInflight returns counters with no endpoints.
func NewInflight() *Inflight {
	f := &Inflight{}
	m := map[string]*counter{}
	f.counters.Store(&m)
	return f
}

// Requests returns the in-flight requests on endpoint id.
func (f *Inflight) Requests(id string) int64 {
	if c := (*f.counters.Load())[id]; c != nil {
		return c.reqs.Load()
	}
	return 0
}

// Load returns the in-flight load on endpoint id.
func (f *Inflight) Load(id string) int64 {
	if c := (*f.counters.Load())[id]; c != nil {
		return c.n.Load()
	}
	return 0
}

// Total returns the in-flight load on all endpoints, including endpoints
// that left the set while requests to them were still running.
func (f *Inflight) Total() int64 { return f.total.Load() }

// Counts returns a copy of the non-zero loads, for gossip and debugging.
func (f *Inflight) Counts() map[string]int64 {
	return f.nonZero(func(c *counter) int64 { return c.n.Load() })
}

// nonZero returns each endpoint's value of count where it is not zero.
func (f *Inflight) nonZero(count func(*counter) int64) map[string]int64 {
	out := map[string]int64{}
	for id, c := range *f.counters.Load() {
		if n := count(c); n != 0 {
			out[id] = n
		}
	}
	return out
}

// Track makes the counters cover ids. Counters of endpoints that left are
// kept while they still count requests, so their leases release into the
// same counter; idle ones are dropped.
func (f *Inflight) Track(ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := *f.counters.Load()
	m := make(map[string]*counter, len(ids))
	for id, c := range old {
		if c.n.Load() != 0 || c.reqs.Load() != 0 || c.kv.Load() != 0 {
			m[id] = c
		}
	}
	for _, id := range ids {
		if c := old[id]; c != nil {
			m[id] = c
		} else {
			m[id] = f.newCounter()
		}
	}
	f.counters.Store(&m)
}

func (f *Inflight) newCounter() *counter {
	return &counter{total: &f.total, kvTotal: &f.kvTotal, sharedTotal: &f.sharedTotal}
}

// acquire counts a request of P weight w and K weights kv on id and
// returns its hold, settling to settle. An id that is not tracked gets a
// counter of its own: the request is counted in the totals and released
// exactly once, though Load does not see it.
func (f *Inflight) acquire(id string, w, settle int64, kv kvHold) *hold {
	c := (*f.counters.Load())[id]
	if c == nil {
		c = f.newCounter()
	}
	c.add(w)
	c.reqs.Add(1)
	c.addKV(kv.own, kv.group, kv.shared)
	h := &hold{c: c, settle: min(settle, w), kv: kv}
	h.w.Store(w)
	return h
}

// kvHold is a lease's K: its own part, and its group's shared part.
type kvHold struct {
	own    int64
	group  uint64
	shared int64
}

func (c *counter) add(d int64) {
	c.n.Add(d)
	c.total.Add(d)
}

// Lease is one request's hold on an endpoint. Release it when the request
// ends. A Lease is a small value that may be copied freely: all copies share
// one hold, and the first Release of any of them gives the slot back; the
// others do nothing.
type Lease struct {
	// Endpoint is the ID of the endpoint the request goes to.
	Endpoint string
	// Decision says why.
	Decision Decision
	h        *hold
}

// hold is one lease's claim on a counter, shared by every copy of the Lease.
type hold struct {
	c      *counter
	w      atomic.Int64 // the weight counted now; -1 once released
	settle int64        // the weight after Settle
	kv     kvHold       // counted in K until Release
	pace   *Pace        // told the answer's time (nil: nobody)
	quiet  quietness    // what the endpoint held when it was picked
	tokens int64        // what the pick weighed the prompt at, in tokens
	timed  atomic.Bool  // an answer was timed (FirstToken, WholeAnswer)
	out    atomic.Bool  // counted among the endpoint's unanswered requests (Sent)
}

// Settle lowers the lease's weight to what a request weighs once its
// prefill is over (its first byte came back): see [Signal]. Under
// [SignalRequests] it changes nothing. It is idempotent, safe to call
// concurrently with Release, and does nothing after it.
func (l Lease) Settle() {
	if l.h == nil {
		return
	}
	for {
		w := l.h.w.Load()
		if w <= l.h.settle { // settled, or released (-1)
			return
		}
		if l.h.w.CompareAndSwap(w, l.h.settle) {
			l.h.c.add(l.h.settle - w)
			return
		}
	}
}

// Sent tells the balancer that the request went to its endpoint at time
// at (the clock FirstToken and WholeAnswer are told by). Until it is
// answered or released, a request sent to an endpoint with room in its
// KV cache is evidence of the endpoint's pace by its age: an endpoint so
// slow that its answers have not come back yet is found by the requests
// it has not answered (see [Pace.update]). Only the first call on a lease
// and its copies counts.
func (l Lease) Sent(at time.Time) {
	if l.h == nil || l.h.pace == nil || l.h.quiet == busyMemory || l.h.out.Swap(true) {
		return
	}
	l.h.pace.sent(l.Endpoint, l.h, at)
}

// answer takes the lease out of its endpoint's unanswered requests and,
// with count, tells its pace a sample of kind ch: one lock of the pace's
// for both.
func (l Lease) answer(count bool, ch int, weight float64, d time.Duration, at time.Time) {
	var h *hold
	if l.h.out.Load() && l.h.out.CompareAndSwap(true, false) {
		h = l.h
	}
	if h != nil || count {
		l.h.pace.answer(l.Endpoint, h, count, ch, weight, d, at)
	}
}

// FirstToken tells the balancer that the request's streamed answer began
// after ttft, at time at: its first byte is its first token, and the
// balancer's [Pace] compares endpoints by it. Only the first call of
// FirstToken or WholeAnswer on a lease and its copies counts.
func (l Lease) FirstToken(ttft time.Duration, at time.Time) {
	if l.h == nil || l.h.pace == nil || l.h.timed.Swap(true) {
		return
	}
	l.answer(l.h.quiet == quiet, streamed, l.h.pace.streamWeight(l.h.tokens), ttft, at)
}

// WholeAnswer tells the balancer that the request's answer, sent whole
// (not streamed), came after d, at time at: [Pace] compares endpoints'
// whole answers apart from their streams' first tokens. Tell it answers
// only, not errors.
func (l Lease) WholeAnswer(d time.Duration, at time.Time) {
	if l.h == nil || l.h.pace == nil || l.h.timed.Swap(true) {
		return
	}
	l.answer(l.h.quiet != busyMemory, whole, 1, d, at)
}

// Weight is what the lease counts now (0 once released).
func (l Lease) Weight() int64 {
	if l.h == nil {
		return 0
	}
	return max(l.h.w.Load(), 0)
}

// Release gives the endpoint's slot back. It is idempotent across the Lease
// and all its copies, and safe to call concurrently.
func (l Lease) Release() {
	if l.h == nil {
		return
	}
	if w := l.h.w.Swap(-1); w >= 0 {
		l.h.c.add(-w)
		l.h.c.reqs.Add(-1)
		l.h.c.releaseKV(l.h.kv.own, l.h.kv.group, l.h.kv.shared)
	}
	if l.h.pace != nil {
		l.answer(false, 0, 0, 0, time.Time{}) // ended unanswered
	}
}
