package gossip

import (
	"cmp"
	"encoding/binary"
	"github.com/prefixring/prefixring/gossip/core"
	"github.com/prefixring/prefixring/workers"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/memberlist"

	"github.com/prefixring/prefixring/prefix"
)

// The shared-prefix sketch (package prefix's Sketch) rides on two message
// kinds of its own, so clusters that never plug a sketch send exactly what
// they sent before:
//
//	sketch:    m (at least 1), then m records, each: node, addr,
//	           incarnation, version, fanout, n, then n entries: hash
//	           (8 bytes LE), count, k, k continuations (4 bytes LE each);
//	           then requests, g, and g group counts: hash (8 bytes LE),
//	           count
//	state+ext: a state message's body, then s, then s sections, each:
//	           tag, length, body. Tags increase (each at most once); a tag
//	           this build does not know is skipped, so a later build can add
//	           a section without a new kind. (The count s makes a message
//	           cut at a section boundary malformed.)
//	  tag 1:   worker ops: a workers message's body
//	  tag 2:   sketch records: a sketch message's body (m may be 0)
//	  tag 3:   sketch versions: from (the sender's name), m, then m
//	           versions: node, incarnation, version
//
// A replica sends its own record (a sketch message) over TCP to every live
// member when it publishes, and to a member that joins. Push/pull sends
// state when there is nothing else to carry, state+workers when there are
// worker ops only (what the build before the sketch sent), and state+ext
// once this replica shares a sketch: with every record held on a join
// (the joiner, a restarted replica, a healed partition gets every summary
// at once), with versions only otherwise. A replica that reads versions
// sends the peer, in one sketch message, the records of live members it
// holds newer than the peer's: anti-entropy at a few dozen bytes a record
// instead of the whole summaries every push/pull.
//
// Hashes are strictly increasing within a record and so are the
// continuations within an entry (a canonical form: two equal summaries
// encode alike). A record has at most 1024 entries and an entry at most 64
// continuations; the decoder refuses more, and any count that claims more
// items than the bytes left could hold.
const (
	kindSketch   byte = 6
	kindStateExt byte = 7

	sectionWorkers        = 1
	sectionSketch         = 2
	sectionSketchVersions = 3

	maxSections      = 64
	maxSketchEntries = 1024
	maxSketchNext    = 64
	minFanout        = 2

	minSketchEntryBytes   = 8 + 1 + 1             // hash, count, k
	minSketchRecordBytes  = 2 + 1 + 1 + 1 + 1 + 1 // node (non-empty), addr, inc, ver, fanout, n
	minSketchVersionBytes = 1 + 1 + 1             // node, inc, ver
)

// SketchSource is what a replica publishes of its shared-prefix sketch.
// The proxy implements it with a mutex around a prefix.Sketch; Summary
// is called from the node's gossip goroutine every Config.SketchInterval.
type SketchSource interface {
	// Summary is the summary to publish (prefix.Sketch.Summary(k)).
	// The node copies it; the caller may reuse its slices.
	Summary() []prefix.SummaryEntry
	// Groups are the group counts to publish (prefix.Sketch.Groups(k)).
	Groups() prefix.GroupCounts
	// Fanout is the number of continuations that makes a prefix shared.
	Fanout() int
}

// SketchRecord is one replica's published sketch summary. Only the replica
// named Node writes it; the others keep the newest copy by (Incarnation,
// Version). A record is immutable once built: merges share its slices.
type SketchRecord struct {
	Node string
	Addr string
	// Incarnation is the replica's load-entry incarnation (its start time),
	// so a restarted replica's first record replaces its old one.
	Incarnation uint64
	// Version orders publications within an incarnation.
	Version uint64
	// Fanout is the publisher's fanout; the merge uses the greatest of the
	// records it merges, so replicas configured apart still key alike.
	Fanout int
	// Summary is prefix.Sketch.Summary's result, normalized: hash order,
	// unique hashes, continuations sorted and unique.
	Summary []prefix.SummaryEntry
	// Groups are the publisher's request counts of its most requested
	// group keys, in hash order (Next unused), and Requests all its
	// requests: the shares prefix.MergeShares derives.
	Groups   []prefix.SummaryEntry
	Requests uint64
}

