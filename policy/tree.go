package policy

import (
	"math"
	"sync"

	"github.com/prefixring/prefixring/ring"
)

// RadixConfig are the thresholds of the cache_aware policy of the SGLang
// Model Gateway and the vLLM router; the defaults are their command lines'
// defaults, which a launched router runs (their library's
// CacheAwareConfig::default(), 0.5, 32 and 1.1, is not what either CLI
// passes).
type RadixConfig struct {
	// CacheThreshold: a request goes to the endpoint whose tree matches
	// the larger share of its prompt when that share is above this;
	// otherwise to the endpoint with the smallest tree. Default 0.3.
	CacheThreshold float64
	// BalanceAbs and BalanceRel: the load is imbalanced when the most and
	// least loaded endpoints differ by more than BalanceAbs requests and
	// the most loaded holds more than BalanceRel times the least; then a
	// request goes to the least loaded. Defaults 64 and 1.5.
	BalanceAbs int64
	BalanceRel float64
	// MaxBlocks bounds each endpoint's tree, in prompt blocks; past it the
	// least recently used leaves are evicted, as SGLang's radix cache
	// evicts them, so a shared head outlives its continuations. Default
	// 262144, SGLang's max_tree_size of 2^26 characters in 256-character
	// blocks.
	MaxBlocks int
}

// DefaultRadixConfig returns the routers' command-line defaults
// (vllm-project/router's and SGLang Model Gateway's --cache-threshold,
// --balance-abs-threshold, --balance-rel-threshold, --max-tree-size).
func DefaultRadixConfig() RadixConfig {
	return RadixConfig{CacheThreshold: 0.3, BalanceAbs: 64, BalanceRel: 1.5, MaxBlocks: 1 << 26 / 256}
}

// Radix is the cache_aware policy of the SGLang Model Gateway and the vLLM
// router: an approximate radix tree per replica of the prompts it sent to
// each endpoint; when the loads are balanced, a request goes to the
// endpoint whose tree matches most of its prompt if that is more than the
// threshold, else to the endpoint with the smallest tree; when they are
// imbalanced, to the least loaded. Loads are requests in flight.
type Radix struct {
	eps Endpoints
	cfg RadixConfig
	mu  sync.Mutex
	idx *prefixIndex
}

// NewRadix returns the policy over eps. Where eps counts requests (the
// balancer does), loads are in-flight requests whatever its signal.
func NewRadix(eps Endpoints, cfg RadixConfig) *Radix {
	return &Radix{eps: byRequests(eps), cfg: cfg, idx: newPrefixIndex(cfg.MaxBlocks)}
}

// Acquire implements Picker.
func (p *Radix) Acquire(req ring.Request) (ring.Lease, error) {
	c, err := candidates(p.eps, req)
	if err != nil {
		return ring.Lease{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	lo, hi := 0, 0
	for i := range c {
		if c[i].Load < c[lo].Load {
			lo = i
		}
		if c[i].Load > c[hi].Load {
			hi = i
		}
	}
	pick, d := lo, ring.DecisionFallback
	if imbalanced := c[hi].Load-c[lo].Load > p.cfg.BalanceAbs && float64(c[hi].Load) > p.cfg.BalanceRel*float64(c[lo].Load); !imbalanced {
		best, n := bestMatch(p.idx, req.Blocks, c)
		if len(req.Blocks) > 0 && float64(n)/float64(len(req.Blocks)) > p.cfg.CacheThreshold {
			pick, d = best, ring.DecisionHome
		} else {
			pick = smallestTree(p.idx, c)
		}
	}
	p.idx.insert(c[pick].ID, req.Blocks)
	return p.eps.AcquireOn(req, c[pick].ID, d), nil
}

// bestMatch returns the candidate holding the longest prefix of blocks
// (ties: the less loaded, then the first) and its length.
func bestMatch(idx *prefixIndex, blocks []uint64, c []ring.Candidate) (int, int) {
	best, bestN := 0, -1
	for i := range c {
		n := 0
		if len(blocks) > 0 {
			var one [1]int
			n = idx.match(blocks, []string{c[i].ID}, one[:0])[0]
		}
		if n > bestN || n == bestN && c[i].Load < c[best].Load {
			best, bestN = i, n
		}
	}
	return best, bestN
}

// smallestTree returns the candidate whose tree holds the fewest blocks
// (ties: the less loaded, then the first).
func smallestTree(idx *prefixIndex, c []ring.Candidate) int {
	best, size := 0, math.MaxInt
	for i := range c {
		if s := idx.size(c[i].ID); s < size || s == size && c[i].Load < c[best].Load {
			best, size = i, s
		}
	}
	return best
}

// ScoreConfig weighs the score policy's two terms.
type ScoreConfig struct {
	// Alpha weighs the estimated overlap: the share of the prompt's blocks
	// the endpoint was sent before (0..1). Default 1.
	Alpha float64
	// Beta weighs the queue: requests in flight on the endpoint. Default
	// 0.05: 20 requests of queue cost as much as a whole prompt of cache.
	Beta float64
	// MaxBlocks bounds each endpoint's index, as RadixConfig.MaxBlocks.
	MaxBlocks int
}

// DefaultScoreConfig returns the documented defaults.
func DefaultScoreConfig() ScoreConfig {
	return ScoreConfig{Alpha: 1, Beta: 0.05, MaxBlocks: 1 << 26 / 256}
}

// Score sends a request to the endpoint with the highest
// Alpha·overlap − Beta·queue, the overlap estimated from an index of the
// prompts this replica sent (as Radix keeps it) and the queue being the
// requests in flight; ties go to the first endpoint.
type Score struct {
	eps Endpoints
	cfg ScoreConfig
	mu  sync.Mutex
	idx *prefixIndex
}

// NewScore returns the policy over eps. Where eps counts requests (the
// balancer does), the queue is in-flight requests whatever its signal.
func NewScore(eps Endpoints, cfg ScoreConfig) *Score {
	return &Score{eps: byRequests(eps), cfg: cfg, idx: newPrefixIndex(cfg.MaxBlocks)}
}

// Acquire implements Picker.
func (p *Score) Acquire(req ring.Request) (ring.Lease, error) {
	c, err := candidates(p.eps, req)
	if err != nil {
		return ring.Lease{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	best, bestScore, bestOverlap := 0, math.Inf(-1), 0.0
	for i := range c {
		overlap := 0.0
		if len(req.Blocks) > 0 {
			var one [1]int
			overlap = float64(p.idx.match(req.Blocks, []string{c[i].ID}, one[:0])[0]) / float64(len(req.Blocks))
		}
		if s := p.cfg.Alpha*overlap - p.cfg.Beta*float64(c[i].Load); s > bestScore {
			best, bestScore, bestOverlap = i, s, overlap
		}
	}
	d := ring.DecisionFallback
	if bestOverlap > 0 {
		d = ring.DecisionHome
	}
	p.idx.insert(c[best].ID, req.Blocks)
	return p.eps.AcquireOn(req, c[best].ID, d), nil
}
