package policy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prefixring/prefixring/ring"
)

// Picker leases an endpoint for a request until the request ends.
type Picker interface {
	Acquire(ring.Request) (ring.Lease, error)
}

// Endpoints is what a load-only policy reads and counts on;
// *ring.Balancer implements it.
type Endpoints interface {
	// Candidates appends the endpoints the request may go to, with loads.
	Candidates(exclude []string, dst []ring.Candidate) []ring.Candidate
	// AcquireOn counts a request on a chosen endpoint.
	AcquireOn(req ring.Request, id string, d ring.Decision) ring.Lease
}

// Default is the policy serve runs unless told otherwise.
const Default = "chwbl"

// Names are the policies [New] builds.
var Names = []string{"chwbl", "round-robin", "random", "least-load", "p2c", "session", "prefix-key", "chash",
	"score", "radix", "dualmap", "chwbl-local"}

// ReadsBlocks reports whether the policy called name matches prompts
// (ring.Request.Blocks), which the router then hashes whole.
func ReadsBlocks(name string) bool { return name == "radix" || name == "score" }

// ErrNoEndpoints is returned when no endpoint may take the request.
var ErrNoEndpoints = ring.ErrNoEndpoints

// Balancer is everything a policy reads and counts on besides chwbl's
// picker: the usable endpoints and their loads ([Endpoints]), the ring's
// unbounded placement ([Hasher]) and CHWBL bounded by this replica's own
// counts ([LocalCHWBL]). *ring.Balancer implements it.
type Balancer interface {
	Endpoints
	Hasher
	LocalCHWBL
}

var _ Balancer = (*ring.Balancer)(nil)

// New returns the policy called name. chwbl is the picker "chwbl" runs
// (the balancer, or the gossip node wrapping it); bal is what the other
// policies read and count on; seed drives the random policies.
func New(name string, chwbl Picker, bal Balancer, seed uint64) (Picker, error) {
	if name == "chwbl" {
		if chwbl == nil {
			return nil, errors.New("policy: chwbl needs the balancer")
		}
		return chwbl, nil
	}
	if !slices.Contains(Names, name) {
		return nil, fmt.Errorf("policy: unknown policy %q (known: %s)", name, strings.Join(Names, ", "))
	}
	if bal == nil {
		return nil, fmt.Errorf("policy: %s needs the balancer", name)
	}
	// Least-load breaks ties in turn from a place the seed draws, so
	// replicas (each seeded apart) are not in step: started alike, each
	// sent every third request by a Service, they put three consecutive
	// requests on one engine whenever their loads tied.
	ll := &LeastLoad{eps: bal}
	ll.next.Store(rand.New(rand.NewPCG(seed, 0x11ad)).Uint64())
	switch name {
	case "round-robin":
		return &RoundRobin{eps: bal}, nil
	case "random":
		return &Random{eps: bal, rng: newLockedRand(seed, 0x7a11d)}, nil
	case "least-load":
		return ll, nil
	case "p2c":
		return &P2C{eps: bal, rng: newLockedRand(seed, 0x2c)}, nil
	case "radix":
		return NewRadix(bal, DefaultRadixConfig()), nil
	case "score":
		return NewScore(bal, DefaultScoreConfig()), nil
	case "session":
		return &Session{chash: &CHash{hash: bal, fallback: ll}}, nil
	case "chash":
		return &CHash{hash: bal, fallback: ll}, nil
	case "prefix-key":
		return &PrefixKey{chash: &CHash{hash: bal, fallback: ll}}, nil
	case "dualmap":
		return &DualMap{hash: bal, eps: bal, fallback: ll}, nil
	case "chwbl-local":
		return localCHWBL{bal}, nil
	}
	return nil, fmt.Errorf("policy: %s is named but not built", name)
}

// candidates returns the usable endpoints, or ErrNoEndpoints.
func candidates(eps Endpoints, req ring.Request) ([]ring.Candidate, error) {
	var buf [16]ring.Candidate
	c := eps.Candidates(req.Exclude, buf[:0])
	if len(c) == 0 {
		return nil, ErrNoEndpoints
	}
	return c, nil
}

