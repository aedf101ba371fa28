package upstream

import (
	"fmt"
	"time"
)

// A 5xx is evidence against an endpoint only if the request itself is
// sound. A request that every engine answers with 500 (a poison prompt)
// would otherwise eject the fleet one engine at a time: affinity sends each
// of its retries to the same engine until it is out, then to the next. So a
// 5xx counts once per request (its fingerprint) and endpoint, and a request
// that a second endpoint also answers with 5xx is the request's fault: its
// failures count against no endpoint, the first one's withdrawn (and an
// ejection that rested on it undone). A request that another endpoint then
// serves leaves the first one's failure counted: that endpoint failed what
// another could do.

// faultWindow is how long a request's 5xx is remembered; faultCap bounds
// how many are.
const (
	faultWindow = 5 * time.Minute
	faultCap    = 4096
)

// fault is one request's 5xx history: the first endpoint that answered it
// with 5xx, and whether another did too (poison).
type fault struct {
	first  string
	poison bool
	at     time.Time
}

// faultLedger remembers the latest faulted requests, oldest first out.
type faultLedger struct {
	byKey map[uint64]*fault
	order []uint64
}

// get returns request key's fault, forgetting those older than the window
// or beyond the cap first.
func (l *faultLedger) get(key uint64, now time.Time) *fault {
	for len(l.order) > 0 {
		k := l.order[0]
		f := l.byKey[k]
		if len(l.order) <= faultCap && now.Sub(f.at) < faultWindow {
			break
		}
		delete(l.byKey, k)
		l.order = l.order[1:]
	}
	return l.byKey[key]
}

func (l *faultLedger) add(key uint64, f *fault) {
	if l.byKey == nil {
		l.byKey = map[uint64]*fault{}
	}
	l.byKey[key] = f
	l.order = append(l.order, key)
}

// ObserveServerError records that endpoint id answered request (a
// fingerprint of its route and body, equal for its retries) with a 5xx
// status. See the comment at the top of this file for how it counts.
func (s *Set) ObserveServerError(id string, request uint64, status int) {
	err := fmt.Errorf("status %d", status)
	now := s.now()
	s.mu.Lock()
	f := s.faults.get(request, now)
	c := s.checks[id]
	if c != nil {
		c.lastErr = err.Error()
	}
	switch {
	case f == nil:
		s.faults.add(request, &fault{first: id, at: now})
	case f.poison || f.first == id:
		s.mu.Unlock() // no new evidence
		return
	default:
		f.poison = true
		s.withdrawLocked(f.first, request) // unlocks
		return
	}
	if c == nil || c.ejected {
		s.mu.Unlock()
		return
	}
	if c.pending == nil {
		c.pending = map[uint64]bool{}
	}
	if len(c.pending) < faultCap {
		// Beyond the ledger's size a failure could no longer be withdrawn
		// (the ledger has forgotten its request), and the count is far past
		// any threshold: an endpoint the cap keeps in while it fails every
		// request does not grow the set with its traffic.
		c.pending[request] = true
	}
	s.ejectForRequestsLocked(id, c, err)
}

// withdrawLocked takes request's failure off endpoint id, and undoes an
// ejection that no longer has the failures it needs. It unlocks s.mu.
func (s *Set) withdrawLocked(id string, request uint64) {
	c := s.checks[id]
	if c == nil || !c.pending[request] {
		s.mu.Unlock()
		return
	}
	delete(c.pending, request)
	if !c.ejected || !c.byRequests || c.requestFails() >= s.cfg.FailureThreshold {
		s.mu.Unlock()
		return
	}
	c.ejected, c.until = false, time.Time{}
	c.ejections = max(0, c.ejections-1)
	s.log.Info("ejection undone: the failing request failed on another endpoint too", "endpoint", id)
	s.rebuildLocked()
}
