// Package coretest checks that a replicated state merges as a CRDT must, as
// testing/fstest.TestFS checks a file system: over seeded random batches of
// values, merging is idempotent, commutative and associative, and (when
// the state reports its change) the change alone brings a copy up to date.
package coretest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"
)

// State describes a state of values V for [CheckMergeLaws].
type State[S, V any] struct {
	// New returns an empty state.
	New func() S
	// Merge merges values into s and returns the change (the values that
	// changed s), or nil if the state does not report it.
	Merge func(s S, in ...V) []V
	// Values returns what s holds, in a canonical order: two states are
	// equal when their values are (reflect.DeepEqual).
	Values func(s S) []V
	// Value draws a random value. Draw from small ranges, so that ties
	// (equal versions, equal stamps with different content) occur.
	Value func(r *rand.Rand) V
	// ReportsChange: Merge returns the change, and merging the change into
	// a copy of the state before gives the state after.
	ReportsChange bool
	// Cases is the number of random cases of each law; default 2000.
	Cases int
}

// Seed is the laws' seed: 1, or $GOSSIP_SEED to explore.
func Seed(t testing.TB) uint64 {
	seed := uint64(1)
	if s := os.Getenv("GOSSIP_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d", seed)
	return seed
}

// CheckMergeLaws checks the merge laws of st, each in a subtest.
func CheckMergeLaws[S, V any](t *testing.T, st State[S, V]) {
	t.Helper()
	cases := st.Cases
	if cases == 0 {
		cases = 2000
	}
	batch := func(r *rand.Rand) []V {
		out := make([]V, r.IntN(5))
		for i := range out {
			out[i] = st.Value(r)
		}
		return out
	}
	merged := func(parts ...[]V) []V {
		s := st.New()
		for _, p := range parts {
			st.Merge(s, p...)
		}
		return st.Values(s)
	}
	law := func(name string, check func(r *rand.Rand) string) {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(Seed(t), 1))
			for i := range cases {
				if msg := check(r); msg != "" {
					t.Fatalf("case %d: %s", i, msg)
				}
			}
		})
	}
	law("idempotent", func(r *rand.Rand) string {
		a := batch(r)
		s := st.New()
		st.Merge(s, a...)
		before := st.Values(s)
		if ch := st.Merge(s, st.Values(s)...); len(ch) != 0 {
			return sprint("merging a state into itself changed", ch)
		}
		if got := st.Values(s); !reflect.DeepEqual(got, before) {
			return sprint("merging a state into itself gave", got, "was", before)
		}
		if got, want := merged(a, a), merged(a); !reflect.DeepEqual(got, want) {
			return sprint("a∪a =", got, "a =", want)
		}
		return ""
	})
	law("commutative", func(r *rand.Rand) string {
		a, b := batch(r), batch(r)
		if ab, ba := merged(a, b), merged(b, a); !reflect.DeepEqual(ab, ba) {
			return sprint("a∪b =", ab, "b∪a =", ba)
		}
		return ""
	})
	law("associative", func(r *rand.Rand) string {
		a, b, c := batch(r), batch(r), batch(r)
		if l, rr := merged(merged(a, b), c), merged(a, merged(b, c)); !reflect.DeepEqual(l, rr) {
			return sprint("(a∪b)∪c =", l, "a∪(b∪c) =", rr)
		}
		return ""
	})
	if !st.ReportsChange {
		return
	}
	law("change", func(r *rand.Rand) string {
		a, b := batch(r), batch(r)
		s := st.New()
		st.Merge(s, a...)
		change := st.Merge(s, b...)
		if got, want := merged(a, change), st.Values(s); !reflect.DeepEqual(got, want) {
			return sprint("a∪change =", got, "a∪b =", want)
		}
		return ""
	})
}

func sprint(args ...any) string {
	var b []byte
	for i, a := range args {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "%v", a)
	}
	return string(b)
}
