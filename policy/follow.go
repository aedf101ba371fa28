package policy

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prefixring/prefixring/internal/lru"
	"github.com/prefixring/prefixring/ring"
)

// When a conversation's turn spills from its home A to B, B holds the
// whole history and A only the turns before it; the next turn goes back to
// A once A is under its bound and recomputes the spilled turn there.
// [Follow] sends the next turn to B instead, while B is within the home's
// bounds (ring.Request.Follow): it remembers, per key, where the key's
// last turn went when that was not its home. A turn that goes home
// forgets it. The memory is this replica's: a turn that reaches another
// replica is placed as chwbl places it, unless the replicas share one
// memory (eval's chwbl-follow-shared, the upper bound of gossiping it).

// FollowConfig bounds a [FollowMemory].
type FollowConfig struct {
	// Max is the most keys remembered; the least recently used go first.
	// Default 65536.
	Max int
	// TTL forgets a key whose last turn was longer ago: its history has
	// likely left the engine's cache, and its home is as good. Default 10
	// minutes.
	TTL time.Duration
}

// DefaultFollowConfig returns the defaults documented on each field.
func DefaultFollowConfig() FollowConfig { return FollowConfig{Max: 65536, TTL: 10 * time.Minute} }

// Validate reports a configuration the memory cannot use.
func (c FollowConfig) Validate() error {
	if c.Max < 1 || c.TTL <= 0 {
		return errors.New("policy: follow memory needs max >= 1 and a ttl > 0")
	}
	return nil
}

// FollowMemory maps a key to the endpoint its last turn went to when that
// was not the key's home, bounded by an LRU cap and a TTL. It reads no
// clock: callers pass now. Safe for concurrent use.
type FollowMemory struct {
	cfg  FollowConfig
	mu   sync.Mutex
	keys *lru.Map[followEntry]
}

type followEntry struct {
	id string
	at time.Time
}

// NewFollowMemory returns an empty memory.
func NewFollowMemory(cfg FollowConfig) (*FollowMemory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &FollowMemory{cfg: cfg, keys: lru.New[followEntry](cfg.Max)}, nil
}

// Where returns the endpoint key's last turn went to, if it left home
// within the TTL before now.
func (m *FollowMemory) Where(key uint64, now time.Time) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.keys.Peek(key)
	if !ok {
		return "", false
	}
	if now.Sub(f.at) > m.cfg.TTL {
		m.keys.Delete(key)
		return "", false
	}
	return f.id, true
}

// Record notes that key's turn went to id at now: home forgets the key,
// anywhere else is remembered, evicting the least recently used key
// beyond Max.
func (m *FollowMemory) Record(key uint64, id string, home bool, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if home {
		m.keys.Delete(key)
		return
	}
	m.keys.Put(key, followEntry{id: id, at: now})
}

// Len is the number of keys remembered.
func (m *FollowMemory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.keys.Len()
}

// Follow is chwbl whose keyed picks try first where the key's last turn
// went when it left home (see [FollowMemory]).
type Follow struct {
	next Picker // the balancer's bounded walk, which reads Request.Follow
	mem  *FollowMemory
	now  func() time.Time
	// Followed counts the picks that went where the key's last turn did.
	Followed atomic.Int64
}

// NewFollow returns chwbl over next (the balancer, or the gossip node
// wrapping it) remembering in mem, which replicas may share; now is the
// clock the TTL reads.
func NewFollow(next Picker, mem *FollowMemory, now func() time.Time) *Follow {
	return &Follow{next: next, mem: mem, now: now}
}

// Acquire implements Picker.
func (p *Follow) Acquire(req ring.Request) (ring.Lease, error) {
	if !req.Keyed {
		return p.next.Acquire(req)
	}
	now := p.now()
	req.Follow, _ = p.mem.Where(req.Key, now)
	l, err := p.next.Acquire(req)
	if err != nil {
		return l, err
	}
	if req.Follow != "" && l.Endpoint == req.Follow {
		p.Followed.Add(1)
	}
	p.mem.Record(req.Key, l.Endpoint, l.Decision == ring.DecisionHome, now)
	return l, nil
}
