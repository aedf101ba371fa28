package workers

import (
	"math/rand/v2"
	"slices"
	"testing"
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
