package prefix

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// ShareTag is the tag of the sketch's section in a gossip message.
const ShareTag = 2

// Source is what a replica publishes of its sketch; [Live] implements it.
// A [Share] calls it from [Share.Publish], and copies what it returns.
type Source interface {
	// Summary is the summary to publish (Sketch.Summary(k)).
	Summary() []SummaryEntry
	// Groups are the group counts to publish (Sketch.Groups(k)).
	Groups() GroupCounts
	// Fanout is the number of continuations that makes a prefix shared.
	Fanout() int
}

// ShareConfig is what a [Share] needs of the replica and the cluster it
// shares with.
type ShareConfig struct {
	// Name is this replica's name in the gossip cluster.
	Name string
	// Members returns the cluster's live members, name -> gossip address,
	// this replica included (gossip's Node.Members). A record counts
	// while its node is a live member at the record's address.
	Members func() map[string]string
	// OnCommon, if set, receives the table merged from the published
	// records that count, each time that set of records changes.
	OnCommon func(*Common)
	// ForgetAfter is how long the record of a node that is no member is
	// kept (it counts again if the node comes back). Default: one minute,
	// gossip's default for load entries.
	ForgetAfter time.Duration
	// Now is the clock, for forgetting; nil: time.Now.
	Now func() time.Time
}

// Share replicates one replica's shared-prefix sketch through gossip: it
// implements the gossip node's payload (Tag, Local, State, Merge,
// Changed). [Share.Publish] takes the source's summary and publishes it if
// its prefixes or continuations changed (counts alone do not count), or
// its group shares moved by more than a tenth; the node then sends it to
// every live member, and to each member that joins. A join's push/pull
// carries every record held, a periodic one their versions only: the peer
// answers with the records it holds newer (anti-entropy at a few dozen
// bytes a record instead of every summary every push/pull).
//
// The table is merged from published records only, this replica's own
// last publication included, never its live sketch: so every replica keys
// with the same table. OnCommon calls are serialized, in order, with no
// lock of the share held; OnCommon should not block for long.
type Share struct {
	src     Source
	cfg     ShareConfig
	changed chan struct{}

	callMu sync.Mutex // serializes refresh, so OnCommon sees tables in order

	mu        sync.Mutex // guards everything below
	table     *recordTable
	inc, ver  uint64
	last      SketchRecord // our last published record; Version 0: none yet
	published []recordKey  // the records the table was merged from
	notified  bool         // OnCommon has been called
	common    *Common
	seen      map[string]time.Time // when each node was last a member
	stats     ShareStats
}

// ShareStats are a share's figures, for metrics.
type ShareStats struct {
	// Prefixes is the number of prefixes in the table; Summaries the
	// number of records it was merged from.
	Prefixes, Summaries int
	// NameConflicts counts records dropped because a live member holds
	// their node's name at another address.
	NameConflicts uint64
}

// recordKey identifies one version of one record.
type recordKey struct {
	node     string
	inc, ver uint64
	fp       uint64
}

// NewShare returns a share of src. Its incarnation starts at 1 and reads
// no clock: on hearing of a record of its name it did not write (a
// predecessor's, at any address), the share takes an incarnation above
// it, so a restarted replica's records replace its predecessor's even on
// a host whose clock is behind.
func NewShare(src Source, cfg ShareConfig) *Share {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ForgetAfter <= 0 {
		cfg.ForgetAfter = time.Minute
	}
	if cfg.Members == nil {
		cfg.Members = func() map[string]string { return nil }
	}
	return &Share{src: src, cfg: cfg, changed: make(chan struct{}, 1), table: newRecordTable(),
		inc: 1, seen: map[string]time.Time{}}
}

// Tag is the share's section tag, [ShareTag].
func (s *Share) Tag() byte { return ShareTag }

// Changed fires when this replica published a new record.
func (s *Share) Changed() <-chan struct{} { return s.changed }

// Local is our last published record, nil before the first publication.
func (s *Share) Local() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last.Version == 0 {
		return nil
	}
	return appendRecords(nil, s.last)
}

// State is the share's part of a push/pull: every record held on a join,
// their versions otherwise; nil before our first publication.
func (s *Share) State(join bool) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last.Version == 0 {
		return nil
	}
	recs := s.table.Records()
	if join {
		return appendRecords(nil, recs...)
	}
	vs := make([]SketchVersion, len(recs))
	for i, r := range recs {
		vs[i] = SketchVersion{Node: r.Node, Incarnation: r.Incarnation, Version: r.Version}
	}
	return appendVersions(nil, vs...)
}

// Merge merges a section peer from sent: records are merged, versions
// answered with the records of live members we hold newer (reply, to be
// sent back to from).
func (s *Share) Merge(from string, b []byte) (reply []byte, err error) {
	recs, versions, err := decodeSection(b)
	if err != nil {
		return nil, err
	}
	if versions != nil {
		return s.repair(from, versions), nil
	}
	s.merge(recs)
	return nil, nil
}