// RoundRobin sends each request to the next usable endpoint in turn.
type RoundRobin struct {
	eps  Endpoints
	next atomic.Uint64
}

// NewRoundRobin returns round-robin over eps whose first request goes to
// the usable endpoint start places (start mod their number); New's starts
// at the first, as HAProxy's and nginx's do. Replicas that start apart
// are not in step: the fleet simulator starts each of its round-robin
// replicas at a random place, as real ones end up (sim/eval, rrStart).
func NewRoundRobin(eps Endpoints, start uint64) *RoundRobin {
	p := &RoundRobin{eps: eps}
	p.next.Store(start)
	return p
}

// Acquire implements Picker.
func (p *RoundRobin) Acquire(req ring.Request) (ring.Lease, error) {
	c, err := candidates(p.eps, req)
	if err != nil {
		return ring.Lease{}, err
	}
	i := (p.next.Add(1) - 1) % uint64(len(c))
	return p.eps.AcquireOn(req, c[i].ID, ring.DecisionFallback), nil
}

// lockedRand is a seeded source the policies share between requests.
type lockedRand struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func newLockedRand(seed, stream uint64) *lockedRand {
	return &lockedRand{rng: rand.New(rand.NewPCG(seed, stream))}
}

// IntN returns a uniform int in [0, n).
func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rng.IntN(n)
}

// Random sends each request to a usable endpoint drawn uniformly.
type Random struct {
	eps Endpoints
	rng *lockedRand
}

// Acquire implements Picker.
func (p *Random) Acquire(req ring.Request) (ring.Lease, error) {
	c, err := candidates(p.eps, req)
	if err != nil {
		return ring.Lease{}, err
	}
	i := p.rng.IntN(len(c))
	return p.eps.AcquireOn(req, c[i].ID, ring.DecisionFallback), nil
}

// LeastLoad sends each request to the usable endpoint with the lowest load
// in the balancer's signal (prompt tokens awaiting their first token under
// serve's default, requests in flight under --load-signal requests); ties
// go to each in turn.
type LeastLoad struct {
	eps  Endpoints
	next atomic.Uint64
}

// Acquire implements Picker.
func (p *LeastLoad) Acquire(req ring.Request) (ring.Lease, error) {
	c, err := candidates(p.eps, req)
	if err != nil {
		return ring.Lease{}, err
	}
	start := int((p.next.Add(1) - 1) % uint64(len(c)))
	best := start
	for k := 1; k < len(c); k++ {
		if i := (start + k) % len(c); c[i].Load < c[best].Load {
			best = i
		}
	}
	return p.eps.AcquireOn(req, c[best].ID, ring.DecisionFallback), nil
}

// P2C draws two distinct usable endpoints and sends the request to the
// one with the lower load, in the balancer's signal as for [LeastLoad]
// (Mitzenmacher's power of two choices).
type P2C struct {
	eps Endpoints
	rng *lockedRand
}

// Acquire implements Picker.
func (p *P2C) Acquire(req ring.Request) (ring.Lease, error) {
	c, err := candidates(p.eps, req)
	if err != nil {
		return ring.Lease{}, err
	}
	best := 0
	if len(c) > 1 {
		a, b := p.rng.IntN(len(c)), p.rng.IntN(len(c)-1)
		if b >= a {
			b++
		}
		best = a
		if c[b].Load < c[a].Load {
			best = b
		}
	}
	return p.eps.AcquireOn(req, c[best].ID, ring.DecisionFallback), nil
}

// Hasher places keys on the ring with no bound: the key's first usable
// endpoint, skipping exclude ([ring.Balancer.HomeExcluding]).
type Hasher interface {
	HomeExcluding(key uint64, exclude []string) (string, bool)
	AcquireOn(req ring.Request, id string, d ring.Decision) ring.Lease
}

// LocalCHWBL is CHWBL whose bound reads only this replica's counts
// ([ring.Balancer.AcquireLocal]).
type LocalCHWBL interface {
	AcquireLocal(ring.Request) (ring.Lease, error)
}

type localCHWBL struct{ b LocalCHWBL }

