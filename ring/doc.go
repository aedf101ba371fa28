// Package ring places affinity keys on endpoints with consistent hashing with
// bounded loads (CHWBL), and keeps the in-flight leases the bound reads.
//
// The package is split in two layers:
//
//   - [Ring] is the pure, immutable placement: a sorted endpoint set and the
//     owner of each of its partitions, computed once by
//     github.com/buraksezer/consistent. [Ring.Pick] walks a key's candidates
//     and applies the request-level bound; it does no I/O, reads no clock and
//     allocates nothing for up to 1024 endpoints.
//   - [Balancer] is the concurrent shell: it swaps immutable snapshots
//     (ring + health + the [Loads] the bound reads) through an atomic pointer,
//     and hands out [Lease]s whose in-flight counters live outside the
//     snapshot, so they survive endpoint-set rebuilds.
//
// # Home and spill order
//
// A key's home is the owner of partition key mod P, as
// consistent.LocateKey would place it (the partition table is copied into
// the Ring at build time so the hot path takes no lock). The library's own
// fallback, GetClosestN, depends only on the owner, so every key homed on a
// hot endpoint would overflow onto the same neighbour. Instead the walk visits
// the owners of the successive partitions p, p+1, p+2, ..., skipping
// endpoints already seen. Partitions are hashed independently onto the
// library's ring, so the successor sequence differs from partition to
// partition: the overflow of one hot endpoint spreads over all others. The
// sequence depends only on the placement, so every replica that shares the
// endpoint set walks the same candidates.
//
// # The bound
//
// Two counts per endpoint are bounded. P, the load, is counted in a
// [Signal]'s unit. Under [SignalTokens] (the default) a request weighs its
// prompt's estimated tokens until the first byte of its answer
// ([Lease.Settle]), then nothing: P is the prefill queued on an endpoint,
// what a new request waits behind for its first token. K
// ([Inflight.KV]) is the prompt tokens in-flight requests hold in the
// engine's KV cache, from the pick until they end, a group's shared part
// once per endpoint (see kv.go): what a home that took more conversations
// than its memory holds would evict. A candidate takes a request only if
// both bounds hold. Under [SignalRequests] every request weighs 1 until it ends,
// CHWBL's and HAProxy's unit.
//
// An endpoint may take a request of weight w if, with it, it holds at
// most max(ceil(c · (total + w) / n), Min, (1+Own)·w), where c is
// [Config.LoadFactor], total the in-flight load of all endpoints, n the
// number of healthy endpoints, Min [Config.MinBound], and Own 1 under the
// tokens signal (an endpoint may always take a prompt while it holds no
// more than that prompt's size ahead of it) and 0 under the requests
// signal (the textbook bound). Min does not apply to a chat request
// that its key alone places (Request.NewKnown, no group spread), nor to a
// later turn of a chat whose group is held together: its new tokens are
// known, so the home's slack below weighs what the home holds of it, and
// a floor would only let a burst of turns pile onto one home. A held
// group's first turns keep it. At the key's home a chat turn weighs only
// its new tokens (Request.NewTokens: the home holds the conversation's
// earlier turns, and a recurring group's shared part), and the home may
// run above the bound by the tokens the request would recompute anywhere
// else: a spill pays only when the home's queue costs more than the cache
// saves. The walk takes the first candidate that passes; if none does, the
// least P-loaded usable endpoint.
//
// Whether some endpoint passes P's bound depends on the weights. When the
// loads cover the healthy set, their Total is their sum (one view of
// them; the overlay view's Total need not be: gossip/DESIGN.md) and the
// request excludes none of the set (not a retry), the least loaded
// endpoint holds some m <= total/n, and some endpoint on the walk passes
// when m + w is within the bound, w the request's weight, and only then
// but for the home, whose slack may let it pass above it. For unit weights (the requests signal) that always holds, since
// c >= 1, so a sequence of picks over one view of the loads never exceeds
// the bound (TestSequentialPicksNeverExceedTheBound). Under the tokens
// signal it holds when m <= w (the (1+Own)·w term, Own being 1, lets an
// endpoint that holds no more than the prompt take it), when m + w <= Min
// where the floor applies, or when w·(n − c) <= (c − 1)·total (the
// average plus the prompt is within c times the new average). Otherwise
// (a long prompt on a busy, even fleet) no endpoint passes: 18000 tokens
// on four endpoints at 20000 each meet a bound of
// max(ceil(1.25·98000/4), 16384, 36000) = 36000, which every endpoint
// would exceed by 2000. The request then falls back to the least loaded
// endpoint, which ends at most at floor(total/n) + w: above the bound by
// at most floor(total/n) − w, and by at most (w·(n − c) − (c − 1)·total)/n
// (TestWeightedPicksExceedTheBoundOnlyByFallingBack; see also the worst
// case below). Replicas that learn each other's placements late can
// exceed the bound too: see gossip/DESIGN.md.
//
// K's bound is [Config.KVCapacityFactor] (0.85) times the endpoint's KV
// capacity in tokens where known ([Endpoint.KVCapacity], from
// vllm:cache_config_info; [DefaultKVCapacityFactor] says why below 1), or,
// where every healthy endpoint's is known and the fleet is fuller,
// [Config.KVLoadFactor] (1.1) times the endpoint's capacity share of the
// fleet's K; else, with
// [Config.KVAverage] (off by default), max(ceil(c · (K total + w) / n),
// [Config.KVMinBound], 2w) for a request of K weight w; otherwise K is not
// bounded there. An endpoint holding nothing takes any prompt.
//
// # The worst case, with one view of the loads
//
// An endpoint that takes a request by affinity ends at most at:
//   - P, on the walk: max(ceil(c · (total + w) / n), Min, (1+Own)·w);
//   - P, at the home: that limit for w = its new tokens (NewTokens, all
//     of Tokens where 0, less a recurring group's shared part), plus its
//     slack, the tokens the home holds of it, Tokens - w (< Tokens): above
//     c · average by at most max(Min, (1+Own)·w) + Tokens, one request's
//     prompt twice over besides the floor;
//   - K: max(KVCapacityFactor · capacity, ceil(KVLoadFactor · (K total + w)
//     · capacity / the fleet's capacity)) where known; else, with KVAverage,
//     max(ceil(c · (K total + w) / n), KVMinBound, 2w): above c · average
//     by at most 2w + KVMinBound; and w on an idle endpoint, whatever its
//     capacity (a prompt above KVCapacityFactor · capacity still goes to an
//     engine that holds nothing).
//
// A fallback (no candidate within both bounds) goes to the least P-loaded
// endpoint and is bounded by neither (TestHomeSlackIsBounded checks the
// rest and counts fallbacks; TestWorstCasesHoldOverRandomLoads checks all
// of it over random fleets, capacities and requests); a request that excludes none ends there
// within floor(total/n) + w, as above. Gossip staleness adds to each the load the
// other replicas placed since their last publication that reached this
// one, less what the overlay view presumes they placed (as much as this
// replica did since its own last publication: gossip/DESIGN.md,
// "Mirrors").
//
// # Slow endpoints
//
// With [Config.Pace] (on by default) each replica times its endpoints'
// answers ([Lease.FirstToken] for streams, [Lease.WholeAnswer] for
// answers sent whole), and an endpoint at least [PaceConfig.Threshold] (3)
// times the fleet's lower median is slow by a factor f: P's bound and the
// fallback's choice of the least loaded read its P as f·(P + o) − o, o
// [PaceConfig.Overhead] (see pace.go). The worst cases above hold for that
// reading, so a slow endpoint's own P stays lower. An endpoint within the
// threshold is bounded as above.
//
// # Groups
//
// With [Config.GroupSpread], a request whose shared part (Request.Group:
// its system prompt, tools or shared preamble) is at least 1024 tokens and
// has a known share s of the traffic goes to a set of about
// GroupSpread·n·s endpoints (each is in with probability GroupSpread·s, by
// a rendezvous hash of the group; at least one), its own key choosing
// among them by rendezvous, and spills on along the group's order: a rare
// system prompt is computed on one engine instead of on every engine its
// requests reach, and a common one still spreads over all. A group whose
// share is not known (none heard yet, as in a cold start's first
// requests, or one rarer than every group the table lists) is rare: its
// set is its one endpoint of least u. A shorter shared part is placed by
// the key alone at every share, by a rendezvous hash over the fleet, so
// its conversations keep their engines when the share arrives. A 9th
// endpoint moves about 1/9 of grouped picks at every share, as it moves
// 1/9 of homes (ring/spread.go).
package ring
