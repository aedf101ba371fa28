package ring

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// A grouped request (Request.Group with Spread > 0) is placed by two
// rendezvous (highest random weight) hashes instead of the ring:
//
//   - The group ranks the usable endpoints by hash(group, endpoint). Its set
//     is the first floor(Spread) of them at weight 1, and the next at
//     weight Spread - floor(Spread): a fractional spread grows the set by
//     degrees instead of a whole endpoint at a time.
//   - The request's key ranks the set by weighted rendezvous: endpoint e of
//     weight w scores w / -ln(u), u = hash(key, e) in (0, 1), so e takes a
//     share w / Σw of the group's keys. The highest is the home, the rest of
//     the set follows, then the rest of the group's ranking, so a group's
//     overflow goes where its next requests will.
//
// Both rankings are consistent: an endpoint that joins takes only the keys
// it now wins, and a spread that grows by δ hands the set's boundary
// endpoint about δ/Spread of the group's keys, taken from the others. So
// a 9th endpoint moves about 1/9 of a group's picks whatever its share
// (before, rounding the set up to whole endpoints moved 1/(m+1) of a group's
// picks wherever ceil(GroupSpread·n·share) crossed an integer m, and the
// key's ring walk inside the set moved picks of groups the new endpoint
// never joined). TestGroupSpreadMovementAddNinth and
// TestGroupSpreadMovementShareDrift measure it.

// Domain tags keep the group's and the key's hashes of one endpoint apart.
const (
	tagGroup = 'g'
	tagKey   = 'k'
)

// rendezvous is the hash of (tag, v, id), with a separator between the
// fixed-width value and the endpoint ID.
func rendezvous(tag byte, v uint64, id string) uint64 {
	var b [10]byte
	b[0] = tag
	binary.LittleEndian.PutUint64(b[1:9], v)
	var d xxhash.Digest
	d.Reset()
	_, _ = d.Write(b[:])
	_, _ = d.WriteString(id)
	return d.Sum64()
}

// unit maps a hash to (0, 1), never 0 or 1.
func unit(h uint64) float64 { return (float64(h>>11) + 0.5) / (1 << 53) }

type ranked struct {
	i     int
	hash  uint64  // the group's rendezvous hash
	score float64 // the key's weighted score
}

// byHash and byScore order highest first, ties by endpoint index, so every
// replica ranks alike.
func byHash(a, b ranked) int {
	switch {
	case a.hash > b.hash:
		return -1
	case a.hash < b.hash:
		return 1
	}
	return a.i - b.i
}

func byScore(a, b ranked) int {
	switch {
	case a.score > b.score:
		return -1
	case a.score < b.score:
		return 1
	}
	return byHash(a, b)
}

// groupedOrder appends to dst the candidate order of a grouped request:
// the key's weighted ranking of the group's set, then the rest of the
// group's ranking of the usable endpoints.
func (r *Ring) groupedOrder(req Request, s *State, dst []int) []int {
	group := make([]ranked, 0, len(r.ids))
	for i, id := range r.ids {
		if s.usable(r, i, req.Exclude) {
			group = append(group, ranked{i: i, hash: rendezvous(tagGroup, req.Group, id)})
		}
	}
	slices.SortFunc(group, byHash)
	spread := min(req.Spread, float64(len(group)))
	full := int(spread)
	frac := spread - float64(full)
	size := full
	if frac > 0 {
		size++
	}
	set := group[:size:size]
	for k := range set {
		w := 1.0
		if k == full {
			w = frac
		}
		u := unit(rendezvous(tagKey, req.Key, r.ids[set[k].i]))
		set[k].score = w / -math.Log(u)
	}
	slices.SortFunc(set, byScore)
	for _, e := range group {
		dst = append(dst, e.i)
	}
	return dst
}

// pickGrouped is Pick for a request whose Group is spread over Spread
// endpoints: the first of groupedOrder within the bound (the first at the
// home's bound), else the least loaded.
func (r *Ring) pickGrouped(req Request, s *State, w, limit, hw, hlimit int64) (int, Decision, error) {
	var buf [64]int
	for k, i := range r.groupedOrder(req, s, buf[:0]) {
		if k == 0 {
			if s.load(r.ids[i])+hw <= hlimit {
				return i, DecisionHome, nil
			}
			continue
		}
		if s.load(r.ids[i])+w <= limit {
			return i, DecisionSpill, nil
		}
	}
	i := r.leastLoaded(req, s)
	if i < 0 {
		return -1, DecisionFallback, ErrNoEndpoints
	}
	return i, DecisionFallback, nil
}
