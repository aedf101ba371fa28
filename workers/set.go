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
	policy   Policy
	ops      map[string]Op
	live     int // ops that are adds: the members
	clock    uint64
	dropped  Dropped
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
	return &Set{node: node, now: now, ttl: ttl, policy: DefaultPolicy(), ops: map[string]Op{}}
}

// SetPolicy replaces [DefaultPolicy]. Call it before the set is used.
func (s *Set) SetPolicy(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policy = p
	return nil
}

// Policy returns the set's policy.
func (s *Set) Policy() Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy
}

// Dropped counts the ops heard from peers that were not applied.
type Dropped struct {
	// Invalid: ops whose URL the policy refuses, whose origin is empty or
	// too long, or whose record did not decode.
	Invalid uint64
	// OverCap: adds that took the set past MaxWorkers (held, not
	// members; see [Set.Members]), or were not held because the set
	// holds 4 × MaxWorkers ops and no removal.
	OverCap uint64
	// Future: ops stamped more than MaxClockAhead past this replica's
	// clock.
	Future uint64
}

// MaxClockAhead is how far past this replica's clock a peer's op may be
// stamped. A hybrid logical clock takes the greatest stamp it hears, so
// one stamp from a peer whose clock is far ahead (or a corrupt record)
// would carry this replica's clock there for good: every later stamp and
// tombstone would lie in that future, no tombstone would age out, and at
// the stamp's greatest value the clock wrapped to 0, so a local remove
// lost to the add. Such an op is dropped and counted (Dropped.Future), as
// a hybrid logical clock refuses a remote time beyond its maximum offset;
// an hour is far above the skew of any replicas that keep their clocks
// with NTP.
const MaxClockAhead = time.Hour

