package policy

import (
	"testing"

	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
)

// RingRequest hands the ring what the keyer found, its share's earliness
// included, with tokens at 4 bytes each.
func TestRingRequestCarriesTheKey(t *testing.T) {
	key := prefix.Key{Hash: 1, Keyed: true, Group: 2, GroupShare: 0.25, EarlyShare: true, SharedChars: 4000, NewBytes: 400}
	got := RingRequest(prefix.RouteChat, 8000, key)
	want := ring.Request{Key: 1, Keyed: true, Group: 2, GroupShare: 0.25, EarlyShare: true,
		SharedTokens: 1000, Tokens: 2000, NewTokens: 100, NewKnown: true}
	if got.Key != want.Key || got.Keyed != want.Keyed || got.Group != want.Group || got.GroupShare != want.GroupShare ||
		got.EarlyShare != want.EarlyShare || got.SharedTokens != want.SharedTokens || got.Tokens != want.Tokens ||
		got.NewTokens != want.NewTokens || got.NewKnown != want.NewKnown {
		t.Fatalf("%+v, want %+v", got, want)
	}
	key.NewBytes, key.EarlyShare = -1, false
	if got := RingRequest(prefix.RouteCompletions, 8000, key); got.NewTokens != 0 || got.NewKnown || got.EarlyShare {
		t.Fatalf("a completion: %+v", got)
	}
}
