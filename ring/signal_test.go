package ring

import (
	"testing"
)

func tokensBalancer(t *testing.T, cfg Config, ids ...string) *Balancer {
	t.Helper()
	b, err := NewBalancer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetEndpoints(ids); err != nil {
		t.Fatal(err)
	}
	return b
}

// Under the tokens signal a request weighs its prompt's tokens in P until
// its first byte (Settle), then nothing, and in K until it ends; every
// weight and every request is given back once, whatever the order of
// Settle and Release.
func TestTokenLeaseWeighsItsPromptUntilSettled(t *testing.T) {
	b := tokensBalancer(t, DefaultConfig(), "a", "b")
	l, err := b.Acquire(Request{Key: 1, Keyed: true, Tokens: 3000})
	if err != nil {
		t.Fatal(err)
	}
	f := b.Inflight()
	if f.Load(l.Endpoint) != 3000 || f.Requests(l.Endpoint) != 1 {
		t.Fatalf("load %d, requests %d; want 3000, 1", f.Load(l.Endpoint), f.Requests(l.Endpoint))
	}
	l.Settle()
	l.Settle()
	if f.Load(l.Endpoint) != 0 || f.Total() != 0 || f.Requests(l.Endpoint) != 1 || f.KV().Load(l.Endpoint) != 3000 {
		t.Fatalf("after settling: load %d, total %d, requests %d, K %d; want 0, 0, 1, 3000",
			f.Load(l.Endpoint), f.Total(), f.Requests(l.Endpoint), f.KV().Load(l.Endpoint))
	}
	cp := l
	l.Release()
	cp.Release()
	cp.Settle()
	if f.Load(l.Endpoint) != 0 || f.Total() != 0 || f.Requests(l.Endpoint) != 0 || f.KV().Total() != 0 {
		t.Fatalf("after release: load %d, total %d, requests %d, K %d", f.Load(l.Endpoint), f.Total(), f.Requests(l.Endpoint), f.KV().Total())
	}
	// Released before its first byte: the whole weight comes back.
	l2, _ := b.Acquire(Request{Key: 1, Keyed: true, Tokens: 500})
	l2.Release()
	l2.Settle()
	if f.Total() != 0 {
		t.Fatalf("total %d after releasing an unsettled lease", f.Total())
	}
}

// Settle and Release racing from two goroutines (the response copy and the
// handler's deferred release) leave nothing behind.
func TestSettleRacingReleaseLeavesNothing(t *testing.T) {
	b := tokensBalancer(t, DefaultConfig(), "a", "b", "c")
	for i := range 500 {
		l, err := b.Acquire(Request{Key: uint64(i), Keyed: true, Tokens: int64(100 + i)})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { l.Settle(); close(done) }()
		l.Release()
		<-done
	}
	if f := b.Inflight(); f.Total() != 0 {
		t.Fatalf("total %d after every lease was released", f.Total())
	}
}

// A hot key's prompts fill its home up to the token bound, then spill; no
// endpoint ever holds more than the limit computed at its pick, and the
// floor lets an idle cluster keep a big prompt home.
func TestHotKeySpillsByTokens(t *testing.T) {
	cfg := kvAverage()
	cfg.MinBound = 8192
	b := tokensBalancer(t, cfg, fleet(4, 0)...)
	first, err := b.Acquire(Request{Key: 77, Keyed: true, Tokens: 20000})
	if err != nil || first.Decision != DecisionHome {
		t.Fatalf("a 20000-token prompt on an idle cluster: %v %v, want home", first.Decision, err)
	}
	decisions := map[Decision]int{}
	var leases []Lease
	for range 60 {
		before := b.Inflight().Total()
		l, err := b.Acquire(Request{Key: 77, Keyed: true, Tokens: 3000})
		if err != nil {
			t.Fatal(err)
		}
		limit := cfg.bound().Limit(before, 3000, 4)
		if got := b.Inflight().Load(l.Endpoint); got > limit {
			t.Fatalf("%s holds %d tokens after the pick, limit %d", l.Endpoint, got, limit)
		}
		decisions[l.Decision]++
		leases = append(leases, l)
	}
	if decisions[DecisionSpill] == 0 || decisions[DecisionHome] == 0 {
		t.Fatalf("decisions %v: want the home filled, then spills", decisions)
	}
	// Settling the home's prompts frees P but not K: the home still holds
	// their prompts while they decode, so the key stays away until they end.
	first.Settle()
	for _, l := range leases {
		l.Settle()
	}
	if b.Inflight().Total() != 0 {
		t.Fatalf("P total %d after every prefill ended", b.Inflight().Total())
	}
	if l, _ := b.Acquire(Request{Key: 77, Keyed: true, Tokens: 3000}); l.Decision == DecisionHome {
		t.Fatalf("the home took more while it holds %d KV tokens of %d", b.Inflight().KV().Load(l.Endpoint), b.Inflight().KV().Total())
	} else {
		l.Release()
	}
	first.Release()
	for _, l := range leases {
		l.Release()
	}
	if l, _ := b.Acquire(Request{Key: 77, Keyed: true, Tokens: 3000}); l.Decision != DecisionHome {
		t.Fatalf("after every request ended the key went %v", l.Decision)
	}
}

