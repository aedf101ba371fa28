package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/prefixring/prefixring/gossip/core"
	"github.com/prefixring/prefixring/internal/wire"

	"github.com/prefixring/prefixring/workers"
)

// Wire format, version 2. Every message starts with the version byte and a
// kind byte. Integers are varints; strings are length-prefixed.
//
//	header: node, addr, incarnation, version, stamp, flags (bit 0: left)
//	delta:  header, digest (8 bytes LE), n, n counts, down bits, listed bits
//	full:   header, n, n endpoint IDs, n counts, down bits, listed bits
//	state:  m, then m bodies of full messages (without version and kind)
//
// Kinds 4 and 5 carry the registered-worker set (workers.go), 6 and 7 the
// shared-prefix sketch (sketch.go).
//
// A delta names its endpoint list by [Digest] only, so at 500 endpoints it
// still fits one UDP packet; the receiver expands it from an entry it holds
// with the same list, or drops it and waits for a full entry. Bits are
// ceil(n/8) bytes, bit i of byte i/8 for endpoint i. Version 1 had no
// listed bits (an entry listed only what its replica discovered); a
// version-1 message is dropped as malformed-version, so upgrade replicas
// together, or accept a few seconds of split counts while they restart.
const (
	wireVersion = 2

	kindDelta byte = 1
	kindFull  byte = 2
	kindState byte = 3

	maxEndpoints = 1 << 16
	maxString    = 1 << 12
	maxEntries   = 1 << 14
)

var errMalformed = errors.New("gossip: malformed message")

func appendString(b []byte, s string) []byte { return wire.AppendString(b, s) }

// EncodeDelta encodes e as a delta message.
func EncodeDelta(e core.Entry) []byte {
	return core.AppendDelta([]byte{wireVersion, kindDelta}, e)
}

// EncodeFull encodes e with its endpoint list.
func EncodeFull(e core.Entry) []byte { return core.AppendEntry([]byte{wireVersion, kindFull}, e) }

// EncodeState encodes entries for a push/pull exchange.
func EncodeState(entries []core.Entry) []byte {
	return core.AppendEntries([]byte{wireVersion, kindState}, entries)
}

// Message is a decoded message. A delta has Digest set and Entry.Endpoints
// nil until expanded with [Message.Expand].
type Message struct {
	Kind    byte
	Entries []core.Entry
	Digest  uint64       // deltas only
	Workers []workers.Op // workers, state+workers and state+ext messages only
	// Sketches are sketch records (sketch and state+ext messages).
	Sketches []SketchRecord
	// SketchVersions are the versions of the sketch records SketchFrom
	// holds (state+ext messages of a periodic push/pull).
	SketchFrom     string
	SketchVersions []SketchVersion
}

// Decode parses a message. It never panics on bad input.
func Decode(b []byte) (Message, error) {
	if len(b) < 2 {
		return Message{}, errMalformed
	}
	if b[0] != wireVersion {
		return Message{}, fmt.Errorf("gossip: wire version %d, want %d", b[0], wireVersion)
	}
	r := &reader{b: b[2:]}
	m := Message{Kind: b[1]}
	switch m.Kind {
	case kindDelta:
		e := r.header()
		m.Digest = r.u64()
		n := r.count(maxEndpoints)
		r.countsAndDown(&e, n)
		m.Entries = []core.Entry{e}
	case kindFull:
		m.Entries = []core.Entry{r.full()}
	case kindState, kindStateWorkers, kindStateExt:
		n := r.count(maxEntries)
		for i := 0; i < n && r.err == nil; i++ {
			m.Entries = append(m.Entries, r.full())
		}
		switch m.Kind {
		case kindStateWorkers:
			m.Workers = r.ops()
		case kindStateExt:
			r.sections(&m)
		}
	case kindWorkers:
		m.Workers = r.ops()
	case kindSketch:
		m.Sketches = r.sketchRecords(1)
	default:
		return Message{}, fmt.Errorf("gossip: unknown message kind %d", m.Kind)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errMalformed
	}
	if r.err != nil {
		return Message{}, r.err
	}
	return m, nil
}

// Expand fills a delta's endpoint list from s. It reports false when s holds
// no list with the delta's digest, or the list's length differs.
func (m *Message) Expand(s *core.EntryTable) bool {
	if m.Kind != kindDelta {
		return true
	}
	eps, ok := s.EndpointsOf(m.Digest)
	if !ok || len(eps) != len(m.Entries[0].Counts) {
		return false
	}
	m.Entries[0].Endpoints = eps
	return true
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = errMalformed
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) count(limit int) int {
	n := r.uvarint()
	if n > uint64(limit) {
		r.err = errMalformed
		return 0
	}
	return int(n)
}

func (r *reader) str() string { return string(r.bytes(r.count(maxString))) }

func (r *reader) u64() uint64 {
	if b := r.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *reader) header() core.Entry {
	e := core.Entry{Node: r.str(), Addr: r.str()}
	e.Incarnation, e.Version, e.Stamp = r.uvarint(), r.uvarint(), r.varint()
	if f := r.bytes(1); f != nil {
		e.Left = f[0]&1 != 0
	}
	return e
}

func (r *reader) countsAndDown(e *core.Entry, n int) {
	e.Counts = make([]int64, n)
	for i := 0; i < n && r.err == nil; i++ {
		e.Counts[i] = r.varint()
	}
	e.Down, e.Listed = r.bits(n), r.bits(n)
}

func (r *reader) bits(n int) []bool {
	out := make([]bool, n)
	bits := r.bytes((n + 7) / 8)
	for i := 0; i < n && r.err == nil; i++ {
		out[i] = bits[i/8]&(1<<(i%8)) != 0
	}
	return out
}

func (r *reader) full() core.Entry {
	e := r.header()
	n := r.count(maxEndpoints)
	e.Endpoints = make([]string, 0, min(n, 1024))
	for i := 0; i < n && r.err == nil; i++ {
		id := r.str()
		if i > 0 && id <= e.Endpoints[i-1] {
			r.err = errMalformed // entries keep their endpoints sorted and unique
		}
		e.Endpoints = append(e.Endpoints, id)
	}
	r.countsAndDown(&e, n)
	return e
}
