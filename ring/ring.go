package ring

import (
	"errors"
	"fmt"
	"slices"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// Ring is an immutable placement of partitions on endpoints. Build one with
// [NewRing]; it is safe for concurrent use.
type Ring struct {
	ids   []string // sorted, unique endpoint IDs
	owner []uint32 // partition -> index into ids
	owned []int    // index into ids -> partitions owned
}

// PlacementConfig sets how partitions are placed on endpoints. Every replica
// of a cluster must use the same values, or their homes disagree.
type PlacementConfig struct {
	// Partitions is the number of partitions keys are hashed into. It should
	// be much larger than the endpoint count. A prime spreads keys evenly.
	Partitions int
	// Replicas is the number of virtual nodes per endpoint on the library's
	// ring. More replicas even out partition ownership.
	Replicas int
	// Load bounds partition ownership: no endpoint owns more than
	// ceil(Load * Partitions / n) partitions. It must be >= 1.
	Load float64
}

// DefaultPlacement is the placement every replica uses unless configured
// otherwise. Measured in ring_test.go (TestMovement*): with these values
// adding a 9th endpoint to 8 moves 11.6% of homes (ideal 11.1%).
func DefaultPlacement() PlacementConfig {
	return PlacementConfig{Partitions: 7919, Replicas: 256, Load: 1.25}
}

// Validate reports a configuration that would make the library panic or
// place keys badly.
func (c PlacementConfig) Validate() error {
	switch {
	case c.Partitions < 1:
		return errors.New("ring: partitions must be >= 1")
	case c.Replicas < 1:
		return errors.New("ring: replicas must be >= 1")
	case !(c.Load >= 1): // also rejects NaN
		return fmt.Errorf("ring: placement load %v must be >= 1", c.Load)
	}
	return nil
}

// ErrNoEndpoints is returned when a ring would have no endpoints, or when no
// usable endpoint is left for a request.
var ErrNoEndpoints = errors.New("ring: no usable endpoint")

// maxEndpoints keeps partition owners in uint32 and the walk's bitset small.
const maxEndpoints = 1 << 16

type member string

func (m member) String() string { return string(m) }

type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// NewRing places cfg.Partitions partitions on the endpoints ids. Duplicate
// IDs are merged; the order of ids does not matter.
func NewRing(ids []string, cfg PlacementConfig) (*Ring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return nil, ErrNoEndpoints
	}
	if len(ids) > maxEndpoints {
		return nil, fmt.Errorf("ring: %d endpoints, at most %d", len(ids), maxEndpoints)
	}
	members := make([]consistent.Member, len(ids))
	index := make(map[string]uint32, len(ids))
	for i, id := range ids {
		if id == "" {
			return nil, errors.New("ring: empty endpoint ID")
		}
		members[i] = member(id)
		index[id] = uint32(i)
	}
	// Load >= 1 guarantees n*ceil(Load*P/n) >= P, so the library never runs
	// out of room (it panics if it does).
	c := consistent.New(members, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    cfg.Partitions,
		ReplicationFactor: cfg.Replicas,
		Load:              cfg.Load,
	})
	r := &Ring{ids: ids, owner: make([]uint32, cfg.Partitions), owned: make([]int, len(ids))}
	for p := range r.owner {
		i := index[c.GetPartitionOwner(p).String()]
		r.owner[p] = i
		r.owned[i]++
	}
	return r, nil
}

// Len returns the number of endpoints.
func (r *Ring) Len() int { return len(r.ids) }

// IDs returns the sorted endpoint IDs. The caller must not modify it.
func (r *Ring) IDs() []string { return r.ids }

// ID returns the ID of endpoint i.
func (r *Ring) ID(i int) string { return r.ids[i] }

// Home returns the index of the endpoint that owns key's partition.
func (r *Ring) Home(key uint64) int { return int(r.owner[key%uint64(len(r.owner))]) }

// Candidates appends to dst the key's full candidate order: its home, then
// the distinct owners of the following partitions, then any endpoint that
// owns no partition, in index order. It is the order [Ring.Pick] walks.
func (r *Ring) Candidates(key uint64, dst []int) []int {
	seen := make([]bool, len(r.ids))
	found := 0
	p := key % uint64(len(r.owner))
	for step := 0; step < len(r.owner) && found < len(r.ids); step++ {
		i := r.owner[(p+uint64(step))%uint64(len(r.owner))]
		if !seen[i] {
			seen[i] = true
			found++
			dst = append(dst, int(i))
		}
	}
	for i, s := range seen {
		if !s {
			dst = append(dst, i)
		}
	}
	return dst
}
