// Package wire holds the few primitives the gossiped payloads' codecs share:
// length-prefixed strings, varints and a reader that fails once and stays
// failed, so a decoder reads a whole message and checks one error at the
// end. It never panics on bad input, and never trusts a count to size an
// allocation beyond what the bytes left could carry.
package wire

import (
	"encoding/binary"
	"errors"
)

// ErrMalformed is the error of a message that does not parse.
var ErrMalformed = errors.New("malformed message")

// MaxString bounds a decoded string's length.
const MaxString = 1 << 12

// AppendString appends s, length first.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendBytes appends p, length first.
func AppendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// Reader reads a message. After the first error every read returns the
// zero value, and Err reports the error.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err returns the first error, nil if none.
func (r *Reader) Err() error { return r.err }

// Fail records err (if no error was recorded yet).
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Len returns the number of bytes left.
func (r *Reader) Len() int { return len(r.b) }

// Done returns the first error, or ErrMalformed if bytes are left over.
func (r *Reader) Done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = ErrMalformed
	}
	return r.err
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = ErrMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Varint reads a signed varint.
func (r *Reader) Varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = ErrMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Bytes reads n bytes; the result aliases the message.
func (r *Reader) Bytes(n int) []byte {
	if r.err != nil {
		return nil // failed already: Err keeps the first error
	}
	if n < 0 || n > len(r.b) {
		r.err = ErrMalformed
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

// Count reads a count of at most limit.
func (r *Reader) Count(limit int) int {
	n := r.Uvarint()
	if n > uint64(limit) {
		r.err = ErrMalformed
		return 0
	}
	return int(n)
}

// String reads a length-prefixed string of at most MaxString bytes.
func (r *Reader) String() string { return string(r.Bytes(r.Count(MaxString))) }

// LenBytes reads a length-prefixed byte string.
func (r *Reader) LenBytes() []byte { return r.Bytes(r.Count(len(r.b))) }

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if b := r.Bytes(1); b != nil {
		return b[0]
	}
	return 0
}

// U64 reads 8 bytes, little endian.
func (r *Reader) U64() uint64 {
	if b := r.Bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// U32 reads 4 bytes, little endian.
func (r *Reader) U32() uint32 {
	if b := r.Bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

// Room reports whether n items of at least size bytes each can fit in what
// is left, and fails the reader if not.
func (r *Reader) Room(n, size int) bool {
	if r.err == nil && n > len(r.b)/size {
		r.err = ErrMalformed
	}
	return r.err == nil
}
