package ring

import (
	"math"
	"slices"
)

// Decision says why a request went where it went. Operators read it in the
// X-Prefixring-Decision header and in metrics.
type Decision uint8

const (
	// DecisionHome: the key's home endpoint took the request.
	DecisionHome Decision = iota
	// DecisionSpill: the home was over the bound; a later candidate took it.
	DecisionSpill
	// DecisionFallback: not placed by affinity: the request had no key, its
	// home was unhealthy or already tried, or no candidate was within the
	// bound, so a later candidate or the least loaded endpoint took it.
	DecisionFallback
)

var decisionNames = [...]string{"home", "spill", "fallback"}

func (d Decision) String() string {
	if int(d) < len(decisionNames) {
		return decisionNames[d]
	}
	return "unknown"
}

// Loads is the in-flight load the bound reads. The local [Inflight] counters
// implement it; the gossip layer wraps them to add other replicas' counts.
type Loads interface {
	// Load returns the in-flight requests on endpoint id.
	Load(id string) int64
	// Total returns the in-flight requests on all endpoints.
	Total() int64
}

// Request is what a placement policy sees of one request.
type Request struct {
	// Key is the affinity key. For an unkeyed request it only breaks ties.
	Key uint64
	// Keyed is false for a request with no affinity key: it goes to the
	// least loaded endpoint.
	Keyed bool
	// Exclude lists endpoint IDs already tried for this request.
	Exclude []string
	// Session marks a key that is a client's session id (the session
	// header), not a prompt prefix: the session policy reads it.
	Session bool
	// Group is the key of the prompt's shared part alone (the system
	// prompt and tools of a chat, the shared preamble of a completion): the
	// prefix-key policy's key. 0: none.
	Group uint64
	// Blocks are the chained hashes of the whole prompt, one per
	// prefix.ChunkChars characters (the last one may cover a shorter
	// tail): what the tree-based policies match on. Nil unless a policy
	// that reads them runs.
	Blocks []uint64
	// Tokens is the request's estimated prompt length in tokens (0:
	// unknown). Under [SignalTokens] it is the request's weight until its
	// prefill is over; under every signal it is what the request holds in
	// its engine's KV cache until it ends (see [Inflight.KV]).
	Tokens int64
	// NewTokens estimates the prompt tokens its key's home has not cached
	// (0: all of Tokens): under [SignalTokens], a chat's messages after the
	// last assistant message, since its earlier turns went home too.
	NewTokens int64
	// NewKnown says that NewTokens is known (a chat's, whose turns the
	// router tells apart; a first turn's are all new), not a guess (a
	// completion, sent as one growing prompt). Under [SignalTokens] such a
	// request, when its key alone places it (no group spread) or it is a
	// later turn (NewTokens below the tokens after SharedTokens), is
	// bounded without [Config.MinBound]: the home's slack weighs what the
	// home holds of it.
	NewKnown bool
	// SharedTokens estimates the tokens of the prompt's shared part (what
	// Group covers): a recurring group's home holds them, and an engine
	// holds them once for all the group's requests in flight there.
	SharedTokens int64
	// GroupShare is the Group's share of the cluster's requests (0:
	// unknown); with [Config.GroupSpread] the balancer spreads the group
	// over endpoints in proportion to it.
	GroupShare float64
	// EarlyShare says GroupShare was counted over fewer requests than a
	// settled share (prefix.Shares). The balancer then takes it only for a
	// group it would hold on one endpoint that the endpoint's bound
	// cannot hold, a share of at least c/n of the requests on n healthy
	// endpoints, and that the share spreads over every endpoint; any
	// other group is of unknown share until its share settles.
	EarlyShare bool
	// Follow is an endpoint that holds more of the key's history than
	// its home: where the key's last turn spilled (policy.Follow
	// remembers it). A keyed pick tries it first, weighed and bounded as
	// the home is (its new tokens, the home's slack), and takes it as
	// DecisionSpill, its lease counting the new tokens in P as the home's
	// would; else the usual walk. Empty: none.
	Follow string
}