func appendSketchRecord(b []byte, r SketchRecord) []byte {
	b = appendString(b, r.Node)
	b = appendString(b, r.Addr)
	b = binary.AppendUvarint(b, r.Incarnation)
	b = binary.AppendUvarint(b, r.Version)
	b = binary.AppendUvarint(b, uint64(r.Fanout))
	b = binary.AppendUvarint(b, uint64(len(r.Summary)))
	for _, e := range r.Summary {
		b = binary.LittleEndian.AppendUint64(b, e.Hash)
		b = binary.AppendUvarint(b, e.Count)
		b = binary.AppendUvarint(b, uint64(len(e.Next)))
		for _, x := range e.Next {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
	}
	b = binary.AppendUvarint(b, r.Requests)
	b = binary.AppendUvarint(b, uint64(len(r.Groups)))
	for _, g := range r.Groups {
		b = binary.LittleEndian.AppendUint64(b, g.Hash)
		b = binary.AppendUvarint(b, g.Count)
	}
	return b
}

func appendSketchRecords(b []byte, recs []SketchRecord) []byte {
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = appendSketchRecord(b, r)
	}
	return b
}

// SketchVersion names one version of one replica's sketch record.
type SketchVersion struct {
	Node                 string
	Incarnation, Version uint64
}

func appendSketchVersions(b []byte, from string, vs []SketchVersion) []byte {
	b = appendString(b, from)
	b = binary.AppendUvarint(b, uint64(len(vs)))
	for _, v := range vs {
		b = appendString(b, v.Node)
		b = binary.AppendUvarint(b, v.Incarnation)
		b = binary.AppendUvarint(b, v.Version)
	}
	return b
}

// EncodeSketch encodes sketch records (at least one). A record is
// expected in its normalized form (see [SketchRecord]); one that is not
// decodes as malformed.
func EncodeSketch(recs ...SketchRecord) []byte {
	return appendSketchRecords([]byte{wireVersion, kindSketch}, recs)
}

