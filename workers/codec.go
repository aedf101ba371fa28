package workers

import (
	"encoding/binary"

	"github.com/prefixring/prefixring/internal/wire"
)

// The ops' codec, what gossip carries of the set: n, then n ops, each: url,
// stamp, origin, flags (bit 0: removed). Strings are length-prefixed,
// integers varints.
const maxOps = 1 << 14

// AppendOps appends ops.
func AppendOps(b []byte, ops []Op) []byte {
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, op := range ops {
		b = wire.AppendString(b, op.URL)
		b = binary.AppendUvarint(b, op.Stamp)
		b = wire.AppendString(b, op.Origin)
		var flags byte
		if op.Removed {
			flags |= 1
		}
		b = append(b, flags)
	}
	return b
}

// DecodeOps reads ops written by [AppendOps], and nothing after them. It
// never panics on bad input.
func DecodeOps(b []byte) ([]Op, error) {
	r := wire.NewReader(b)
	n := r.Count(maxOps)
	out := make([]Op, 0, min(n, 1024))
	for i := 0; i < n && r.Err() == nil; i++ {
		op := Op{URL: r.String(), Stamp: r.Uvarint(), Origin: r.String()}
		op.Removed = r.Byte()&1 != 0
		out = append(out, op)
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return out, nil
}
