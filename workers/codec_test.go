package workers

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/prefixring/prefixring/internal/wire"
)

func TestOpsRoundTrip(t *testing.T) {
	ops := randomOps(rand.New(rand.NewPCG(5, 6)), 7)
	got, err := DecodeOps(AppendOps(nil, ops))
	if err != nil || !slices.Equal(got, ops) {
		t.Fatalf("got %v %v, want %v", got, err, ops)
	}
	b := AppendOps(nil, ops)
	for _, bad := range [][]byte{b[:len(b)-1], append(slices.Clone(b), 0), {0xff, 0xff, 0xff, 0xff, 0x0f}} {
		if _, err := DecodeOps(bad); err == nil {
			t.Errorf("decoded %x", bad)
		}
	}
}

func FuzzDecodeOps(f *testing.F) {
	f.Add(AppendOps(nil, randomOps(rand.New(rand.NewPCG(1, 1)), 3)))
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := DecodeOps(b)
		if err != nil {
			return
		}
		if again, err := DecodeOps(AppendOps(nil, ops)); err != nil || !slices.Equal(again, ops) {
			t.Fatalf("re-encoding %v gave %v %v", ops, again, err)
		}
	})
}

// A record a peer cannot decode (here a URL past the decoder's 4,096-byte
// string bound, as a build without the URL cap could send) is skipped
// alone: the ops beside it decode and apply, and the bad one is counted.
func TestDecodeSkipsABadRecordAlone(t *testing.T) {
	st := uint64(t0.UnixMilli()) << 16
	ops := []Op{
		{URL: "http://10.0.0.1:8000", Stamp: st, Origin: "r1"},
		{URL: "http://10.0.0.1:8000/" + strings.Repeat("a", 5000), Stamp: st, Origin: "r1"},
		{URL: "http://10.0.0.2:8000", Stamp: st, Origin: "r1", Removed: true},
		{URL: "http://10.0.0.3:8000", Stamp: st, Origin: "r1"},
	}
	got, err := DecodeOps(AppendOps(nil, ops))
	if err != nil {
		t.Fatalf("one bad record failed the message: %v", err)
	}
	s := newSet("r0", &clock{t0})
	s.Merge(got)
	if m := s.Members(); !slices.Equal(m, []string{"http://10.0.0.1:8000", "http://10.0.0.3:8000"}) || s.Dropped().Invalid != 1 || len(s.Ops()) != 3 {
		t.Fatalf("members %v, ops %d, dropped %+v", m, len(s.Ops()), s.Dropped())
	}
}

// A message from a build before the framed records (n, then bare
// records) still decodes: a rolling upgrade's new replicas read the old.
func TestDecodeReadsTheUnframedFormat(t *testing.T) {
	ops := randomOps(rand.New(rand.NewPCG(7, 8)), 5)
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, op := range ops {
		b = wire.AppendString(b, op.URL)
		b = binary.AppendUvarint(b, op.Stamp)
		b = wire.AppendString(b, op.Origin)
		flags := byte(0)
		if op.Removed {
			flags = 1
		}
		b = append(b, flags)
	}
	got, err := DecodeOps(b)
	if err != nil || !slices.Equal(got, ops) {
		t.Fatalf("unframed: %v %v, want %v", got, err, ops)
	}
	if got, err := DecodeOps([]byte{0}); err != nil || len(got) != 0 {
		t.Fatalf("an empty set: %v %v", got, err)
	}
	// No truncation of either form is a message.
	for _, full := range [][]byte{b, AppendOps(nil, ops)} {
		for i := range len(full) - 1 {
			if _, err := DecodeOps(full[:i]); err == nil {
				t.Fatalf("%x truncated to %d bytes decoded", full, i)
			}
		}
	}
}