func appendSection(b []byte, tag uint64, body []byte) []byte {
	b = binary.AppendUvarint(b, tag)
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

// EncodeStateExt encodes m's entries, worker ops, sketch records and
// sketch versions (with m.SketchFrom; none without it) for a push/pull
// exchange as a state+ext message; a section is left out when it has
// nothing to carry. m.Kind is not read.
func EncodeStateExt(m Message) []byte {
	b := EncodeState(m.Entries)
	b[1] = kindStateExt
	has := []bool{len(m.Workers) > 0, len(m.Sketches) > 0, m.SketchFrom != ""}
	sections := 0
	for _, h := range has {
		if h {
			sections++
		}
	}
	b = binary.AppendUvarint(b, uint64(sections))
	if has[0] {
		b = appendSection(b, sectionWorkers, workers.AppendOps(nil, m.Workers))
	}
	if has[1] {
		b = appendSection(b, sectionSketch, appendSketchRecords(nil, m.Sketches))
	}
	if has[2] {
		b = appendSection(b, sectionSketchVersions, appendSketchVersions(nil, m.SketchFrom, m.SketchVersions))
	}
	return b
}

// EncodePushPull encodes a push/pull state in the oldest kind that carries
// it: state (entries only: byte for byte what a build without workers or
// sketch sends), state+workers (worker ops too), or state+ext (anything of
// the sketch, with the ops if any).
func EncodePushPull(m Message) []byte {
	switch {
	case len(m.Sketches) > 0 || m.SketchFrom != "":
		return EncodeStateExt(m)
	case len(m.Workers) > 0:
		return EncodeStateWorkers(m.Entries, m.Workers)
	}
	return EncodeState(m.Entries)
}

// sections reads a state+ext message's sections into m.
func (r *reader) sections(m *Message) {
	n := r.count(maxSections)
	var last uint64
	for i := 0; i < n && r.err == nil; i++ {
		tag := r.uvarint()
		body := r.bytes(r.count(len(r.b)))
		if r.err != nil {
			return
		}
		if tag <= last {
			r.err = errMalformed // tags increase, each at most once
			return
		}
		last = tag
		sub := &reader{b: body}
		switch tag {
		case sectionWorkers:
			m.Workers = sub.ops()
		case sectionSketch:
			m.Sketches = sub.sketchRecords(0)
		case sectionSketchVersions:
			m.SketchFrom, m.SketchVersions = sub.sketchVersions()
		default:
			continue // a later build's section
		}
		if sub.err == nil && len(sub.b) != 0 {
			sub.err = errMalformed
		}
		r.err = sub.err
	}
}

// room reports whether n items of at least size bytes each can fit in
// what is left, and fails the reader if not: a count is never trusted to
// size an allocation beyond what the message could carry.
func (r *reader) room(n, size int) bool {
	if r.err == nil && n > len(r.b)/size {
		r.err = errMalformed
	}
	return r.err == nil
}

func (r *reader) u32() uint32 {
	if b := r.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

// sketchRecords reads m, then m records; m must be at least least.
func (r *reader) sketchRecords(least int) []SketchRecord {
	n := r.count(maxEntries)
	if r.err == nil && n < least {
		r.err = errMalformed
	}
	if !r.room(n, minSketchRecordBytes) {
		return nil
	}
	out := make([]SketchRecord, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		out = append(out, r.sketchRecord())
	}
	return out
}

func (r *reader) sketchVersions() (string, []SketchVersion) {
	from := r.str()
	if r.err == nil && from == "" {
		r.err = errMalformed
	}
	n := r.count(maxEntries)
	if !r.room(n, minSketchVersionBytes) {
		return "", nil
	}
	out := make([]SketchVersion, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		out = append(out, SketchVersion{Node: r.str(), Incarnation: r.uvarint(), Version: r.uvarint()})
	}
	return from, out
}

func (r *reader) sketchRecord() SketchRecord {
	rec := SketchRecord{Node: r.str(), Addr: r.str()}
	rec.Incarnation, rec.Version = r.uvarint(), r.uvarint()
	rec.Fanout = r.count(maxSketchNext)
	if r.err == nil && (rec.Fanout < minFanout || rec.Node == "") {
		r.err = errMalformed
	}
	n := r.count(maxSketchEntries)
	if !r.room(n, minSketchEntryBytes) {
		return SketchRecord{}
	}
	rec.Summary = make([]prefix.SummaryEntry, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		e := prefix.SummaryEntry{Hash: r.u64(), Count: r.uvarint()}
		if i > 0 && e.Hash <= rec.Summary[i-1].Hash {
			r.err = errMalformed
		}
		k := r.count(maxSketchNext)
		if !r.room(k, 4) {
			break
		}
		e.Next = make([]uint32, k)
		for j := range e.Next {
			e.Next[j] = r.u32()
			if j > 0 && e.Next[j] <= e.Next[j-1] {
				r.err = errMalformed
			}
		}
		rec.Summary = append(rec.Summary, e)
	}
	rec.Requests = r.uvarint()
	g := r.count(maxSketchEntries)
	if !r.room(g, 8+1) {
		return SketchRecord{}
	}
	rec.Groups = make([]prefix.SummaryEntry, 0, g)
	for i := 0; i < g && r.err == nil; i++ {
		e := prefix.SummaryEntry{Hash: r.u64(), Count: r.uvarint()}
		if i > 0 && e.Hash <= rec.Groups[i-1].Hash {
			r.err = errMalformed
		}
		rec.Groups = append(rec.Groups, e)
	}
	return rec
}

// normalizeSummary copies s into a record's canonical form: continuations
// sorted, unique and at most maxSketchNext; at most maxSketchEntries
// entries (the most counted); unique hashes in increasing order.
func normalizeSummary(s []prefix.SummaryEntry) []prefix.SummaryEntry {
	out := make([]prefix.SummaryEntry, len(s))
	for i, e := range s {
		next := slices.Compact(slices.Sorted(slices.Values(e.Next)))
		out[i] = prefix.SummaryEntry{Hash: e.Hash, Count: e.Count, Next: slices.Clip(next[:min(len(next), maxSketchNext)])}
	}
	if len(out) > maxSketchEntries {
		slices.SortFunc(out, func(a, b prefix.SummaryEntry) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Hash, b.Hash))
		})
		out = out[:maxSketchEntries]
	}
	slices.SortStableFunc(out, func(a, b prefix.SummaryEntry) int { return cmp.Compare(a.Hash, b.Hash) })
	return slices.CompactFunc(out, func(a, b prefix.SummaryEntry) bool { return a.Hash == b.Hash })
}

