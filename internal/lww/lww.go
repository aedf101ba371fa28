// Package lww is the one last-writer-wins map every gossiped value merges
// through: the replicas' load entries (gossip/core), the shared-prefix
// sketch's records (prefix). It imports nothing of the project, so the key
// (prefix) and the gossip core can both use it without prefix depending on
// gossip or the ring.
package lww

import (
	"cmp"
	"slices"
)

// Map is a last-writer-wins map: one value per key, the newest by compare.
// Each key has a single writer (a replica writes only its own record), so
// keeping the newest version is a CRDT merge: idempotent, commutative and
// associative as long as compare is a total order on distinct values
// (coretest.CheckMergeLaws checks it). It is pure and not safe for
// concurrent use. Values are kept as given: a value must not be modified
// once merged.
type Map[K cmp.Ordered, V any] struct {
	vals    map[K]V
	key     func(V) K
	compare func(a, b V) int
}

// New returns an empty map keyed by key, ordered by compare (which
// returns 0 only for identical values).
func New[K cmp.Ordered, V any](key func(V) K, compare func(a, b V) int) *Map[K, V] {
	return &Map[K, V]{vals: map[K]V{}, key: key, compare: compare}
}

// Merge keeps, for every key, the newest of its known value and the ones in
// in, and returns the values that changed the map: the change to pass on.
// Merging a value already known, or older than the known one, returns
// nothing.
func (m *Map[K, V]) Merge(in ...V) []V {
	var changed []V
	for _, v := range in {
		k := m.key(v)
		if old, ok := m.vals[k]; ok && m.compare(v, old) <= 0 {
			continue
		}
		m.vals[k] = v
		// A later value of the same key in this batch supersedes an
		// earlier one in the change too.
		changed = slices.DeleteFunc(changed, func(c V) bool { return m.key(c) == k })
		changed = append(changed, v)
	}
	return changed
}

// Get returns the value of k.
func (m *Map[K, V]) Get(k K) (V, bool) {
	v, ok := m.vals[k]
	return v, ok
}

// Values returns every value, sorted by key.
func (m *Map[K, V]) Values() []V {
	out := make([]V, 0, len(m.vals))
	for _, v := range m.vals {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b V) int { return cmp.Compare(m.key(a), m.key(b)) })
	return out
}

// Delete forgets k's value.
func (m *Map[K, V]) Delete(k K) { delete(m.vals, k) }

// Len returns the number of keys.
func (m *Map[K, V]) Len() int { return len(m.vals) }
