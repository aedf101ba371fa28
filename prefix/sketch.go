package prefix

import (
	"cmp"
	"slices"
)

// Common is an immutable set of anchor prefixes (hashes of an anchor's
// first k·ChunkChars characters, as Keyer.Prefixes returns them) after
// which requests diverge: a system prompt, RAG preamble or few-shot block
// pasted at the top of many different prompts. Key skips the anchor up to
// the deepest such prefix and reads its window after it, so requests that
// share only the preamble spread over the ring while requests that share
// more (the turns of one conversation) still meet.
//
// Key only reads a Common, so one table can be shared by all goroutines;
// to update it, build a new one and swap in a new Keyer.
type Common struct {
	set    map[uint64]struct{}
	shares Shares
}

// NewCommon builds a table from prefix hashes.
func NewCommon(hashes []uint64) *Common {
	c := &Common{set: make(map[uint64]struct{}, len(hashes))}
	for _, h := range hashes {
		c.set[h] = struct{}{}
	}
	return c
}

// WithShares returns a copy of c that also knows each group key's share of
// the requests (see Key.GroupShare).
func (c *Common) WithShares(shares Shares) *Common {
	out := &Common{shares: shares}
	if c != nil {
		out.set = c.set
	}
	return out
}

// Share returns the share of requests whose group key is g (0: unknown).
func (c *Common) Share(g uint64) float64 {
	if c == nil {
		return 0
	}
	return c.shares.Of[g]
}

// EarlyShares reports whether the table's shares are early ones (see
// [Shares]).
func (c *Common) EarlyShares() bool { return c != nil && c.shares.Early }

// Len is the number of prefixes in the table.
func (c *Common) Len() int {
	if c == nil {
		return 0
	}
	return len(c.set)
}

func (c *Common) has(h uint64) bool {
	if c == nil {
		return false
	}
	_, ok := c.set[h]
	return ok
}