// normalizeGroups copies group counts into a record's canonical form: at
// most maxSketchEntries (the most counted), unique hashes in increasing
// order, no continuations.
func normalizeGroups(gs []prefix.SummaryEntry) []prefix.SummaryEntry {
	out := make([]prefix.SummaryEntry, len(gs))
	for i, g := range gs {
		out[i] = prefix.SummaryEntry{Hash: g.Hash, Count: g.Count}
	}
	if len(out) > maxSketchEntries {
		slices.SortFunc(out, func(a, b prefix.SummaryEntry) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Hash, b.Hash))
		})
		out = out[:maxSketchEntries]
	}
	slices.SortStableFunc(out, func(a, b prefix.SummaryEntry) int { return cmp.Compare(a.Hash, b.Hash) })
	return slices.CompactFunc(out, func(a, b prefix.SummaryEntry) bool { return a.Hash == b.Hash })
}

// sameShares reports whether two records' group counts give the same
// shares to within a tenth of each: group shares move with every request,
// and only a change that can move a group's spread is worth a publication.
func sameShares(a, b SketchRecord) bool {
	if len(a.Groups) != len(b.Groups) || (a.Requests == 0) != (b.Requests == 0) {
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
		if d := sa - sb; d > 0.1*max(sa, sb) || -d > 0.1*max(sa, sb) {
			return false
		}
	}
	return true
}

// sameKnowledge reports whether two normalized summaries hold the same
// prefixes with the same continuations: all that [MergeRecords] reads.
// Counts are not compared: they move with every request, and publishing
// each change would send every record every interval for nothing.
func sameKnowledge(a, b []prefix.SummaryEntry) bool {
	return slices.EqualFunc(a, b, func(x, y prefix.SummaryEntry) bool {
		return x.Hash == y.Hash && slices.Equal(x.Next, y.Next)
	})
}

func clampFanout(f int) int { return min(max(f, minFanout), maxSketchNext) }

// compareRecords orders two records of one node like [compare] orders
// entries: by incarnation and version, then by content for the ties only
// two processes sharing a name could produce.
func compareRecords(a, b SketchRecord) int {
	if c := cmp.Or(cmp.Compare(a.Incarnation, b.Incarnation), cmp.Compare(a.Version, b.Version)); c != 0 {
		return c
	}
	return cmp.Compare(recordFingerprint(a), recordFingerprint(b))
}

func recordFingerprint(r SketchRecord) uint64 { return xxhash.Sum64(appendSketchRecord(nil, r)) }

// MergeRecords is the shared-prefix table of a set of records: their
// summaries united by prefix.MergeSummaries at the greatest fanout among
// them, and their group counts by prefix.MergeShares. It depends on the
// set only, not on its order.
func MergeRecords(recs []SketchRecord) *prefix.Common {
	fanout := minFanout
	sums := make([][]prefix.SummaryEntry, len(recs))
	counts := make([]prefix.GroupCounts, len(recs))
	for i, r := range recs {
		fanout = max(fanout, r.Fanout)
		sums[i] = r.Summary
		counts[i] = prefix.GroupCounts{Groups: r.Groups, Requests: r.Requests}
	}
	return prefix.MergeSummaries(fanout, sums...).WithShares(prefix.MergeShares(counts...))
}

// SketchState is the set of sketch records one replica holds, one per
// node: a [core.LWW] map ordered by [compareRecords], with each record's
// fingerprint kept beside it. It is pure and not safe for concurrent use.
type SketchState struct {
	lww *core.LWW[string, SketchRecord]
	fps map[string]uint64 // node -> recordFingerprint of its record
}