// Publish takes the source's summary and publishes it if it differs from
// the last publication (in prefixes, continuations or group shares), or
// our incarnation or fanout changed, or force. The first publication
// should be forced (an empty summary must still replace the record of an
// earlier process of this name).
func (s *Share) Publish(force bool) {
	sum := normalizeSummary(s.src.Summary())
	gc := s.src.Groups()
	fanout := clampFanout(s.src.Fanout())
	addr := s.cfg.Members()[s.cfg.Name]
	s.mu.Lock()
	last := s.last
	rec := SketchRecord{Node: s.cfg.Name, Addr: addr, Incarnation: s.inc, Fanout: fanout, Summary: sum,
		Groups: normalizeGroups(gc.Groups), Requests: gc.Requests}
	if !force && last.Version != 0 && last.Incarnation == s.inc && last.Fanout == fanout && last.Addr == addr &&
		sameKnowledge(last.Summary, sum) && sameShares(last, rec) {
		s.mu.Unlock()
		return
	}
	s.ver++
	rec.Version = s.ver
	s.table.Merge(rec)
	s.last = rec
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default: // a send is already due; it will carry this record
	}
	s.Refresh()
}

// Tick publishes (if the summary changed), forgets the records of nodes
// that have been no member for ForgetAfter, and refreshes the table. Call
// it every sketch interval.
func (s *Share) Tick() {
	s.Publish(false)
	alive := s.cfg.Members()
	now := s.cfg.Now()
	s.mu.Lock()
	for node := range alive {
		s.seen[node] = now
	}
	for _, r := range s.table.Records() {
		if _, ok := alive[r.Node]; ok || r.Node == s.cfg.Name {
			continue
		}
		if at, ok := s.seen[r.Node]; !ok || now.Sub(at) > s.cfg.ForgetAfter {
			s.table.Delete(r.Node)
			delete(s.seen, r.Node)
		}
	}
	s.mu.Unlock()
	s.Refresh()
}

// merge merges records heard from a peer.
func (s *Share) merge(in []SketchRecord) {
	alive := s.cfg.Members()
	now := s.cfg.Now()
	s.mu.Lock()
	keep := in[:0]
	for _, r := range in {
		switch addr, known := alive[r.Node]; {
		case r.Node == s.cfg.Name:
			// Ours, but not written by this process: an earlier
			// process of our name, at our address or another (the
			// gossip node gave us the name, so it is dead), must be
			// superseded: the next tick republishes under the raised
			// incarnation.
			if compareRecords(r, s.last) > 0 {
				s.inc = max(s.inc, r.Incarnation) + 1
			}
		case known && addr != r.Addr:
			s.stats.NameConflicts++
		default:
			if known {
				s.seen[r.Node] = now
			}
			keep = append(keep, r)
		}
	}
	changed := s.table.Merge(keep...)
	s.mu.Unlock()
	if len(changed) > 0 {
		s.Refresh()
	}
}

// repair returns the records of live members (ours included) that we hold
// newer than the versions a peer's push/pull says it holds, encoded; nil
// when it holds them all.
func (s *Share) repair(from string, vs []SketchVersion) []byte {
	if from == s.cfg.Name {
		return nil
	}
	alive := s.cfg.Members()
	held := make(map[string]SketchVersion, len(vs))
	for _, v := range vs {
		held[v.Node] = v
	}
	var recs []SketchRecord
	s.mu.Lock()
	for _, r := range s.table.Records() {
		if !s.counts(r, alive) {
			continue
		}
		v, ok := held[r.Node]
		if !ok || cmp.Or(cmp.Compare(r.Incarnation, v.Incarnation), cmp.Compare(r.Version, v.Version)) > 0 {
			recs = append(recs, r)
		}
	}
	s.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	return appendRecords(nil, recs...)
}

// counts reports whether r's summary counts: ours, or a live member's at
// the address the cluster lists for it.
func (s *Share) counts(r SketchRecord, alive map[string]string) bool {
	addr, ok := alive[r.Node]
	return r.Node == s.cfg.Name || ok && addr == r.Addr
}

// Refresh merges the table from the records that count and hands it to
// OnCommon if that set of records changed since the last call. Publish,
// Tick and merges call it; call it too when the membership changed.
func (s *Share) Refresh() {
	s.callMu.Lock()
	defer s.callMu.Unlock()
	alive := s.cfg.Members()
	s.mu.Lock()
	var keys []recordKey
	var use []SketchRecord
	for _, r := range s.table.Records() {
		if s.counts(r, alive) {
			keys = append(keys, recordKey{r.Node, r.Incarnation, r.Version, s.table.fps[r.Node]})
			use = append(use, r)
		}
	}
	if s.notified && slices.Equal(keys, s.published) {
		s.mu.Unlock()
		return
	}
	s.published, s.notified = keys, true
	s.mu.Unlock()
	table := MergeRecords(use) // records are immutable: no lock needed
	s.mu.Lock()
	s.common = table
	s.stats.Prefixes, s.stats.Summaries = table.Len(), len(use)
	s.mu.Unlock()
	if s.cfg.OnCommon != nil {
		s.cfg.OnCommon(table)
	}
}

// Common returns the table last handed to OnCommon, nil before the first.
func (s *Share) Common() *Common {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.common
}

// Records returns the records held, sorted by node.
func (s *Share) Records() []SketchRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table.Records()
}

// Last returns our last published record; its Version is 0 before the
// first publication.
func (s *Share) Last() SketchRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Stats returns the share's figures.
func (s *Share) Stats() ShareStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}
