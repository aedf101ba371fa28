package ring

import (
	"encoding/binary"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// A grouped request (Request.Group with Spread > 0) is placed by two
// rendezvous (highest random weight) hashes instead of the ring:
//
//   - The group draws a number u(group, e) in (0, 1) for each usable
//     endpoint e. Its set is the endpoints whose u is below p =
//     Spread / n, n the healthy endpoints, or, when there is none, the one
//     of least u. Each endpoint is in the set with probability p, so the
//     set holds Spread endpoints on average, and whether e is in depends
//     on e, the group and p alone, not on the other endpoints.
//   - The request's key ranks the set by hash(key, e), highest first: that
//     is its home. The rest of the set follows, then the other usable
//     endpoints by u, so a group's overflow goes where its next requests
//     will.
//   - A group placed by its keys alone (share unknown, shared part short:
//     [byKey]) has the fleet for its set, ranked the same way, so when its
//     share arrives a key whose home is in the new set keeps it: the
//     highest hash over a set is the highest over the fleet whenever the
//     fleet's highest is in the set.
//
// Both choices are consistent. An endpoint that joins enters the sets of
// a share p of the groups (p is GroupSpread·share, whatever n is) and
// takes only the keys it now wins there; no other endpoint enters or
// leaves a set, so a 9th endpoint moves about 1/9 of a group's picks at
// every share. A share that grows lets in only the endpoints whose u it
// passes. Before, the set was the first ceil(Spread) endpoints of the
// group's ring walk: growing it moved 1/(m+1) of a group's picks
// wherever ceil(GroupSpread·n·share) crossed an integer m, and even a set
// of the same size moved the picks of groups the new endpoint never
// joined, through the key's ring walk (TestGroupSpreadMovementAddNinth,
// TestGroupSpreadMovementShareDrift). A rank-based set of exactly Spread
// endpoints cannot do better than about (2 - Spread/n)/n: where the new
// endpoint is not among a group's first, the set must still grow among
// the old ones. The price is the set's size: Binomial(n, p) with the
// floor of 1, not exactly Spread.

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
func unitInterval(h uint64) float64 { return (float64(h>>11) + 0.5) / (1 << 53) }

type ranked struct {
	i    int
	hash uint64
}

// byHash orders highest hash first, ties by endpoint index, so every
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

// groupedOrder appends to dst the candidate order of a grouped request:
// the key's ranking of the group's set, then the other usable endpoints in
// the group's order.
func (r *Ring) groupedOrder(req Request, spread float64, s *State, dst []int) []int {
	var buf [64]ranked // on the stack up to 64 endpoints
	group := buf[:0]
	for i, id := range r.ids {
		if s.usable(r, i, req.Exclude) {
			// Highest hash first is least u first: u = 1 - unitInterval(hash).
			group = append(group, ranked{i, rendezvous(tagGroup, req.Group, id)})
		}
	}
	slices.SortFunc(group, byHash)
	p := spread / float64(max(s.nHealthy, 1))
	size := min(1, len(group))
	for size < len(group) && 1-unitInterval(group[size].hash) < p {
		size++
	}
	for _, e := range group[:size] {
		dst = append(dst, e.i)
	}
	// Rank the set by the key's hashes, in place of the group's.
	set := group[:size]
	for k := range set {
		set[k].hash = rendezvous(tagKey, req.Key, r.ids[set[k].i])
	}
	slices.SortFunc(set, byHash)
	for k, e := range set {
		dst[len(dst)-size+k] = e.i
	}
	for _, e := range group[size:] {
		dst = append(dst, e.i)
	}
	return dst
}

// groupedHome is groupedOrder's first endpoint, found without ordering
// the rest: the set's member of highest key hash, the set being every
// usable endpoint whose u is below p, or the one of least u when none
// is. One or two hashes an endpoint and no sort: a pick whose home takes
// it costs O(n), and only a spill pays for the whole order
// (BenchmarkAcquireGrouped). -1: no usable endpoint.
func (r *Ring) groupedHome(req Request, spread float64, s *State) int {
	p := spread / float64(max(s.nHealthy, 1))
	home, least := ranked{i: -1}, ranked{i: -1} // least: the usable endpoint of least u
	// first reports whether e ranks before best, byHash's order.
	first := func(e, best ranked) bool { return best.i < 0 || byHash(e, best) < 0 }
	for i, id := range r.ids {
		if !s.usable(r, i, req.Exclude) {
			continue
		}
		if p < 1 { // else every usable endpoint is in the set: u < 1 <= p
			g := ranked{i, rendezvous(tagGroup, req.Group, id)}
			if first(g, least) {
				least = g
			}
			if 1-unitInterval(g.hash) >= p {
				continue
			}
		}
		if k := (ranked{i, rendezvous(tagKey, req.Key, id)}); first(k, home) {
			home = k
		}
	}
	if home.i < 0 {
		return least.i
	}
	return home.i
}

// pickGrouped is Pick for a request whose Group is spread over Spread
// endpoints: the first of groupedOrder within the bound (the first at the
// home's bound), else the least loaded. As on the ring, a request whose
// home it excludes (a retry after the home failed) has no home: it walks
// the order from its first usable endpoint at the walk's bound, and what
// takes it is a fallback, not its home or a spill.
func (r *Ring) pickGrouped(req Request, pw *weights, s *State, w, limit, hw, hlimit int64) (int, Decision, error) {
	// The home over every healthy endpoint, as the ring's walk finds it
	// before it skips the ones the request excludes.
	nominal := req
	nominal.Exclude = nil
	home := r.groupedHome(nominal, pw.spread, s)
	homeUsable := home >= 0 && !slices.Contains(req.Exclude, r.ids[home])
	if homeUsable && s.fits(r, home, hw, hlimit, pw, req.Group) {
		return home, DecisionHome, nil
	}
	var buf [64]int
	for _, i := range r.groupedOrder(req, pw.spread, s, buf[:0]) {
		if homeUsable && i == home {
			continue // the home, which did not fit
		}
		if s.fits(r, i, w, limit, pw, req.Group) {
			if homeUsable {
				return i, DecisionSpill, nil
			}
			return i, DecisionFallback, nil
		}
	}
	i := r.leastLoaded(req, s)
	if i < 0 {
		return -1, DecisionFallback, ErrNoEndpoints
	}
	return i, DecisionFallback, nil
}