// NewSketchState returns an empty sketch state.
func NewSketchState() *SketchState {
	return &SketchState{lww: core.NewLWW(func(r SketchRecord) string { return r.Node }, compareRecords),
		fps: map[string]uint64{}}
}

// Merge keeps, for every node, the newest of its known record and the ones
// in in, and returns the records that changed the state.
func (s *SketchState) Merge(in ...SketchRecord) []SketchRecord {
	changed := s.lww.Merge(in...)
	for _, r := range changed {
		s.fps[r.Node] = recordFingerprint(r)
	}
	return changed
}

// Get returns the record of node.
func (s *SketchState) Get(node string) (SketchRecord, bool) { return s.lww.Get(node) }

// Records returns all records sorted by node.
func (s *SketchState) Records() []SketchRecord { return s.lww.Values() }

// Delete forgets node's record.
func (s *SketchState) Delete(node string) {
	s.lww.Delete(node)
	delete(s.fps, node)
}

// Len returns the number of records.
func (s *SketchState) Len() int { return s.lww.Len() }

// sketchShare is a node's side of the sketch: its source, its records and
// the table last handed to onCommon. Only the merge loop (and Start,
// before it) publishes, merges and calls onCommon, so the calls are
// serialized and in order; mu guards the fields against LocalState, the
// sender and metrics.
type sketchShare struct {
	src      SketchSource
	onCommon func(*prefix.Common)
	send     chan struct{}         // our record changed: send it to all
	sendTo   chan *memberlist.Node // members that just joined: send them our record
	repair   chan sketchRepair     // records a peer's push/pull showed it lacks

	mu        sync.Mutex
	state     *SketchState
	ver       uint64
	last      SketchRecord // our last published record; Version 0: none yet
	published []recordKey  // the records table was merged from
	notified  bool         // onCommon has been called
	table     *prefix.Common
}

// sketchRepair is records to send to one member.
type sketchRepair struct {
	to   memberlist.Node
	recs []SketchRecord
}

// recordKey identifies one version of one record.
type recordKey struct {
	node     string
	inc, ver uint64
	fp       uint64
}

// ShareSketch replicates this replica's shared-prefix sketch through the
// node: Start publishes src's summary (empty or not, so that it replaces
// any record of an earlier process of this name), then every
// Config.SketchInterval the node publishes it again if its prefixes or
// continuations changed (counts alone do not count), to every live member
// over TCP; it merges the others' publications, and push/pull repairs
// what was lost. onCommon (which may be nil) receives the table merged
// from every published summary held of a live member, this replica's own
// last publication included (never its live sketch), each time that set
// changes, including right after this replica's own publication. It is
// called first from Start, then from the node's merge goroutine: one call
// at a time, in order, with no lock of the node held; it should not block
// for long. All replicas should use the same fanout; if they differ, the
// merge uses the greatest published one, so they still key alike. Call it
// before Start.
func (n *Node) ShareSketch(src SketchSource, onCommon func(*prefix.Common)) {
	n.sk = &sketchShare{src: src, onCommon: onCommon, state: NewSketchState(),
		send: make(chan struct{}, 1), sendTo: make(chan *memberlist.Node, 256), repair: make(chan sketchRepair, 64)}
}

// Common returns the shared-prefix table last handed to onCommon, nil
// before the first (or without a sketch).
func (n *Node) Common() *prefix.Common {
	if n.sk == nil {
		return nil
	}
	n.sk.mu.Lock()
	defer n.sk.mu.Unlock()
	return n.sk.table
}

// sketchRecords returns the records held; nil without a sketch.
func (n *Node) sketchRecords() []SketchRecord {
	if n.sk == nil {
		return nil
	}
	n.sk.mu.Lock()
	defer n.sk.mu.Unlock()
	return n.sk.state.Records()
}

