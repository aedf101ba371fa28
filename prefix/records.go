package prefix

import (
	"cmp"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/prefixring/prefixring/internal/lww"
)

// SketchRecord is one replica's published sketch summary. Only the replica
// named Node writes it; the others keep the newest copy by (Incarnation,
// Version). A record is immutable once built: merges share its slices.
type SketchRecord struct {
	Node string
	Addr string
	// Incarnation orders the processes that held the name: a [Share]
	// starts at 1 and takes one above any record of its name it did not
	// write, so a restarted replica's records replace its old ones.
	Incarnation uint64
	// Version orders publications within an incarnation.
	Version uint64
	// Fanout is the publisher's fanout; the merge uses the greatest of the
	// records it merges, so replicas configured apart still key alike.
	Fanout int
	// Summary is Sketch.Summary's result, normalized: hash order, unique
	// hashes, continuations sorted and unique.
	Summary []SummaryEntry
	// Groups are the publisher's request counts of its most requested
	// group keys, in hash order (Next unused), and Requests all its
	// requests: the shares MergeShares derives.
	Groups   []SummaryEntry
	Requests uint64
}

// SketchVersion names one version of one replica's sketch record.
type SketchVersion struct {
	Node                 string
	Incarnation, Version uint64
}

// Bounds of a record, which the decoder enforces.
const (
	maxSketchEntries = 1024
	maxSketchNext    = 64
	minFanout        = 2
)

// normalizeSummary copies s into a record's canonical form: continuations
// sorted, unique and at most maxSketchNext; at most maxSketchEntries
// entries (the most counted); unique hashes in increasing order.
func normalizeSummary(s []SummaryEntry) []SummaryEntry {
	out := make([]SummaryEntry, len(s))
	for i, e := range s {
		next := slices.Compact(slices.Sorted(slices.Values(e.Next)))
		out[i] = SummaryEntry{Hash: e.Hash, Count: e.Count, Next: slices.Clip(next[:min(len(next), maxSketchNext)])}
	}
	return canonical(out)
}

// normalizeGroups copies group counts into a record's canonical form: at
// most maxSketchEntries (the most counted), unique hashes in increasing
// order, no continuations.
func normalizeGroups(gs []SummaryEntry) []SummaryEntry {
	out := make([]SummaryEntry, len(gs))
	for i, g := range gs {
		out[i] = SummaryEntry{Hash: g.Hash, Count: g.Count}
	}
	return canonical(out)
}

// canonical keeps the maxSketchEntries most counted entries of out, in
// increasing hash order, one per hash.
func canonical(out []SummaryEntry) []SummaryEntry {
	if len(out) > maxSketchEntries {
		slices.SortFunc(out, func(a, b SummaryEntry) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Hash, b.Hash))
		})
		out = out[:maxSketchEntries]
	}
	slices.SortStableFunc(out, func(a, b SummaryEntry) int { return cmp.Compare(a.Hash, b.Hash) })
	return slices.CompactFunc(out, func(a, b SummaryEntry) bool { return a.Hash == b.Hash })
}

// sameShares reports whether two records' group counts give the same
// shares to within a tenth of each: group shares move with every request,
// and only a change that can move a group's spread is worth a publication.
// Below MinShareRequests the request count itself is compared too: the
// records' counts together decide whether there are shares at all and
// whether they are early (MergeShares), so a count that grows there is
// news even when every share holds still (one group's share stays 1).
func sameShares(a, b SketchRecord) bool {
	if len(a.Groups) != len(b.Groups) || (a.Requests == 0) != (b.Requests == 0) ||
		!within(float64(min(a.Requests, MinShareRequests)), float64(min(b.Requests, MinShareRequests))) {
		return false
	}
	for i := range a.Groups {
		if a.Groups[i].Hash != b.Groups[i].Hash {
			return false
		}
		if a.Requests == 0 {
			continue
		}
		sa := float64(a.Groups[i].Count) / float64(a.Requests)
		sb := float64(b.Groups[i].Count) / float64(b.Requests)
		if !within(sa, sb) {
			return false
		}
	}
	return true
}

// within reports whether a and b differ by at most a tenth of the larger.
func within(a, b float64) bool {
	d := a - b
	return d <= 0.1*max(a, b) && -d <= 0.1*max(a, b)
}

// sameKnowledge reports whether two normalized summaries hold the same
// prefixes with the same continuations: all that [MergeRecords] reads.
// Counts are not compared: they move with every request, and publishing
// each change would send every record every interval for nothing.
func sameKnowledge(a, b []SummaryEntry) bool {
	return slices.EqualFunc(a, b, func(x, y SummaryEntry) bool {
		return x.Hash == y.Hash && slices.Equal(x.Next, y.Next)
	})
}

func clampFanout(f int) int { return min(max(f, minFanout), maxSketchNext) }

// compareRecords orders two records of one node as core.Compare orders
// entries: by incarnation and version, then by content for the ties only
// two processes sharing a name could produce.
func compareRecords(a, b SketchRecord) int {
	if c := cmp.Or(cmp.Compare(a.Incarnation, b.Incarnation), cmp.Compare(a.Version, b.Version)); c != 0 {
		return c
	}
	return cmp.Compare(recordFingerprint(a), recordFingerprint(b))
}

func recordFingerprint(r SketchRecord) uint64 { return xxhash.Sum64(appendRecord(nil, r)) }

// MergeRecords is the shared-prefix table of a set of records: their
// summaries united by MergeSummaries at the greatest fanout among them,
// and their group counts by MergeShares. It depends on the set only, not
// on its order.
func MergeRecords(recs []SketchRecord) *Common {
	fanout := minFanout
	sums := make([][]SummaryEntry, len(recs))
	counts := make([]GroupCounts, len(recs))
	for i, r := range recs {
		fanout = max(fanout, r.Fanout)
		sums[i] = r.Summary
		counts[i] = GroupCounts{Groups: r.Groups, Requests: r.Requests}
	}
	return MergeSummaries(fanout, sums...).WithShares(MergeShares(counts...))
}

// recordTable is the set of sketch records one replica holds, one per
// node: a [lww.Map] map ordered by [compareRecords], with each record's
// fingerprint kept beside it. It is pure and not safe for concurrent use.
type recordTable struct {
	lww *lww.Map[string, SketchRecord]
	fps map[string]uint64 // node -> recordFingerprint of its record
}

// newRecordTable returns an empty table.
func newRecordTable() *recordTable {
	return &recordTable{lww: lww.New(func(r SketchRecord) string { return r.Node }, compareRecords),
		fps: map[string]uint64{}}
}

// Merge keeps, for every node, the newest of its known record and the ones
// in in, and returns the records that changed the table.
func (t *recordTable) Merge(in ...SketchRecord) []SketchRecord {
	changed := t.lww.Merge(in...)
	for _, r := range changed {
		t.fps[r.Node] = recordFingerprint(r)
	}
	return changed
}

// Get returns the record of node.
func (t *recordTable) Get(node string) (SketchRecord, bool) { return t.lww.Get(node) }

// Records returns all records sorted by node.
func (t *recordTable) Records() []SketchRecord { return t.lww.Values() }

// Delete forgets node's record.
func (t *recordTable) Delete(node string) {
	t.lww.Delete(node)
	delete(t.fps, node)
}

// Len returns the number of records.
func (t *recordTable) Len() int { return t.lww.Len() }
