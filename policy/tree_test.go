package policy

import (
	"testing"

	"github.com/prefixring/prefixring/ring"
)

// blocks is a prompt of n blocks whose first shared blocks are the ones of
// the prompt seeded with 0 (a shared system prompt), the rest its own.
func blocks(seed uint64, shared, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		if i < shared {
			out[i] = uint64(i + 1)
		} else {
			out[i] = seed<<32 | uint64(i+1)
		}
	}
	return out
}

// radix sends a prompt to the endpoint whose tree matches more than half
// of it, else to the endpoint with the smallest tree, and inserts it into
// the chosen endpoint's tree.
func TestRadixFollowsTheLongestMatch(t *testing.T) {
	b := balancer(t)
	p := picker(t, "radix", b)
	first := pick(t, p, ring.Request{Blocks: blocks(1, 0, 8)}) // empty trees: the first smallest
	if first != "a" {
		t.Fatalf("first prompt went to %s, want a (all trees empty, all idle)", first)
	}
	// The same conversation, one turn later: 8 of 10 blocks match on a.
	if got := pick(t, p, ring.Request{Blocks: append(blocks(1, 0, 8), 99, 100)}); got != "a" {
		t.Fatalf("a prompt matching 80%% of a's tree went to %s", got)
	}
	// Another prompt matching 2 of 8 blocks (25%): to the smallest tree.
	if got := pick(t, p, ring.Request{Blocks: append(blocks(1, 0, 2), blocks(2, 0, 8)[2:]...)}); got == "a" {
		t.Fatal("a prompt matching 25% of a's tree went to a, not to the smallest tree")
	}
}

// With the loads imbalanced (more than 32 requests apart and more than
// 1.1x), radix sends even a matching prompt to the least loaded endpoint.
func TestRadixBalancesWhenImbalanced(t *testing.T) {
	for _, tc := range []struct {
		held     int
		wantHome bool
	}{{33, false}, {32, true}} {
		b := balancer(t)
		p := picker(t, "radix", b)
		pr := blocks(1, 0, 8)
		home := pick(t, p, ring.Request{Blocks: pr})
		held := hold(b, home, tc.held)
		if got := pick(t, p, ring.Request{Blocks: pr}); (got == home) != tc.wantHome {
			t.Errorf("%d held on the matching endpoint %s: radix went to %s", tc.held, home, got)
		}
		release(held)
	}
}

// A tree holds at most MaxBlocks blocks per endpoint: least recently used
// ones go first.
func TestPrefixIndexEvictsLeastRecentlyUsed(t *testing.T) {
	x := newPrefixIndex(4)
	x.insert("a", []uint64{1, 2, 3})
	x.insert("a", []uint64{1, 9}) // 1 is used again; 2 and 3 are older
	x.insert("a", []uint64{7})    // 5 blocks: evict the oldest, 2
	if got := x.match([]uint64{1, 2, 3}, []string{"a"}, nil); got[0] != 1 {
		t.Fatalf("match after evicting 2: %d blocks, want 1", got[0])
	}
	if x.size("a") != 4 || x.match([]uint64{1, 9}, []string{"a"}, nil)[0] != 2 {
		t.Fatalf("size %d; the recent path lost", x.size("a"))
	}
	if len(x.blocks[2]) != 0 {
		t.Fatal("an evicted block is still indexed")
	}
}

// score trades overlap against queue depth: a full match is worth 20
// requests of queue by default.
func TestScoreTradesOverlapForQueue(t *testing.T) {
	b := balancer(t)
	p := picker(t, "score", b)
	pr := blocks(1, 0, 8)
	home := pick(t, p, ring.Request{Blocks: pr})
	held := hold(b, home, 19)
	if got := pick(t, p, ring.Request{Blocks: pr}); got != home {
		t.Fatalf("full overlap, 19 queued: went to %s, want %s (1 - 0.95 > 0)", got, home)
	}
	held = append(held, hold(b, home, 2)...)
	defer release(held)
	if got := pick(t, p, ring.Request{Blocks: pr}); got == home {
		t.Fatal("full overlap, 21 queued: stayed (1 - 1.05 < 0)")
	}
}

// prefix-key follows the group key (the shared system prompt) alone,
// unbounded; requests without a group go to the least loaded endpoint.
func TestPrefixKeyFollowsTheGroup(t *testing.T) {
	b := balancer(t)
	p := picker(t, "prefix-key", b)
	home, _ := b.Home(77)
	held := hold(b, home, 20)
	defer release(held)
	for k := range uint64(5) {
		if got := pick(t, p, ring.Request{Key: 1000 + k, Keyed: true, Group: 77}); got != home {
			t.Fatalf("request %d of group 77 went to %s, home %s", k, got, home)
		}
	}
	if got := pick(t, p, ring.Request{Key: 1, Keyed: true}); got == home {
		t.Fatal("a request without a group went to the busiest endpoint")
	}
}

// The tree policies keep per-instance state: two instances (two router
// replicas) do not share what they sent.
func TestTreesArePerReplica(t *testing.T) {
	b := balancer(t)
	p1, p2 := picker(t, "radix", b), picker(t, "radix", b)
	pr := blocks(1, 0, 8)
	a := pick(t, p1, ring.Request{Blocks: pr})
	hold1 := hold(b, a, 1) // a is busier now: the other replica's smallest-tree choice differs
	defer release(hold1)
	if got := pick(t, p2, ring.Request{Blocks: pr}); got == a {
		t.Fatal("replica 2 found replica 1's prompt in its tree")
	}
}

// Under the tokens signal (serve's default) the balancer's loads are
// prompt tokens, but radix's thresholds (32 requests, 1.1) and score's
// Beta (0.05 a request) are per request, as in eval, which runs them
// under the requests signal: both read in-flight request counts, not
// token loads. One 2000-token prompt in flight on the matching endpoint
// is one request, not imbalance.
func TestTreesCompareRequestsUnderTheTokensSignal(t *testing.T) {
	for _, name := range []string{"radix", "score"} {
		cfg := ring.DefaultConfig() // SignalTokens
		b, err := ring.NewBalancer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SetEndpoints(ids); err != nil {
			t.Fatal(err)
		}
		p := picker(t, name, b)
		pr := blocks(1, 0, 8)
		first, err := p.Acquire(ring.Request{Blocks: pr, Tokens: 2000})
		if err != nil {
			t.Fatal(err)
		}
		// first stays in flight: 2000 tokens, 1 request on its endpoint.
		held := hold(b, first.Endpoint, 2) // 2 more requests (1 token each)
		if got := pick(t, p, ring.Request{Blocks: pr, Tokens: 2000}); got != first.Endpoint {
			t.Errorf("%s: 3 requests (%d tokens) in flight on the matching endpoint %s: went to %s, want the match",
				name, b.Inflight().Load(first.Endpoint), first.Endpoint, got)
		}
		release(held)
		first.Release()
	}
}