// addSketch adds this node's sketch to a push/pull state: every record
// held on a join, their versions otherwise. Without a sketch, or before
// our first publication, nothing.
func (n *Node) addSketch(m *Message, join bool) {
	if n.sk == nil {
		return
	}
	n.sk.mu.Lock()
	published := n.sk.last.Version != 0
	recs := n.sk.state.Records()
	n.sk.mu.Unlock()
	if !published {
		return
	}
	if join {
		m.Sketches = recs
		return
	}
	m.SketchFrom = n.cfg.NodeName
	m.SketchVersions = make([]SketchVersion, len(recs))
	for i, r := range recs {
		m.SketchVersions[i] = SketchVersion{Node: r.Node, Incarnation: r.Incarnation, Version: r.Version}
	}
}

// repairSketches reads the versions a live member's push/pull says it
// holds and queues, for the sender goroutine, the records of live members
// (ours included) that we hold newer. Merge loop only.
func (n *Node) repairSketches(from string, vs []SketchVersion) {
	if from == n.cfg.NodeName {
		return
	}
	var peer *memberlist.Node
	alive := map[string]string{}
	for _, m := range n.liveMembers() {
		alive[m.Name] = m.Address()
		if m.Name == from {
			peer = &m
		}
	}
	if peer == nil {
		return
	}
	held := make(map[string]SketchVersion, len(vs))
	for _, v := range vs {
		held[v.Node] = v
	}
	var recs []SketchRecord
	n.sk.mu.Lock()
	for _, r := range n.sk.state.Records() {
		if !n.countsSketch(r, alive) {
			continue
		}
		v, ok := held[r.Node]
		if !ok || cmp.Or(cmp.Compare(r.Incarnation, v.Incarnation), cmp.Compare(r.Version, v.Version)) > 0 {
			recs = append(recs, r)
		}
	}
	n.sk.mu.Unlock()
	if len(recs) == 0 {
		return
	}
	select {
	case n.sk.repair <- sketchRepair{to: *peer, recs: recs}:
	default:
		n.met.dropped.WithLabelValues("send_queue_full").Inc()
	}
}

// publishSketch takes the source's summary and publishes it if it differs
// from the last publication (in prefixes or continuations), or our
// incarnation or fanout changed, or force. Merge loop (or Start) only.
func (n *Node) publishSketch(force bool) {
	sk := n.sk
	sum := normalizeSummary(sk.src.Summary())
	gc := sk.src.Groups()
	fanout := clampFanout(sk.src.Fanout())
	n.mu.Lock()
	inc := n.inc
	n.mu.Unlock()
	sk.mu.Lock()
	last := sk.last
	rec := SketchRecord{Node: n.cfg.NodeName, Addr: n.addr, Incarnation: inc, Fanout: fanout, Summary: sum,
		Groups: normalizeGroups(gc.Groups), Requests: gc.Requests}
	if !force && last.Version != 0 && last.Incarnation == inc && last.Fanout == fanout &&
		sameKnowledge(last.Summary, sum) && sameShares(last, rec) {
		sk.mu.Unlock()
		return
	}
	sk.ver++
	rec.Version = sk.ver
	sk.state.Merge(rec)
	sk.last = rec
	sk.mu.Unlock()
	select {
	case sk.send <- struct{}{}:
	default: // a send is already due; it will carry this record
	}
	n.refreshSketch()
}

// tickSketch runs every SketchInterval: publish, then forget the records
// of nodes that are neither members nor hold a load entry here (their
// entry was forgotten, ForgetAfter after their last stamp).
func (n *Node) tickSketch() {
	n.publishSketch(false)
	alive := n.aliveAddrs()
	n.mu.Lock()
	entries := map[string]bool{}
	for _, e := range n.view.Table().Entries() {
		entries[e.Node] = true
	}
	n.mu.Unlock()
	n.sk.mu.Lock()
	for _, r := range n.sk.state.Records() {
		if _, ok := alive[r.Node]; !ok && !entries[r.Node] && r.Node != n.cfg.NodeName {
			n.sk.state.Delete(r.Node)
		}
	}
	n.sk.mu.Unlock()
	n.refreshSketch()
}

func (n *Node) aliveAddrs() map[string]string {
	members := n.liveMembers()
	alive := make(map[string]string, len(members))
	for _, m := range members {
		alive[m.Name] = m.Address()
	}
	return alive
}