// setKVCapacity gives every endpoint of b a KV capacity of capacity
// tokens, so that K's bound is the engine's and a test reads P's alone.
func setKVCapacity(t *testing.T, b *Balancer, capacity int64, ids ...string) {
	t.Helper()
	var eps []Endpoint
	for _, id := range ids {
		eps = append(eps, Endpoint{ID: id, Healthy: true, KVCapacity: capacity})
	}
	if err := b.Update(eps); err != nil {
		t.Fatal(err)
	}
}

// The floor grows with the request: an endpoint may take a prompt while it
// holds no more than that prompt's own size in tokens (Bound.Own), so at
// low load a big prompt is not spilled for a small one queued at home.
func TestOwnFloor(t *testing.T) {
	b := Bound{LoadFactor: 1.25, Own: 1}
	// 8 endpoints, 10000 tokens in flight: the relative bound for a 6000
	// token prompt is ceil(1.25*16000/8) = 2500, below the prompt itself.
	if got := b.Limit(10000, 6000, 8); got != 12000 {
		t.Fatalf("limit %d, want 2 x 6000", got)
	}
	if got := (Bound{LoadFactor: 1.25}).Limit(10000, 6000, 8); got != 6000 {
		t.Fatalf("without Own: limit %d, want the prompt itself", got)
	}
}

// A chat turn weighs its new tokens at its home (the home holds the turns
// before), and the home may run up to the tokens it saves above the bound;
// elsewhere the turn weighs its whole prompt.
func TestHomeWeighsTheNewTokens(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MinBound = 0
	b := tokensBalancer(t, cfg, fleet(4, 0)...)
	setKVCapacity(t, b, 1<<20, fleet(4, 0)...) // P alone decides
	home, _ := b.Home(9)
	// Load the home with another key's 5000 tokens; the others are idle.
	other := uint64(10)
	for h, _ := b.Home(other); h != home; h, _ = b.Home(other) {
		other++
	}
	busy, _ := b.Acquire(Request{Key: other, Keyed: true, Tokens: 5000})
	defer busy.Release()
	// A first turn (no history) of 4000 tokens spills: 5000 queued ahead
	// is more than its own size (the own floor, 2 x 4000, is passed).
	l, _ := b.Acquire(Request{Key: 9, Keyed: true, Tokens: 4000})
	if l.Endpoint == home {
		t.Fatal("a cold 4000-token prompt queued behind 5000 at its home")
	}
	l.Release()
	// A later turn whose home holds all but 200 of its 4000 tokens stays:
	// its home limit is ceil(1.25*5200/4) = 1625, plus the 3800 tokens a
	// spill would recompute.
	l, _ = b.Acquire(Request{Key: 9, Keyed: true, Tokens: 4000, NewTokens: 200})
	if l.Endpoint != home || l.Decision != DecisionHome || b.Inflight().Load(home) != 5200 {
		t.Fatalf("a warm turn went to %s (home %s), home load %d, want 5200", l.Endpoint, home, b.Inflight().Load(home))
	}
	l.Release()
	// With 6000 queued ahead it spills after all: 6200 tokens of waiting
	// at home cost more than its 4000 cold elsewhere.
	more, _ := b.AcquireOn(Request{Tokens: 1000}, home, DecisionFallback), 0
	defer more.Release()
	if l, _ = b.Acquire(Request{Key: 9, Keyed: true, Tokens: 4000, NewTokens: 200}); l.Endpoint == home {
		t.Fatal("a warm turn stayed behind 6000 queued tokens")
	}
	l.Release()
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]Signal{"": SignalTokens, "tokens": SignalTokens, "requests": SignalRequests} {
		if got, err := ParseSignal(in); err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseSignal("bytes"); err == nil {
		t.Fatal("unknown signal accepted")
	}
	cfg := DefaultConfig()
	cfg.Signal = "bytes"
	if cfg.Validate() == nil {
		t.Fatal("config with an unknown signal accepted")
	}
}

