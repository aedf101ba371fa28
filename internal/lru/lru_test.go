package lru

import "testing"

// Past its bound the Map forgets the least recently put key; Peek reads
// without making a key recent, Put on a held key does, and Delete forgets.
func TestMapForgetsTheLeastRecentlyPut(t *testing.T) {
	m := New[string](2)
	m.Put(1, "a")
	m.Put(2, "b")
	if v, ok := m.Peek(1); !ok || v != "a" {
		t.Fatalf("Peek(1) = %q, %v", v, ok)
	}
	m.Put(3, "c") // 1 is still the least recently put: Peek did not touch it
	if _, ok := m.Peek(1); ok || m.Len() != 2 {
		t.Fatalf("after a third key: 1 held %v, len %d; want forgotten, 2", ok, m.Len())
	}
	m.Put(2, "b2") // 2 is now the most recent
	m.Put(4, "d")  // forgets 3
	for key, want := range map[uint64]string{2: "b2", 4: "d"} {
		if v, ok := m.Peek(key); !ok || v != want {
			t.Errorf("Peek(%d) = %q, %v; want %q", key, v, ok, want)
		}
	}
	if _, ok := m.Peek(3); ok {
		t.Error("3 is held, want forgotten")
	}
	m.Delete(2)
	m.Delete(5) // not held: nothing happens
	if _, ok := m.Peek(2); ok || m.Len() != 1 {
		t.Fatalf("after Delete(2): held %v, len %d", ok, m.Len())
	}
	if one := New[int](0); func() int { one.Put(1, 1); one.Put(2, 2); return one.Len() }() != 1 {
		t.Error("a Map of bound 0 holds more than one key")
	}
}
