package workers

import (
	"encoding/binary"

	"github.com/prefixring/prefixring/internal/wire"
)

// The ops' codec, what gossip carries of the set: the bytes 0x80 0x00, the
// format (1), n, then n records, each length-prefixed: url, stamp, origin,
// flags (bit 0: removed). Strings are length-prefixed, integers varints.
// The length prefix frames each record, so a record that does not decode
// (a string past the decoder's bound, a truncated field) is skipped alone
// rather than failing the message, and bytes after a record's flags are
// ignored: a later build may add fields.
//
// Builds before the framing wrote n, then bare records. 0x80 0x00 is a
// zero no varint encoder writes, so the two forms cannot be confused and
// no truncation of either is a valid message; this build reads both (a
// build before it refuses the framed form: during a rolling upgrade the
// old replicas miss the new ones' worker ops until they too are
// upgraded).
const (
	maxOps       = 1 << 14
	formatFramed = 1
)

// AppendOps appends ops.
func AppendOps(b []byte, ops []Op) []byte {
	b = append(b, 0x80, 0x00, formatFramed)
	b = binary.AppendUvarint(b, uint64(len(ops)))
	var rec []byte
	for _, op := range ops {
		rec = wire.AppendString(rec[:0], op.URL)
		rec = binary.AppendUvarint(rec, op.Stamp)
		rec = wire.AppendString(rec, op.Origin)
		var flags byte
		if op.Removed {
			flags |= 1
		}
		rec = append(rec, flags)
		b = wire.AppendBytes(b, rec)
	}
	return b
}

// DecodeOps reads ops written by [AppendOps], and nothing after them. It
// never panics on bad input. A record whose frame is sound but whose
// fields do not decode comes back as the zero Op, which no set accepts:
// [Set.Merge] drops it and counts it, and the records beside it apply. A
// frame that does not parse (a length past the message) fails the whole
// message, since nothing after it can be found.
func DecodeOps(b []byte) ([]Op, error) {
	r := wire.NewReader(b)
	framed := len(b) > 1 && b[0] == 0x80 && b[1] == 0x00
	if framed && (len(r.Bytes(2)) != 2 || r.Byte() != formatFramed) {
		r.Fail(wire.ErrMalformed)
	}
	n := r.Count(maxOps)
	out := make([]Op, 0, min(n, 1024))
	for i := 0; i < n && r.Err() == nil; i++ {
		if !framed {
			op := readOp(r)
			if r.Err() == nil {
				out = append(out, op)
			}
			continue
		}
		rec := r.LenBytes()
		if r.Err() != nil {
			break
		}
		out = append(out, decodeOp(rec))
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return out, nil
}

func readOp(r *wire.Reader) Op {
	op := Op{URL: r.String(), Stamp: r.Uvarint(), Origin: r.String()}
	op.Removed = r.Byte()&1 != 0
	return op
}

// decodeOp reads one framed record, the zero Op if it does not decode.
func decodeOp(rec []byte) Op {
	r := wire.NewReader(rec)
	if op := readOp(r); r.Err() == nil {
		return op
	}
	return Op{}
}
