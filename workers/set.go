// Package workers is the registered-worker set that the workers API writes
// (the same GET/POST/DELETE /workers calls as the SGLang Model Gateway,
// which dstack drives), replicated between router replicas by gossip.
//
// The set is a last-writer-wins element set: every URL ever registered has
// one [Op], the newest add or remove, ordered by a hybrid logical clock
// stamp, then the origin replica's name, and on an exact tie an add wins. A
// replica that applies an op it hears of keeps it, and republishes all the
// ops it holds, so a restarted replica gets the set back from any peer.
// Removals are kept as tombstones for a time-to-live, long enough to reach
// every replica, then dropped.
package workers

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Op is the newest add or remove of one worker URL.
type Op struct {
	URL string `json:"url"`
	// Stamp is a hybrid logical clock: unix milliseconds << 16, plus a
	// counter that orders ops within one millisecond and ops stamped on a
	// replica whose clock is behind one it heard from.
	Stamp   uint64 `json:"stamp"`
	Origin  string `json:"origin"`
	Removed bool   `json:"removed,omitempty"`
}

// Millis is the wall-clock part of the op's stamp.
func (o Op) Millis() int64 { return int64(o.Stamp >> 16) }

// Newer orders two ops of one URL: the later stamp, then the greater
// origin, then an add over a remove. It is a total order on distinct ops,
// so merging by it is commutative, associative and idempotent.
func Newer(a, b Op) bool {
	if c := cmp.Or(cmp.Compare(a.Stamp, b.Stamp), cmp.Compare(a.Origin, b.Origin)); c != 0 {
		return c > 0
	}
	return !a.Removed && b.Removed
}

// Set is one replica's copy of the registered-worker set. It is safe for
// concurrent use.
type Set struct {
	node string
	now  func() time.Time
	ttl  time.Duration

	mu       sync.Mutex
	ops      map[string]Op
	clock    uint64
	onChange []func(local bool)
}

// DefaultTombstoneTTL is how long a removal is remembered: far longer than
// gossip needs to spread it, so a replica that missed it cannot bring the
// worker back by republishing an older add.
const DefaultTombstoneTTL = 24 * time.Hour

// NewSet returns an empty set for replica node. now is the clock (nil:
// time.Now); ttl is the tombstones' time to live (0: DefaultTombstoneTTL).
func NewSet(node string, now func() time.Time, ttl time.Duration) *Set {
	if now == nil {
		now = time.Now
	}
	if ttl <= 0 {
		ttl = DefaultTombstoneTTL
	}
	return &Set{node: node, now: now, ttl: ttl, ops: map[string]Op{}}
}

// OnChange registers fn, called after every change of the set, outside the
// set's lock; local reports a change made
// through [Set.Add] or [Set.Remove] rather than merged from a peer. Register
// before the set is used.
func (s *Set) OnChange(fn func(local bool)) { s.onChange = append(s.onChange, fn) }

// stampLocked returns a stamp above the clock and every stamp seen.
func (s *Set) stampLocked() uint64 {
	s.clock = max(s.clock+1, uint64(s.now().UnixMilli())<<16)
	return s.clock
}

// Add registers url. It reports whether the set changed (false when url
// was already registered).
func (s *Set) Add(url string) bool { return s.apply(url, false) }

// Remove deregisters url. It reports whether url was registered.
func (s *Set) Remove(url string) bool { return s.apply(url, true) }

func (s *Set) apply(url string, removed bool) bool {
	s.mu.Lock()
	if old, ok := s.ops[url]; ok && old.Removed == removed || !ok && removed {
		s.mu.Unlock()
		return false
	}
	s.ops[url] = Op{URL: url, Stamp: s.stampLocked(), Origin: s.node, Removed: removed}
	s.mu.Unlock()
	s.changed(true)
	return true
}

// Merge applies ops heard from a peer and reports whether the members
// changed. Ops older than the ones held change nothing; a tombstone past
// its time to live is ignored rather than revived.
func (s *Set) Merge(ops []Op) bool {
	s.mu.Lock()
	cutoff := s.cutoff()
	changed := false
	for _, op := range ops {
		s.clock = max(s.clock, op.Stamp)
		if op.Removed && op.Millis() < cutoff {
			continue
		}
		old, ok := s.ops[op.URL]
		if ok && !Newer(op, old) {
			continue
		}
		s.ops[op.URL] = op
		if !ok && !op.Removed || ok && old.Removed != op.Removed {
			changed = true
		}
	}
	s.mu.Unlock()
	if changed {
		s.changed(false)
	}
	return changed
}

func (s *Set) cutoff() int64 { return s.now().Add(-s.ttl).UnixMilli() }

// GC drops tombstones older than the time to live and returns how many.
func (s *Set) GC() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff, n := s.cutoff(), 0
	for url, op := range s.ops {
		if op.Removed && op.Millis() < cutoff {
			delete(s.ops, url)
			n++
		}
	}
	return n
}

func (s *Set) changed(local bool) {
	for _, fn := range s.onChange {
		fn(local)
	}
}

// Members returns the registered URLs, sorted.
func (s *Set) Members() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for url, op := range s.ops {
		if !op.Removed {
			out = append(out, url)
		}
	}
	slices.Sort(out)
	return out
}

// Has reports whether url is registered.
func (s *Set) Has(url string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	op, ok := s.ops[url]
	return ok && !op.Removed
}

// Ops returns every op held, tombstones included, sorted by URL: what the
// replica republishes.
func (s *Set) Ops() []Op {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Op, 0, len(s.ops))
	for _, op := range s.ops {
		out = append(out, op)
	}
	slices.SortFunc(out, func(a, b Op) int { return cmp.Compare(a.URL, b.URL) })
	return out
}

// String describes the set for logs.
func (s *Set) String() string { return fmt.Sprintf("workers%v", s.Members()) }
