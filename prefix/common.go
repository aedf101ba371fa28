package prefix

import "sort"

// Common is an immutable set of anchor-prefix hashes that a large share of
// traffic starts with: a RAG preamble or few-shot block pasted at the top of
// every prompt, which a fixed first-MaxChars key would hash to one value for
// all requests. Key skips such a prefix, ChunkChars at a time, before it
// reads its MaxChars window, so requests that share only the preamble spread
// over the ring while requests that share more still meet.
//
// Key only reads a Common, so one table can be shared by all goroutines;
// to update it, build a new one and swap in a new Keyer.
type Common struct {
	set map[uint64]struct{}
}

// NewCommon builds a table from prefix hashes (as returned by
// Keyer.Prefixes).
func NewCommon(hashes []uint64) *Common {
	c := &Common{set: make(map[uint64]struct{}, len(hashes))}
	for _, h := range hashes {
		c.set[h] = struct{}{}
	}
	return c
}

// Len is the number of common prefixes in the table.
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

// Tally counts how many requests start with each anchor prefix. Counts only
// grow and Merge adds them, so tallies from router replicas combine in any
// order (commutative, associative). Addition is not idempotent: a gossip
// layer must ship each replica's own tally (or per-interval deltas) exactly
// once, e.g. as a per-replica G-counter whose merge is a max per replica.
// Tally is not safe for concurrent use.
type Tally struct {
	Requests uint64            // requests observed
	Counts   map[uint64]uint64 // prefix hash -> requests starting with it
}

// NewTally returns an empty tally.
func NewTally() *Tally {
	return &Tally{Counts: make(map[uint64]uint64)}
}

// Observe counts one request's prefixes (from Keyer.Prefixes).
func (t *Tally) Observe(prefixes []uint64) {
	t.Requests++
	for _, h := range prefixes {
		t.Counts[h]++
	}
}

// Merge adds o's counts into t.
func (t *Tally) Merge(o *Tally) {
	t.Requests += o.Requests
	for h, n := range o.Counts {
		t.Counts[h] += n
	}
}

// Common returns the prefixes that at least minShare of the observed
// requests start with (and at least minRequests requests, so that a cold
// tally does not declare a single prompt common).
func (t *Tally) Common(minShare float64, minRequests uint64) *Common {
	need := max(1, minRequests, uint64(minShare*float64(t.Requests)))
	var hs []uint64
	for h, n := range t.Counts {
		if n >= need {
			hs = append(hs, h)
		}
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i] < hs[j] })
	return NewCommon(hs)
}