// mergeSketches merges records heard from a peer. Merge loop only.
func (n *Node) mergeSketches(in []SketchRecord) {
	alive := n.aliveAddrs()
	sk := n.sk
	sk.mu.Lock()
	last := sk.last
	keep, outran := in[:0], uint64(0)
	for _, r := range in {
		switch addr, known := alive[r.Node]; {
		case r.Node == n.cfg.NodeName:
			// Ours, but not written by this process: an earlier
			// incarnation at our address that outran ours must be
			// superseded (the next tick republishes under the raised
			// incarnation); another address is a name conflict.
			if r.Addr == n.addr && compareRecords(r, last) > 0 {
				outran = max(outran, r.Incarnation)
			}
		case known && addr != r.Addr:
			n.met.dropped.WithLabelValues("name_conflict").Inc()
		default:
			keep = append(keep, r)
		}
	}
	changed := sk.state.Merge(keep...)
	sk.mu.Unlock()
	if outran != 0 {
		n.mu.Lock()
		n.inc = max(n.inc, outran) + 1
		n.lastT = time.Time{} // the load entry too
		n.mu.Unlock()
	}
	if len(changed) > 0 {
		n.refreshSketch()
	}
}

// countsSketch reports whether r's summary counts: ours, or a live
// member's at the address memberlist lists for it.
func (n *Node) countsSketch(r SketchRecord, alive map[string]string) bool {
	addr, ok := alive[r.Node]
	return r.Node == n.cfg.NodeName || ok && addr == r.Addr
}

// refreshSketch merges the table from the records of live members (ours
// included) and hands it to onCommon if that set of records changed.
// Merge loop (or Start) only; no lock held while onCommon runs.
func (n *Node) refreshSketch() {
	sk := n.sk
	if sk == nil {
		return
	}
	alive := n.aliveAddrs()
	sk.mu.Lock()
	var keys []recordKey
	var use []SketchRecord
	for _, r := range sk.state.Records() {
		if n.countsSketch(r, alive) {
			keys = append(keys, recordKey{r.Node, r.Incarnation, r.Version, sk.state.fps[r.Node]})
			use = append(use, r)
		}
	}
	if sk.notified && slices.Equal(keys, sk.published) {
		sk.mu.Unlock()
		return
	}
	sk.published, sk.notified = keys, true
	sk.mu.Unlock()
	table := MergeRecords(use) // records are immutable: no lock needed
	sk.mu.Lock()
	sk.table = table
	sk.mu.Unlock()
	n.met.sketchPrefixes.Set(float64(table.Len()))
	n.met.sketchSummaries.Set(float64(len(use)))
	if sk.onCommon != nil {
		sk.onCommon(table)
	}
}

// queueSketch owes a newcomer our record. Non-blocking: memberlist holds
// its lock in NotifyJoin.
func (n *Node) queueSketch(to *memberlist.Node) {
	if n.sk == nil {
		return
	}
	select {
	case n.sk.sendTo <- to:
	default:
		n.met.dropped.WithLabelValues("send_queue_full").Inc()
	}
}

// sendRepair sends a member the records it lacks. Sender goroutine only.
func (n *Node) sendRepair(r sketchRepair) {
	msg := EncodeSketch(r.recs...)
	if err := n.ml.SendReliable(&r.to, msg); err != nil {
		n.met.dropped.WithLabelValues("send_error").Inc()
		return
	}
	n.met.sent("sketch", len(msg))
}

// sendSketch sends our last published record to the members given, or to
// every other live member when none is. Sender goroutine only.
func (n *Node) sendSketch(to ...*memberlist.Node) {
	n.sk.mu.Lock()
	rec := n.sk.last
	n.sk.mu.Unlock()
	if rec.Version == 0 {
		return
	}
	if len(to) == 0 {
		members := n.liveMembers()
		for i := range members {
			if members[i].Name != n.cfg.NodeName {
				to = append(to, &members[i])
			}
		}
	}
	msg := EncodeSketch(rec)
	for _, m := range to {
		if err := n.ml.SendReliable(m, msg); err != nil {
			n.met.dropped.WithLabelValues("send_error").Inc()
			continue
		}
		n.met.sent("sketch", len(msg))
	}
}
