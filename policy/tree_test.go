package policy

import (
	"maps"
	"math/rand/v2"
	"slices"
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

// radix sends a prompt to the endpoint whose tree matches more than 30%
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

// radix runs with the thresholds the routers' command lines default to,
// which is how they are deployed: cache_threshold 0.3,
// balance_abs_threshold 64, balance_rel_threshold 1.5 and max_tree_size
// 2^26 characters (vllm-project/router src/main.rs CliArgs; SGLang Model
// Gateway's CLI alike). The library's CacheAwareConfig::default() (0.5,
// 32, 1.1, max_tree_size 10000) is not what a launched router runs. A
// prompt matching 40% of a tree goes to that tree.
func TestRadixRunsTheRoutersCommandLineDefaults(t *testing.T) {
	if got, want := DefaultRadixConfig(), (RadixConfig{CacheThreshold: 0.3, BalanceAbs: 64, BalanceRel: 1.5, MaxBlocks: 1 << 26 / 256}); got != want {
		t.Fatalf("DefaultRadixConfig() = %+v, want %+v", got, want)
	}
	b := balancer(t)
	p := picker(t, "radix", b)
	home := pick(t, p, ring.Request{Blocks: blocks(1, 0, 10)})
	if got := pick(t, p, ring.Request{Blocks: append(blocks(1, 0, 4), blocks(2, 0, 10)[4:]...)}); got != home {
		t.Fatalf("a prompt matching 40%% of %s's tree went to %s", home, got)
	}
}

// With the loads imbalanced (more than 64 requests apart and more than
// 1.5x), radix sends even a matching prompt to the least loaded endpoint.
func TestRadixBalancesWhenImbalanced(t *testing.T) {
	for _, tc := range []struct {
		held     int
		wantHome bool
	}{{65, false}, {64, true}} {
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

// A tree holds at most MaxBlocks blocks per endpoint, and evicts as
// SGLang's radix cache does: the least recently used leaf first, a parent
// becoming a leaf when its last child goes. A shared root (a system
// prompt) outlives its continuations, and no block is kept whose parent
// was evicted (it could never match again).
func TestPrefixIndexEvictsLeavesFirst(t *testing.T) {
	x := newPrefixIndex(6)
	x.insert("a", []uint64{1, 2, 3}) // conversation A under system prompt 1
	x.insert("a", []uint64{1, 4, 5}) // conversation B under it, more recent
	for _, b := range []uint64{9, 8, 7, 6} {
		x.insert("a", []uint64{b}) // four one-block prompts: evict 3, 2, then 5
	}
	if x.size("a") != 6 {
		t.Fatalf("size %d, want the bound 6", x.size("a"))
	}
	if _, ok := x.blocks[1]["a"]; !ok {
		t.Errorf("the shared root 1 was evicted; held: 4 %v, 5 %v", x.blocks[4]["a"] != nil, x.blocks[5]["a"] != nil)
	}
	if got := x.match([]uint64{1, 4, 5}, []string{"a"}, nil)[0]; got != 2 {
		t.Fatalf("conversation B matches %d blocks, want 2 (its root 1 and 4 kept, the leaf 5 evicted)", got)
	}
	if got := x.match([]uint64{1, 2, 3}, []string{"a"}, nil)[0]; got != 1 {
		t.Fatalf("conversation A matches %d blocks, want 1 (the older leaf and its parent evicted, the shared root kept)", got)
	}
	for _, b := range []uint64{2, 3, 5} {
		if len(x.blocks[b]) != 0 {
			t.Errorf("evicted block %d is still indexed", b)
		}
	}

	// A conversation growing past the bound keeps its head, not its tail.
	x = newPrefixIndex(4)
	x.insert("a", []uint64{1, 2, 3})
	x.insert("a", []uint64{1, 2, 3, 4, 5})
	if got := x.match([]uint64{1, 2, 3, 4, 5, 6}, []string{"a"}, nil)[0]; got != 4 {
		t.Fatalf("the next turn matches %d blocks, want 4 (the tail 5 evicted)", got)
	}
}

// Over random prompts from a small tree of chained block hashes, shared by
// two endpoints, the index holds for each endpoint exactly what a plain
// model of SGLang's eviction holds: an explicit tree whose touched paths
// take the time of the touch, evicting the leaf of the oldest time.
func TestPrefixIndexEvictsAsLeastRecentlyUsedLeaves(t *testing.T) {
	const bound = 20
	type node struct {
		parent uint64
		last   int
	}
	x := newPrefixIndex(bound)
	model := map[string]map[uint64]*node{"a": {}, "b": {}}
	rng := rand.New(rand.NewPCG(1, 2))
	for now := range 3000 {
		// A root of 3 (system prompts), then up to 7 blocks of 3 choices
		// each: prompts share heads often, whole paths rarely.
		h := uint64(rng.IntN(3) + 1)
		blocks := []uint64{h}
		for range rng.IntN(8) {
			h = h*31 + uint64(rng.IntN(3)+1)
			blocks = append(blocks, h)
		}
		id := []string{"a", "b"}[rng.IntN(2)]
		x.insert(id, blocks)

		m := model[id]
		parent := uint64(0)
		for _, b := range blocks {
			n := m[b]
			if n == nil {
				n = &node{parent: parent}
				m[b] = n
			}
			n.last, parent = now, b
		}
		for len(m) > bound {
			children := map[uint64]bool{}
			for _, n := range m {
				children[n.parent] = true
			}
			victim := uint64(0)
			for b, n := range m {
				if !children[b] && (victim == 0 || n.last < m[victim].last) {
					victim = b
				}
			}
			delete(m, victim)
		}
		want := slices.Sorted(maps.Keys(m))
		var got []uint64
		for b, eps := range x.blocks {
			if _, ok := eps[id]; ok {
				got = append(got, b)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("prompt %d to %s %v: index holds %v, the model %v", now, id, blocks, got, want)
		}
		if x.size(id) != len(want) {
			t.Fatalf("prompt %d: size %d, want %d", now, x.size(id), len(want))
		}
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
// prompt tokens, but radix's thresholds (64 requests, 1.5) and score's
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

// BenchmarkPrefixIndexInsert inserts 32-block prompts under 8 shared
// roots into an index bounded at 4096 blocks, past the bound (evicting)
// after the first 128 or so.
func BenchmarkPrefixIndexInsert(b *testing.B) {
	x := newPrefixIndex(4096)
	prompt := make([]uint64, 32)
	for i := 0; b.Loop(); i++ {
		h := uint64(i%8 + 1)
		for j := range prompt {
			prompt[j] = h
			h = h*0x9e3779b97f4a7c15 + uint64(i)
		}
		x.insert("a", prompt)
	}
}