// Dropped returns the counts of ops from peers not applied.
func (s *Set) Dropped() Dropped {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
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

// Add registers url, as [Set.Register] does. It reports whether the set
// changed (false when url was already registered, or is refused).
func (s *Set) Add(url string) bool {
	added, _ := s.Register(url)
	return added
}

// Register adds url, or says why not: an error wrapping [ErrInvalidURL]
// when the policy refuses the URL, or [ErrTooManyWorkers] at the cap. It
// reports whether the set changed (false, nil when url was already
// registered).
func (s *Set) Register(url string) (bool, error) {
	s.mu.Lock()
	if err := s.policy.CheckURL(url); err != nil {
		s.mu.Unlock()
		return false, err
	}
	old, ok := s.ops[url]
	if ok && !old.Removed && slices.Contains(s.membersLocked(), url) {
		s.mu.Unlock()
		return false, nil
	}
	// An add held out past the cap (Members) is not re-stamped: it would
	// lose its place to every add held.
	if s.live >= s.policy.MaxWorkers {
		s.mu.Unlock()
		return false, fmt.Errorf("%w: %d are registered, the most this router takes (--max-workers); remove one first", ErrTooManyWorkers, s.live)
	}
	if !ok && !s.roomLocked() {
		s.mu.Unlock()
		return false, fmt.Errorf("%w: the set is full", ErrTooManyWorkers)
	}
	s.putLocked(Op{URL: url, Stamp: s.stampLocked(), Origin: s.node})
	s.mu.Unlock()
	s.changed(true)
	return true, nil
}

// Remove deregisters url. It reports whether url was registered.
func (s *Set) Remove(url string) bool {
	s.mu.Lock()
	if old, ok := s.ops[url]; !ok || old.Removed {
		s.mu.Unlock()
		return false
	}
	s.putLocked(Op{URL: url, Stamp: s.stampLocked(), Origin: s.node, Removed: true})
	s.mu.Unlock()
	s.changed(true)
	return true
}

// putLocked stores op, keeping the count of members.
func (s *Set) putLocked(op Op) {
	if old, ok := s.ops[op.URL]; ok && !old.Removed {
		s.live--
	}
	if !op.Removed {
		s.live++
	}
	s.ops[op.URL] = op
}

// roomLocked makes room for one more URL: past the bound on ops held, the
// oldest removal is forgotten (before its time to live; a replica that
// missed it could bring its worker back, which only a set churning past
// 4 × MaxWorkers URLs within the time to live risks). It reports false
// when there is no removal to forget.
func (s *Set) roomLocked() bool {
	if len(s.ops) < s.policy.maxHeld() {
		return true
	}
	var oldest Op
	found := false
	for _, op := range s.ops {
		if op.Removed && (!found || Newer(oldest, op)) {
			oldest, found = op, true
		}
	}
	if found {
		delete(s.ops, oldest.URL)
	}
	return found
}

// checkLocked reports whether a peer's op may be applied: its URL passes
// the policy (a URL held already passed it) and its origin is a name.
func (s *Set) checkLocked(op Op) bool {
	if op.Origin == "" || len(op.Origin) > maxOrigin {
		return false
	}
	if _, ok := s.ops[op.URL]; ok {
		return true
	}
	return s.policy.CheckURL(op.URL) == nil
}

// Merge applies ops heard from a peer and reports whether the members
// changed. Ops older than the ones held change nothing; a tombstone past
// its time to live is ignored rather than revived. An op the policy
// refuses is dropped alone and counted ([Set.Dropped]), and its stamp does
// not move the clock. An add past MaxWorkers is held, counted, and not a
// member (see [Set.Members]) until a removal makes room.
func (s *Set) Merge(ops []Op) bool {
	s.mu.Lock()
	cutoff := s.cutoff()
	before := s.membersLocked()
	put := false
	for _, op := range ops {
		if !s.checkLocked(op) {
			s.dropped.Invalid++
			continue
		}
		if op.Millis() > s.now().Add(MaxClockAhead).UnixMilli() {
			s.dropped.Future++
			continue
		}
		s.clock = max(s.clock, op.Stamp)
		if op.Removed && op.Millis() < cutoff {
			continue
		}
		old, ok := s.ops[op.URL]
		if ok && !Newer(op, old) {
			continue
		}
		if !ok && !s.roomLocked() {
			s.dropped.OverCap++
			continue
		}
		s.putLocked(op)
		put = true
		if !op.Removed && (!ok || old.Removed) && s.live > s.policy.MaxWorkers {
			s.dropped.OverCap++
		}
	}
	changed := put && !slices.Equal(before, s.membersLocked())
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

// Members returns the registered URLs, sorted: every add held, or, past
// MaxWorkers, the MaxWorkers oldest (by stamp, then origin, then URL).
// Replicas each under the cap may register more workers between them
// than it; choosing by the ops alone, not by the order they arrived in,
// makes every replica route the same ones, and an add held out becomes a
// member on every replica once a removal makes room.
func (s *Set) Members() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.membersLocked()
}

func (s *Set) membersLocked() []string {
	var adds []Op
	for _, op := range s.ops {
		if !op.Removed {
			adds = append(adds, op)
		}
	}
	if len(adds) > s.policy.MaxWorkers {
		slices.SortFunc(adds, func(a, b Op) int {
			return cmp.Or(cmp.Compare(a.Stamp, b.Stamp), cmp.Compare(a.Origin, b.Origin), cmp.Compare(a.URL, b.URL))
		})
		adds = adds[:s.policy.MaxWorkers]
	}
	out := make([]string, 0, len(adds))
	for _, op := range adds {
		out = append(out, op.URL)
	}
	slices.Sort(out)
	return out
}

// Registered returns every URL added and not removed, sorted: the
// members and the adds held out past MaxWorkers.
func (s *Set) Registered() []string {
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

// Has reports whether url is a member.
func (s *Set) Has(url string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	op, ok := s.ops[url]
	return ok && !op.Removed && slices.Contains(s.membersLocked(), url)
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
