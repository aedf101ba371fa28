// Package lru is a map of uint64 keys bounded by count: past its bound the
// least recently put key goes first. It is not safe for concurrent use;
// its users hold their own locks.
package lru

import "container/list"

// Map holds at most the number of values New was given.
type Map[V any] struct {
	max   int
	keys  map[uint64]*list.Element
	order *list.List // of *entry[V], most recently put first
}

type entry[V any] struct {
	key uint64
	v   V
}

// New returns an empty Map of at most n values (at least 1).
func New[V any](n int) *Map[V] {
	return &Map[V]{max: max(n, 1), keys: map[uint64]*list.Element{}, order: list.New()}
}

// Peek returns key's value, leaving its recency as it was.
func (m *Map[V]) Peek(key uint64) (V, bool) {
	if e := m.keys[key]; e != nil {
		return e.Value.(*entry[V]).v, true
	}
	var zero V
	return zero, false
}

// Put sets key's value and makes it the most recent, then forgets the
// least recent keys beyond the bound.
func (m *Map[V]) Put(key uint64, v V) {
	if e := m.keys[key]; e != nil {
		e.Value.(*entry[V]).v = v
		m.order.MoveToFront(e)
		return
	}
	m.keys[key] = m.order.PushFront(&entry[V]{key: key, v: v})
	for m.order.Len() > m.max {
		m.remove(m.order.Back())
	}
}

// Delete forgets key.
func (m *Map[V]) Delete(key uint64) {
	if e := m.keys[key]; e != nil {
		m.remove(e)
	}
}

// Len is the number of keys held.
func (m *Map[V]) Len() int { return m.order.Len() }

func (m *Map[V]) remove(e *list.Element) {
	delete(m.keys, e.Value.(*entry[V]).key)
	m.order.Remove(e)
}