// weights are what the [Balancer] derives from a [Request] before a pick
// ([Config.weights]): the request's own, not the caller's.
type weights struct {
	// p is what the request adds to P, its endpoint's load in the
	// Signal's unit, until its prefill is over; at least 1.
	p int64
	// homeP is p at the key's home (0: p), and homeSlack widens the home's
	// bound (see [Config.homeWeights]).
	homeP, homeSlack int64
	// spread, when above 0, spreads the request's Group over that many
	// endpoints, a fraction counting as an endpoint that takes that
	// fraction of a full one's share, and its Key picks among them (see
	// ring/spread.go); 0: the Key alone places the request on the ring;
	// [byKey]: the Key alone, by the hash a group's set is ranked by.
	spread float64
	// noFloor: P's bound has no floor for this request (see
	// [Config.weights]).
	noFloor bool
	// kv is what the request adds to K, its endpoint's KV tokens, from
	// the pick until it ends, besides its group's shared part; kvShared is
	// that part (Request.SharedTokens of a Group), counted once per
	// endpoint while any request of the group is in flight there.
	kv, kvShared int64
	// tokens and homeTokens are p and homeP under [SignalTokens], whatever
	// the signal: what [Pace] weighs the request's time to first token by.
	tokens, homeTokens int64
}

// unit are the weights of a request counted as one, with no KV.
var unit = weights{p: 1}

// Bound is the request-level bound of CHWBL (Mirrokni, Thorup and
// Zadimoghaddam) as HAProxy applies it: an endpoint may take a request only
// if, with it, it holds at most ceil(LoadFactor·(total+1)/n) requests, n the
// healthy endpoints and total the in-flight requests before this one. Min,
// when above that, lets every endpoint hold Min requests whatever the total:
// an inference engine batches many requests at once, so at low load a key
// can stay home without hurting balance.
type Bound struct {
	// LoadFactor is c, >= 1.
	LoadFactor float64
	// Min is the floor: every endpoint may hold Min requests. 0 and 1 both
	// give the textbook bound.
	Min int64
	// Own raises the floor for a request of weight w to (1+Own)·w: an
	// endpoint may take a request while it holds no more than Own times the
	// request's own weight. 0 is the textbook bound; under [SignalTokens]
	// the balancer uses 1: waiting behind at most one's own prefill costs
	// no more than the prefill itself, whatever the rest of the fleet does.
	Own float64
}

// Slots returns the most requests an endpoint may hold, the new one
// included, when total are in flight on n healthy endpoints; at least 1.
func (b Bound) Slots(total int64, n int) int64 { return b.Limit(total, 1, n) }

// Limit returns the most load an endpoint may hold once it takes a request
// of weight w, when total is in flight on n healthy endpoints:
// max(ceil(c·(total+w)/n), Min, (1+Own)·w). The last term lets an idle
// endpoint take any request.
func (b Bound) Limit(total, w int64, n int) int64 {
	if n <= 0 {
		return 0
	}
	slots := int64(math.Ceil(b.LoadFactor * float64(total+w) / float64(n)))
	return max(slots, b.Min, w+int64(b.Own*float64(w)))
}

// State is what a pick reads besides the placement: which endpoints are
// healthy, the loads the bound reads and the bound. It is immutable; the
// [Balancer] keeps one per snapshot.
type State struct {
	healthy  []bool // nil: all healthy
	nHealthy int
	loads    Loads // nil: every load is zero
	bound    Bound
	kv       kvState
	pace     *Pace // nil: every endpoint at its own pace
	quietP   int64 // the most P a quiet endpoint holds (Signal.quietLoad)
}

// NewState returns the state of a pick over r. healthy[i] reports whether
// endpoint i of r may take requests (nil: all may); loads is what the bound
// reads (nil: all zero).
func NewState(r *Ring, healthy []bool, loads Loads, b Bound) *State {
	s := &State{healthy: healthy, nHealthy: len(r.ids), loads: loads, bound: b}
	if healthy != nil {
		s.nHealthy = 0
		for _, h := range healthy {
			if h {
				s.nHealthy++
			}
		}
	}
	return s
}

// Healthy reports whether endpoint i may take requests.
func (s *State) Healthy(i int) bool { return s.healthy == nil || s.healthy[i] }

func (s *State) usable(r *Ring, i int, exclude []string) bool {
	return s.Healthy(i) && !slices.Contains(exclude, r.ids[i])
}

func (s *State) load(id string) int64 {
	if s.loads == nil {
		return 0
	}
	return s.loads.Load(id)
}

