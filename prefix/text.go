package prefix

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Separator bytes in hashed streams. 0xF8-0xFF never occur in UTF-8, and
// invalid input bytes are hashed as U+FFFD, so a separator can never be
// confused with text.
const (
	sepMessage = 0xFF // starts a preamble message; opens a string in tools
	sepRole    = 0xFE // ends a role; closes a string in tools
	sepPart    = 0xFD // between text parts; opens a literal in tools
)

// stageSize is the text staging buffer: decoded text is copied there and
// hashed in blocks, because a Digest.Write per escape or non-ASCII rune
// costs more than the rune itself.
const stageSize = 256

// text hashes a budgeted stream of units: one unit per code point of
// decoded string text, per separator byte and per literal byte; four per
// token id. Reading stops after limit units. In marking mode it also
// records the hash of the prefix read so far at every ChunkChars units, up
// to maxMarks of them: the anchor's chunk prefixes, from which the key
// picks the end of its window after a shared prefix (see [request.sum]) and
// which Keyer.Prefixes hands to a Sketch.
type text struct {
	d        xxhash.Digest
	stage    [stageSize]byte
	ns       int // bytes in stage
	n        int // units hashed so far
	limit    int // stop after this many units
	next     int // next chunk boundary to mark; 0 = none
	marks    []uint64
	maxMarks int
}

// init starts t over, reading up to limit units and marking nothing.
func (t *text) init(limit int) {
	t.d.Reset()
	t.ns, t.n, t.limit, t.next, t.marks, t.maxMarks = 0, 0, limit, 0, nil, 0
}

// mark makes t record its chunk prefixes into dst, up to max of them.
func (t *text) mark(dst []uint64, max int) {
	t.marks, t.maxMarks, t.next = dst[:0], max, ChunkChars
}

func (t *text) full() bool { return t.n >= t.limit }

// room is how many units may be hashed before the next event.
func (t *text) room() int {
	if t.next > 0 && t.next < t.limit {
		return t.next - t.n
	}
	return t.limit - t.n
}

func (t *text) flush() {
	t.d.Write(t.stage[:t.ns])
	t.ns = 0
}

// sum is the hash of everything hashed so far.
func (t *text) sum() uint64 {
	t.flush()
	return t.d.Sum64()
}

func (t *text) put(p []byte) {
	if len(p) >= 64 {
		// Long enough to hash in place: save the copy.
		t.flush()
		t.d.Write(p)
		return
	}
	if t.ns+len(p) > stageSize {
		t.flush()
		if len(p) > stageSize {
			t.d.Write(p)
			return
		}
	}
	t.ns += copy(t.stage[t.ns:], p)
}

func (t *text) putByte(c byte) {
	if t.ns == stageSize {
		t.flush()
	}
	t.stage[t.ns] = c
	t.ns++
}

// event runs when n reaches a chunk boundary or the limit: at a boundary
// it records the prefix hash.
func (t *text) event() {
	if t.next == 0 || t.n < t.next {
		return
	}
	t.marks = append(t.marks, t.sum())
	t.next += ChunkChars
	if len(t.marks) >= t.maxMarks {
		t.next = 0
	}
}

// sep hashes one separator byte as one unit.
func (t *text) sep(c byte) {
	if t.full() {
		return
	}
	t.putByte(c)
	t.n++
	t.event()
}

// token hashes one token id as four little-endian bytes (four units).
func (t *text) token(v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	t.put(b[:])
	t.n += 4
	t.event()
}

// special8 flags (with its high bit) each of the 8 bytes in x that is not
// plain ASCII: '"', '\\' or >= 0x80. Bytes above the lowest flagged one may
// be flagged wrongly (a borrow carries), so only the lowest flag is used.
func special8(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := x ^ (lo * '"')
	bs := x ^ (lo * '\\')
	return (x | ((q - lo) &^ q) | ((bs - lo) &^ bs)) & hi
}

var replacement = []byte(string(utf8.RuneError))

// plainASCII marks the bytes a JSON string can hold as they are, one unit
// each.
var plainASCII = func() (t [256]bool) {
	for c := 0; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str hashes the decoded text of the JSON string at s.i (which must be at
// its opening quote) until the budget runs out, then skips the rest.
// Decoding follows encoding/json: escapes are decoded, surrogate pairs
// joined, and lone surrogates and invalid UTF-8 bytes become U+FFFD.
func (t *text) str(s *scanner) error {
	b := s.b
	i := s.i + 1
	for {
		room := t.room()
		if room == 0 {
			t.event()
			if t.room() == 0 {
				break
			}
			continue
		}
		// A clean run (plain ASCII, found 8 bytes at a time, and valid
		// UTF-8) is hashed as it stands with one copy: only escapes,
		// invalid bytes and the closing quote need a closer look.
		j, left := i, room
		for left > 0 && j < len(b) {
			if left >= 8 && j+8 <= len(b) {
				m := special8(binary.LittleEndian.Uint64(b[j:]))
				if m == 0 {
					j, left = j+8, left-8
					continue
				}
				// The lowest flagged byte is exact: skip the plain ones
				// before it without a byte loop.
				k := bits.TrailingZeros64(m) / 8
				j, left = j+k, left-k
				if left == 0 {
					break
				}
			}
			c := b[j]
			if plainASCII[c] {
				j, left = j+1, left-1
				continue
			}
			if c < utf8.RuneSelf {
				break
			}
			size := utf8Len(b[j:])
			if size == 0 {
				break
			}
			j, left = j+size, left-1
		}
		if j > i {
			t.put(b[i:j])
			t.n += room - left
			i = j
			continue
		}
		if i >= len(b) {
			return errSyntax
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return nil
		case c == '\\':
			r, next, ok := unescape(b, i)
			if !ok {
				return errSyntax
			}
			if r < utf8.RuneSelf {
				t.putByte(byte(r))
			} else {
				var buf [utf8.UTFMax]byte
				t.put(utf8.AppendRune(buf[:0], r))
			}
			i = next
		default:
			size := utf8Len(b[i:])
			if size == 0 {
				t.put(replacement)
				size = 1
			} else {
				t.put(b[i : i+size])
			}
			i += size
		}
		t.n++
	}
	end := stringEnd(b, i)
	if end < 0 {
		return errSyntax
	}
	s.i = end + 1
	return nil
}

// utf8Len is the length of the valid UTF-8 sequence at the start of p
// (which starts with a byte >= 0x80), or 0 if it is invalid. Two-byte and
// most three-byte sequences are checked inline; the rest go to utf8.
func utf8Len(p []byte) int {
	c := p[0]
	switch {
	case c >= 0xC2 && c < 0xE0 && len(p) >= 2 && p[1]&0xC0 == 0x80:
		return 2
	case c > 0xE0 && c < 0xF0 && c != 0xED && len(p) >= 3 && p[1]&0xC0 == 0x80 && p[2]&0xC0 == 0x80:
		return 3
	}
	if r, size := utf8.DecodeRune(p); r != utf8.RuneError || size > 1 {
		return size
	}
	return 0
}

// lit hashes the bytes of a literal (number, true, false, null), one unit
// each, within the budget.
func (t *text) lit(v []byte) {
	for len(v) > 0 && !t.full() {
		n := min(len(v), t.room())
		t.put(v[:n])
		t.n += n
		v = v[n:]
		t.event()
	}
}