// Every replica derives the same spread from the same share.
func TestGroupSpreadIsDeterministic(t *testing.T) {
	a := tokensBalancer(t, DefaultConfig(), fleet(8, 0)...)
	c := tokensBalancer(t, DefaultConfig(), fleet(8, 0)...)
	for k := range uint64(100) {
		req := Request{Key: k * 7919, Keyed: true, Group: k % 5, GroupShare: float64(k%5) / 40, Tokens: 500}
		x, _ := a.Acquire(req)
		y, _ := c.Acquire(req)
		x.Release()
		y.Release()
		if x.Endpoint != y.Endpoint {
			t.Fatalf("key %d: %s and %s", k, x.Endpoint, y.Endpoint)
		}
	}
}

// A chat request placed by its key alone has no floor under P: its new
// tokens are known, so the home's slack already keeps what the home holds,
// and a burst of cold first turns on one key spreads as CHWBL's bound
// spreads it. A completion, whose new tokens the router cannot tell, and
// a request whose group is held together keep the floor.
func TestKeyPlacedChatHasNoFloor(t *testing.T) {
	ids := fleet(4, 0)
	for _, tc := range []struct {
		name     string
		req      Request
		wantHome int
	}{
		// Cold first turns of 400 tokens: ceil(1.25·(total+400)/4) is
		// below 2·400 until the fleet holds 2160, so the home takes two.
		{"chat, key alone", Request{Key: 7, Keyed: true, Tokens: 400, NewKnown: true}, 2},
		{"completion", Request{Key: 7, Keyed: true, Tokens: 400}, 8},
		// A held group's shared part is long (minGroupShared): 400 new
		// tokens after it weigh 400 at the home, under the floor eight times.
		{"first turn of a held group", Request{Key: 7, Keyed: true, Tokens: minGroupShared + 400, NewKnown: true,
			Group: 3, SharedTokens: minGroupShared, GroupShare: 0.01}, 8},
		// A later turn of 400 new tokens after the shared part and 200 of
		// history: the home bounds P by max(ceil(1.25·(total+400)/4), 800)
		// plus the slack of minGroupShared+200 = 1224 tokens, so it takes
		// five (P 2000) before the first spill; the spill adds the whole
		// prompt, 1624, to the total, which lets the home take one more
		// (bound 1258 + 1224 ≥ 2400), and the eighth spills: 6 of 8.
		{"later turn of a held group", Request{Key: 7, Keyed: true, Tokens: minGroupShared + 600, NewKnown: true, NewTokens: 400,
			Group: 3, SharedTokens: minGroupShared, GroupShare: 0.01}, 6},
		{"later turn of a completion", Request{Key: 7, Keyed: true, Tokens: 400, NewTokens: 100}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tokensBalancer(t, DefaultConfig(), ids...)
			setKVCapacity(t, b, 1<<20, ids...) // P alone decides
			var home string
			at := map[string]int{}
			for k := range 8 {
				l, err := b.Acquire(tc.req)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release()
				if k == 0 {
					home = l.Endpoint
				}
				at[l.Endpoint]++
			}
			if at[home] != tc.wantHome {
				t.Fatalf("the home took %d of 8 (%v), want %d", at[home], at, tc.wantHome)
			}
		})
	}
}