func (p localCHWBL) Acquire(req ring.Request) (ring.Lease, error) { return p.b.AcquireLocal(req) }

// CHash sends a keyed request to its key's home on the ring whatever the
// load, as the vLLM router's consistent_hash does (users measured its hit
// rate collapsing under saturation: nothing spills); unkeyed requests go
// to the least loaded endpoint. The key is prefixring's prompt key, which
// that router does not have: its consistent_hash hashes a session header
// (x-session-id, x-user-id, ...), else the body's user or session_id,
// else the whole body (vllm-project/router src/policies/hash_key.rs,
// extract_hash_key), so with the study's session ids it places as
// [Session] does, and without them each distinct prompt anywhere. CHash
// is an unbounded hash on the same key chwbl bounds.
type CHash struct {
	hash     Hasher
	fallback Picker
}

// Acquire implements Picker.
func (p *CHash) Acquire(req ring.Request) (ring.Lease, error) {
	if !req.Keyed {
		return p.fallback.Acquire(req)
	}
	id, ok := p.hash.HomeExcluding(req.Key, req.Exclude)
	if !ok {
		return ring.Lease{}, ErrNoEndpoints
	}
	return p.hash.AcquireOn(req, id, ring.DecisionHome), nil
}

// Session is sticky sessions: a request carrying a session id (the session
// header) goes to that session's home, unbounded; any other request goes
// to the least loaded endpoint, its prompt ignored.
type Session struct{ chash *CHash }

// Acquire implements Picker.
func (p *Session) Acquire(req ring.Request) (ring.Lease, error) {
	if !req.Session {
		// Its prompt key is not followed (nor its group, which the ring
		// would place by), but it weighs its tokens wherever it goes.
		req.Key, req.Keyed, req.Group, req.GroupShare, req.EarlyShare, req.Follow = 0, false, 0, 0, false, ""
	}
	return p.chash.Acquire(req)
}

// DualMap gives each key two homes, by two independent hashes, and sends
// the request to the one with the lower load in the balancer's signal
// (ties: the first),
// the two-choice scheme of DualMap (arXiv 2602.06502): affinity to one of
// two places, balance between them.
type DualMap struct {
	hash     Hasher
	eps      Endpoints
	fallback Picker
}

// mix is a second, independent hash of a key (splitmix64's finalizer).
func mix(k uint64) uint64 {
	k ^= k >> 30
	k *= 0xbf58476d1ce4e5b9
	k ^= k >> 27
	k *= 0x94d049bb133111eb
	return k ^ k>>31
}

// Acquire implements Picker.
func (p *DualMap) Acquire(req ring.Request) (ring.Lease, error) {
	if !req.Keyed {
		return p.fallback.Acquire(req)
	}
	a, ok := p.hash.HomeExcluding(req.Key, req.Exclude)
	if !ok {
		return ring.Lease{}, ErrNoEndpoints
	}
	b, _ := p.hash.HomeExcluding(mix(req.Key), req.Exclude)
	if b == a || b == "" {
		return p.hash.AcquireOn(req, a, ring.DecisionHome), nil
	}
	var buf [16]ring.Candidate
	la, lb := int64(0), int64(0)
	for _, c := range p.eps.Candidates(req.Exclude, buf[:0]) {
		switch c.ID {
		case a:
			la = c.Load
		case b:
			lb = c.Load
		}
	}
	if lb < la {
		return p.hash.AcquireOn(req, b, ring.DecisionSpill), nil
	}
	return p.hash.AcquireOn(req, a, ring.DecisionHome), nil
}

// PrefixKey sends a request to the home of its shared part's key (the
// system prompt and tools of a chat), whatever the load: affinity for the
// shared prefix only, as a router hashing the system prompt does. Requests
// without one go to the least loaded endpoint.
type PrefixKey struct{ chash *CHash }

// Acquire implements Picker.
func (p *PrefixKey) Acquire(req ring.Request) (ring.Lease, error) {
	if req.Group == 0 {
		req.Keyed = false
	} else {
		req.Key, req.Keyed = req.Group, true
	}
	return p.chash.Acquire(req)
}