// Bound returns the most in-flight load an endpoint may hold once it takes
// the next request of weight 1 (see [Bound.Slots]): an endpoint takes it
// while its load is below this.
func (s *State) Bound() int64 { return s.Limit(1) }

// Limit is [Bound.Limit] over the current loads: the most an endpoint may
// hold once it takes a request of weight w.
func (s *State) Limit(w int64) int64 { return s.limit(w, false) }

// limit is Limit, without the bound's floor when noFloor is set.
func (s *State) limit(w int64, noFloor bool) int64 {
	var total int64
	if s.loads != nil {
		total = s.loads.Total()
	}
	b := s.bound
	if noFloor {
		b.Min = 0
	}
	return b.Limit(total, w, s.nHealthy)
}

// Pick chooses the endpoint for req, counted as one request: the first
// of the key's candidates that is usable and within the bound, else the
// least loaded usable endpoint. It returns the endpoint's index, or
// ErrNoEndpoints when none is usable. The [Balancer] picks with the
// request's weights in its Signal, and bounds K as well.
func (r *Ring) Pick(req Request, s *State) (int, Decision, error) { return r.pick(req, unit, s) }

// fits reports whether endpoint i may take a request of P weight w under
// P limit limit, and K weights pw.kv and pw.kvShared of group.
func (s *State) fits(r *Ring, i int, w, limit int64, pw *weights, group uint64) bool {
	id := r.ids[i]
	return s.paced(id, s.load(id)+w) <= limit && s.kv.fits(r, i, s.nHealthy, pw, group)
}

// quietness is what an endpoint held when a request was sent there: so
// little that the request's answer times the engine's pace, not its
// queue (quiet); more than P's default floor of prefill (busyPrefill),
// which a streamed answer's first token waits behind; or, where its KV
// capacity is known, more than half of it in K (busyMemory), which any
// answer may wait for. An answer sent whole is timed by its decode, which
// batching barely slows, so only memory makes it the queue's. A slow
// engine is quiet at light load, where P's bound alone never steers off
// it; a busy one's answers are slow because it is busy, which the bound
// already weighs.
type quietness uint8

const (
	quiet quietness = iota
	busyPrefill
	busyMemory
)

// quiet reports endpoint i's quietness (see [quietness]).
func (s *State) quiet(r *Ring, i int) quietness {
	id := r.ids[i]
	if i < len(s.kv.cap) && s.kv.cap[i] > 0 && s.kv.loads != nil && s.kv.loads.Load(id) > s.kv.cap[i]/2 {
		return busyMemory
	}
	if s.load(id) > s.quietP {
		return busyPrefill
	}
	return quiet
}

// paced is load p on endpoint id as the bound counts it: p itself on an
// endpoint that is not slow; on a slow one, what p and a request's fixed
// cost take there, in the tokens an endpoint at the fleet's pace would
// compute meanwhile: f·(p + overhead) − overhead, f its [Pace] factor. The
// fixed cost counts because a step takes f times as long there too: a
// cached turn of a few new tokens waits f steps' time for its first token
// on a slow home, which its slack (the tokens it would recompute
// elsewhere) need not cover.
func (s *State) paced(id string, p int64) int64 {
	f := s.pace.Factor(id)
	if f == 1 {
		return p
	}
	o := float64(s.pace.cfg.Overhead)
	return int64(min(math.Ceil(f*(float64(p)+o)-o), math.MaxInt64/2))
}

func (r *Ring) pick(req Request, pw weights, s *State) (int, Decision, error) {
	i, d, _, err := r.place(req, pw, s)
	return i, d, err
}