// Hashes returns the table's prefixes in increasing order.
func (c *Common) Hashes() []uint64 {
	if c == nil {
		return nil
	}
	out := make([]uint64, 0, len(c.set))
	for h := range c.set {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// Sketch learns which anchor prefixes are shared preambles: a prefix is
// shared when requests continue it in at least Fanout different ways. A
// conversation's own prefix is continued one way (each turn extends the
// previous one), however often it is sent; a system prompt shared by many
// conversations is continued by each of them differently. Counting
// continuations rather than requests keeps a busy conversation from being
// mistaken for a preamble, and a preamble from being missed at low traffic.
//
// A Sketch keeps at most about 2·Max prefixes (the most requested) in each
// of two epochs; Rotate starts a new epoch and forgets the one before the
// previous, so a retired preamble is forgotten after two epochs. Its state
// merges: a Summary is what one replica publishes, and [MergeSummaries]
// unites replicas' summaries into the table every replica keys with.
// A Sketch is a pure value, not safe for concurrent use.
type Sketch struct {
	fanout, max int
	cur, prev   map[uint64]*sketchNode
	// branched, branchedPrev hold the prefixes of cur and prev continued
	// in two ways or more: the only ones a Summary carries, kept apart so
	// that a Summary does not walk every prefix.
	branched, branchedPrev map[uint64]struct{}
	// groups counts requests per group key (Key.Group), per epoch, and
	// requests their total.
	groups, prevGroups     map[uint64]uint64
	requests, prevRequests uint64
}

type sketchNode struct {
	count uint64
	next  []uint32 // distinct continuations seen (low 32 bits of their hash), at most fanout
}

// NewSketch returns an empty sketch: fanout continuations make a prefix
// shared (0: 4; at least 2), and it keeps about keep prefixes per epoch
// (0: 4096).
func NewSketch(fanout, keep int) *Sketch {
	if fanout <= 0 {
		fanout = 4
	}
	return &Sketch{fanout: max(fanout, 2), max: cmp.Or(keep, 4096),
		cur: map[uint64]*sketchNode{}, prev: map[uint64]*sketchNode{},
		branched: map[uint64]struct{}{}, branchedPrev: map[uint64]struct{}{},
		groups: map[uint64]uint64{}, prevGroups: map[uint64]uint64{}}
}

// ObserveGroup counts one request of group key g (Key.Group).
func (s *Sketch) ObserveGroup(g uint64) {
	s.requests++
	s.groups[g]++
	if len(s.groups) > 2*s.max {
		s.groups = topCounts(s.groups, s.max)
	}
}

// topCounts keeps the k largest counts of m (ties: the smaller key).
func topCounts(m map[uint64]uint64, k int) map[uint64]uint64 {
	hs := make([]uint64, 0, len(m))
	for h := range m {
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b uint64) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	out := make(map[uint64]uint64, k)
	for _, h := range hs[:min(k, len(hs))] {
		out[h] = m[h]
	}
	return out
}

// Groups returns the k most requested group keys of both epochs with their
// request counts, in hash order, and the requests of both epochs.
func (s *Sketch) Groups(k int) ([]SummaryEntry, uint64) {
	both := make(map[uint64]uint64, len(s.groups)+len(s.prevGroups))
	for _, m := range []map[uint64]uint64{s.prevGroups, s.groups} {
		for g, n := range m {
			both[g] += n
		}
	}
	kept := topCounts(both, k)
	out := make([]SummaryEntry, 0, len(kept))
	for g, n := range kept {
		out = append(out, SummaryEntry{Hash: g, Count: n})
	}
	slices.SortFunc(out, func(a, b SummaryEntry) int { return cmp.Compare(a.Hash, b.Hash) })
	return out, s.requests + s.prevRequests
}

// Observe counts one request's anchor prefixes (Keyer.Prefixes): each
// prefix is continued by the next one.
func (s *Sketch) Observe(prefixes []uint64) {
	for i, h := range prefixes {
		n := s.cur[h]
		if n == nil {
			n = &sketchNode{}
			s.cur[h] = n
		}
		n.count++
		if i+1 < len(prefixes) {
			n.addNext(uint32(prefixes[i+1]), s.fanout)
			if len(n.next) == 2 {
				s.branched[h] = struct{}{}
			}
		}
	}
	if len(s.cur) > 2*s.max {
		s.cur = top(s.cur, s.max)
		for h := range s.branched {
			if s.cur[h] == nil {
				delete(s.branched, h)
			}
		}
	}
}

func (n *sketchNode) addNext(h uint32, limit int) {
	if len(n.next) < limit && !slices.Contains(n.next, h) {
		n.next = append(n.next, h)
	}
}

// top keeps the k most counted nodes of m (ties: the smaller hash).
func top(m map[uint64]*sketchNode, k int) map[uint64]*sketchNode {
	hs := make([]uint64, 0, len(m))
	for h := range m {
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b uint64) int {
		return cmp.Or(cmp.Compare(m[b].count, m[a].count), cmp.Compare(a, b))
	})
	out := make(map[uint64]*sketchNode, k)
	for _, h := range hs[:min(k, len(hs))] {
		out[h] = m[h]
	}
	return out
}

// Rotate starts a new epoch: the current one becomes the previous, and the
// previous is forgotten.
func (s *Sketch) Rotate() {
	s.prev, s.cur = s.cur, map[uint64]*sketchNode{}
	s.branchedPrev, s.branched = s.branched, map[uint64]struct{}{}
	s.prevGroups, s.groups = s.groups, map[uint64]uint64{}
	s.prevRequests, s.requests = s.requests, 0
}

// Len is the number of prefixes the sketch holds, both epochs.
func (s *Sketch) Len() int { return len(s.cur) + len(s.prev) }

// SummaryEntry is one prefix of a Summary: how many requests started with
// it and the distinct continuations seen.
type SummaryEntry struct {
	Hash  uint64
	Count uint64
	Next  []uint32
}

// Summary returns the at most k most requested prefixes of both epochs that
// were continued in at least two ways, with their continuations, in hash
// order: what a replica publishes. (A prefix this replica saw continued
// one way only may still be shared when others saw other ways; it is left
// out all the same, which keeps summaries small: it is found once a
// replica sees two.)
func (s *Sketch) Summary(k int) []SummaryEntry {
	both := make(map[uint64]*sketchNode, len(s.branched)+len(s.branchedPrev))
	for _, e := range []struct {
		m   map[uint64]*sketchNode
		set map[uint64]struct{}
	}{{s.prev, s.branchedPrev}, {s.cur, s.branched}} {
		for h := range e.set {
			n := e.m[h]
			if n == nil {
				continue
			}
			b := both[h]
			if b == nil {
				b = &sketchNode{}
				both[h] = b
			}
			b.count += n.count
			for _, x := range n.next {
				b.addNext(x, s.fanout)
			}
		}
	}
	kept := top(both, k)
	out := make([]SummaryEntry, 0, len(kept))
	for h, n := range kept {
		out = append(out, SummaryEntry{Hash: h, Count: n.count, Next: slices.Clone(n.next)})
	}
	slices.SortFunc(out, func(a, b SummaryEntry) int { return cmp.Compare(a.Hash, b.Hash) })
	return out
}

// Fanout is the number of continuations that makes a prefix shared.
func (s *Sketch) Fanout() int { return s.fanout }

// MergeSummaries unites replicas' summaries: a prefix is shared when the
// union of its continuations over all of them has at least fanout members.
// The result depends only on the set of summaries, not on their order, so
// replicas holding the same summaries key alike.
func MergeSummaries(fanout int, summaries ...[]SummaryEntry) *Common {
	next := map[uint64][]uint32{}
	for _, sum := range summaries {
		for _, e := range sum {
			ns := next[e.Hash]
			for _, x := range e.Next {
				if len(ns) < fanout && !slices.Contains(ns, x) {
					ns = append(ns, x)
				}
			}
			next[e.Hash] = ns
		}
	}
	var hs []uint64
	for h, ns := range next {
		if len(ns) >= fanout {
			hs = append(hs, h)
		}
	}
	return NewCommon(hs)
}

// GroupCounts is one replica's published group counts: the requests of
// its most requested group keys, and all its requests.
type GroupCounts struct {
	Groups   []SummaryEntry
	Requests uint64
}

// MinShareRequests is how many requests the replicas' group counts must
// cover, together, before MergeShares reports settled shares: fewer make
// shares that move with every request, and every move of a group's spread
// moves some of its conversations.
var MinShareRequests uint64 = 300

// EarlyShareRequests is how many requests the replicas' group counts must
// cover, together, before MergeShares reports early shares. Until the
// shares settle, a group is held on one endpoint, which computes its
// shared part once; the balancer takes an early share only for a group
// that one endpoint's bound cannot hold (ring.Request.EarlyShare), and
// such a group is seen early: a quarter of 32 requests is 8 of them.
var EarlyShareRequests uint64 = 32

// Shares is each group key's share of the requests the replicas counted.
type Shares struct {
	// Of maps a group key to its share; nil: none known.
	Of map[uint64]float64
	// Early: the counts cover at least EarlyShareRequests requests but
	// fewer than MinShareRequests.
	Early bool
}

// maxShareCount bounds each count MergeShares adds, as gossip's
// core.MaxCount bounds an entry's: the counts come from peers, and one
// with a bug (or a key holder who means harm) could otherwise send counts
// whose sum wraps, to a total too small for any shares or a group's count
// of nearly nothing, changing every replica's spread. At 2^40 a sum
// wraps only past 2^23 records, far more than a cluster's members.
const maxShareCount = 1 << 40

// MergeShares unites replicas' group counts into each group key's share of
// all their requests: none until they cover EarlyShareRequests, early ones
// until they cover MinShareRequests. Like MergeSummaries it depends only
// on the set of counts given, not on their order.
func MergeShares(counts ...GroupCounts) Shares {
	var total uint64
	sum := map[uint64]uint64{}
	for _, c := range counts {
		total += min(c.Requests, maxShareCount)
		for _, g := range c.Groups {
			sum[g.Hash] += min(g.Count, maxShareCount)
		}
	}
	if total < min(EarlyShareRequests, MinShareRequests) {
		return Shares{}
	}
	out := make(map[uint64]float64, len(sum))
	for g, n := range sum {
		out[g] = min(float64(n)/float64(total), 1)
	}
	return Shares{Of: out, Early: total < MinShareRequests}
}
