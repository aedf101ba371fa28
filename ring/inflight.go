package ring

import (
	"sync"
	"sync/atomic"
)

// Inflight counts this replica's in-flight requests per endpoint. It
// implements [Loads]. Counters live outside the ring snapshots, so an
// endpoint-set rebuild never resets or double-counts them.
type Inflight struct {
	mu       sync.Mutex                          // serializes Track
	counters atomic.Pointer[map[string]*counter] // copy-on-write
	total    atomic.Int64
}

type counter struct {
	n     atomic.Int64
	total *atomic.Int64
}

// NewInflight returns counters with no endpoints.
func NewInflight() *Inflight {
	f := &Inflight{}
	m := map[string]*counter{}
	f.counters.Store(&m)
	return f
}

// Load returns the in-flight requests on endpoint id.
func (f *Inflight) Load(id string) int64 {
	if c := (*f.counters.Load())[id]; c != nil {
		return c.n.Load()
	}
	return 0
}

// Total returns the in-flight requests on all endpoints, including endpoints
// that left the set while requests to them were still running.
func (f *Inflight) Total() int64 { return f.total.Load() }

// Counts returns a copy of the non-zero counts, for gossip and debugging.
func (f *Inflight) Counts() map[string]int64 {
	out := map[string]int64{}
	for id, c := range *f.counters.Load() {
		if n := c.n.Load(); n != 0 {
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
		if c.n.Load() != 0 {
			m[id] = c
		}
	}
	for _, id := range ids {
		if c := old[id]; c != nil {
			m[id] = c
		} else {
			m[id] = &counter{total: &f.total}
		}
	}
	f.counters.Store(&m)
}

// acquire counts one request on id and returns its counter. An id that is
// not tracked gets a counter of its own: the request is counted in the total
// and released exactly once, though Load does not see it.
func (f *Inflight) acquire(id string) *counter {
	c := (*f.counters.Load())[id]
	if c == nil {
		c = &counter{total: &f.total}
	}
	c.n.Add(1)
	f.total.Add(1)
	return c
}

func (c *counter) release() {
	c.n.Add(-1)
	c.total.Add(-1)
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
	c        *counter
	released atomic.Bool
}

// Release gives the endpoint's slot back. It is idempotent across the Lease
// and all its copies, and safe to call concurrently.
func (l Lease) Release() {
	if l.h != nil && l.h.released.CompareAndSwap(false, true) {
		l.h.c.release()
	}
}