// place is pick, also reporting whether the endpoint it chose was
// weighed and bounded as the key's home is (pw.homeP, the home's slack):
// the home itself, or the endpoint req follows, which holds the key's
// history as the home would. The lease then counts pw.homeP as well;
// counting the whole prompt would hold more in P than the bound that
// let the request in allowed.
func (r *Ring) place(req Request, pw weights, s *State) (int, Decision, bool, error) {
	if !req.Keyed {
		i := r.leastLoaded(req, s)
		if i < 0 {
			return -1, DecisionFallback, false, ErrNoEndpoints
		}
		return i, DecisionFallback, false, nil
	}
	w := max(pw.p, 1)
	limit := s.limit(w, pw.noFloor)
	hw := max(pw.homeP, 1)
	if pw.homeP == 0 {
		hw = w
	}
	hlimit := s.limit(hw, pw.noFloor) + pw.homeSlack
	if i, ok := r.followed(req, &pw, s, hw, hlimit); ok {
		return i, DecisionSpill, true, nil
	}
	var (
		i   int
		d   Decision
		err error
	)
	if req.Group != 0 && pw.spread > 0 {
		i, d, err = r.pickGrouped(req, &pw, s, w, limit, hw, hlimit)
	} else {
		i, d, err = r.pickRing(req, &pw, s, w, limit, hw, hlimit)
	}
	return i, d, d == DecisionHome, err
}

// pickRing is Pick for a keyed request placed by its key on the ring: the
// home if it fits its bound (hw, hlimit), else the first later candidate
// within the walk's (w, limit), else the least loaded.
func (r *Ring) pickRing(req Request, pw *weights, s *State, w, limit, hw, hlimit int64) (int, Decision, error) {
	// A bitset of visited endpoints; on the stack up to 1024 endpoints.
	var small [16]uint64
	seen := small[:]
	if words := (len(r.ids) + 63) / 64; words > len(small) {
		seen = make([]uint64, words)
	}
	parts := uint64(len(r.owner))
	p := req.Key % parts
	found, homeUsable := 0, false
	// The owners of the partitions from the key's on, then the endpoints
	// that own none (more endpoints than partitions) in index order, as
	// Candidates lists them.
	for step := uint64(0); step < parts+uint64(len(r.ids)) && found < len(r.ids); step++ {
		i := uint32(step - parts)
		if step < parts {
			i = r.owner[(p+step)%parts]
		}
		if seen[i/64]&(1<<(i%64)) != 0 {
			continue
		}
		seen[i/64] |= 1 << (i % 64)
		found++
		if !s.usable(r, int(i), req.Exclude) {
			continue
		}
		if found == 1 {
			homeUsable = true
			if s.fits(r, int(i), hw, hlimit, pw, req.Group) {
				return int(i), DecisionHome, nil
			}
			continue
		}
		if s.fits(r, int(i), w, limit, pw, req.Group) {
			if homeUsable {
				return int(i), DecisionSpill, nil
			}
			return int(i), DecisionFallback, nil
		}
	}
	i := r.leastLoaded(req, s)
	if i < 0 {
		return -1, DecisionFallback, ErrNoEndpoints
	}
	return i, DecisionFallback, nil
}

// followed returns req.Follow's index when it is an endpoint of r other
// than the key's home, usable, and within the home's bounds.
func (r *Ring) followed(req Request, pw *weights, s *State, hw, hlimit int64) (int, bool) {
	if req.Follow == "" {
		return -1, false
	}
	i, ok := slices.BinarySearch(r.ids, req.Follow)
	if !ok || i == r.homeOf(req, pw, s) || !s.usable(r, i, req.Exclude) || !s.fits(r, i, hw, hlimit, pw, req.Group) {
		return -1, false
	}
	return i, true
}

// homeOf is the index of req's home: the first of its grouped order when
// its group is spread, else its ring home; over every healthy endpoint,
// whatever req excludes, as pickGrouped and the ring's walk find it.
func (r *Ring) homeOf(req Request, pw *weights, s *State) int {
	if req.Group != 0 && pw.spread > 0 {
		req.Exclude = nil
		return r.groupedHome(req, pw.spread, s)
	}
	return r.Home(req.Key)
}

// leastLoaded scans all usable endpoints from a key-derived start, so ties
// break differently for different keys, and identically on every replica.
func (r *Ring) leastLoaded(req Request, s *State) int {
	n := len(r.ids)
	start := int(req.Key % uint64(n))
	best, bestLoad := -1, int64(math.MaxInt64)
	for k := range n {
		i := (start + k) % n
		if !s.usable(r, i, req.Exclude) {
			continue
		}
		// A slow endpoint weighs its load, and the request it would
		// take, at its pace; others as they are.
		if l := s.paced(r.ids[i], s.load(r.ids[i])+1) - 1; l < bestLoad {
			best, bestLoad = i, l
		}
	}
	return best
}
