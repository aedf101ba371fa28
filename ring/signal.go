package ring

import (
	"fmt"
	"math"
)

// Signal is the unit of load: what one in-flight request adds to its
// endpoint's load, which the bound reads and gossip shares.
type Signal string

const (
	// SignalRequests: every request weighs 1 from the pick until it ends
	// (CHWBL's and HAProxy's unit).
	SignalRequests Signal = "requests"
	// SignalTokens: a request weighs its estimated prompt tokens
	// ([Request.Tokens]) until its prefill is over, which the router sees
	// as the first byte of the answer ([Lease.Settle]), and nothing after
	// that (what it holds until it ends is K, [Inflight.KV]). The load then
	// approximates the prefill work queued on an endpoint, which is what a
	// new request waits behind for its first token: a batching engine
	// decodes hundreds of requests at once, but prefills one budget of
	// tokens per step.
	SignalTokens Signal = "tokens"
)

// Signals lists the load signals, the default first.
var Signals = []Signal{SignalTokens, SignalRequests}

// ParseSignal checks s; the empty string is the default.
func ParseSignal(s string) (Signal, error) {
	switch v := Signal(s); v {
	case "":
		return Signals[0], nil
	case SignalRequests, SignalTokens:
		return v, nil
	}
	return "", fmt.Errorf("ring: load signal %q is not one of %q", s, Signals)
}

// quietTokens is the prefill an endpoint may hold and still measure its
// pace: P's default floor, below which P's bound never steers off a slow
// engine (above it, the bound's relative term does, by the prefill its
// slowness keeps queued).
const quietTokens = 16384

// quietLoad is the most P, in the signal's unit, that an endpoint may
// hold and still be quiet (see quietness): quietTokens of prefill, or one
// request in flight.
func (s Signal) quietLoad() int64 {
	if s == SignalRequests {
		return 1
	}
	return quietTokens
}

// weights returns what req weighs in a pick over n healthy endpoints of
// capTotal KV tokens together (0: not known for all), and in P once its
// prefill is over (Settle).
func (c Config) weights(req Request, n int, capTotal int64) (pw weights, settled int64) {
	req.GroupShare = c.share(req, n, capTotal)
	// What the request weighs in tokens, whatever the signal: Pace
	// compares its time to first token with it.
	tw := weights{p: max(req.Tokens, 1)}
	c.homeWeights(req, &tw)
	pw.tokens, pw.homeTokens = tw.p, tw.homeP
	pw.p, settled = 1, 1
	if c.Signal == SignalTokens {
		pw.p, settled = tw.p, 0
		pw.homeP, pw.homeSlack = tw.homeP, tw.homeSlack
	}
	pw.spread = c.spread(req, n, capTotal)
	// P's floor keeps a home what it holds where the router cannot
	// weigh that: a completion's turn, whose cached part it cannot tell,
	// and a group kept together, whose engine holds its shared part for
	// requests to come. A chat request placed by its key alone has
	// neither: its new tokens are known and the home's slack weighs its
	// history, so the floor would only let a burst of its key's cold
	// first turns pile onto one home (64 conversations at once:
	// docs/study.md, "The floor for chat placed by key"). Nor has a
	// later turn of a held group's chat: the group's shared part is
	// cached wherever the group went before, and the slack weighs the
	// rest of its history; with the floor, the demo's late turns queued
	// up to the floor's worth of prefill at their homes ("The floor for
	// later turns"). A held group's first turns keep it.
	pw.noFloor = c.Signal == SignalTokens && req.NewKnown && (pw.spread == 0 || pw.spread == byKey || laterTurn(req))
	pw.kv = max(req.Tokens, 1)
	if req.Group != 0 && req.SharedTokens > 0 && req.SharedTokens < req.Tokens {
		pw.kv, pw.kvShared = req.Tokens-req.SharedTokens, req.SharedTokens
	}
	return pw, settled
}

// share is the share of req's group that a pick over n healthy endpoints
// of capTotal KV tokens uses. An early share is used only for a group
// that is held on one endpoint while its share is unknown (a shared part
// of at least minGroupShared tokens), is too common for that endpoint
// (share·n ≥ c: it would overflow it, spill there, and then move when
// its share settles; agentic's four tool sets, a quarter of the requests
// each on 8 engines), and whose share spreads it over every endpoint
// even if its shared part were the whole prompt. Such a spread stays
// when the share settles, while a partial one, drawn from a share
// counted over few requests, would move keys then. The whole prompt
// stands in for the shared part in the memory cap because the router
// reads at most its key's window of a long one (SharedTokens): with the
// part as read, the small fleet's agentic tool sets took a copy on every
// engine and lost (docs/study.md, "Early shares"). Any other group is of
// unknown share until its share settles: a group placed by its keys is
// placed alike either way, and keeps the weights of one.
func (c Config) share(req Request, n int, capTotal int64) float64 {
	if !req.EarlyShare {
		return req.GroupShare
	}
	whole := req
	whole.SharedTokens = max(req.SharedTokens, req.Tokens)
	if req.SharedTokens < minGroupShared || req.GroupShare*float64(n) < c.LoadFactor || c.spread(whole, n, capTotal) < float64(n) {
		return 0
	}
	return req.GroupShare
}

// laterTurn reports whether req continues a conversation past its
// group's shared part: its new tokens are fewer than the tokens after
// that part, so its key's home holds some of its own history.
func laterTurn(req Request) bool {
	return req.NewTokens > 0 && req.NewTokens < req.Tokens-max(req.SharedTokens, 0)
}

// homeWeights sets what req weighs at its key's home under
// [SignalTokens]: its new tokens (the home holds the rest from the
// conversation's earlier turns, and the shared part of a group that
// recurs), and a slack of the tokens it would recompute anywhere else:
// leaving home costs that much prefill, so the home may run that much
// above the bound before a spill pays.
func (c Config) homeWeights(req Request, pw *weights) {
	n := req.NewTokens
	if n <= 0 {
		n = req.Tokens
	}
	if req.GroupShare > 0 && req.SharedTokens > 0 {
		// A group that recurs is cached at its home: its shared part is
		// not new there.
		n = min(n, req.Tokens-req.SharedTokens)
	}
	if n <= 0 || n >= req.Tokens {
		return
	}
	pw.homeP = n
	pw.homeSlack = req.Tokens - n
}

// bound is the bound a pick applies.
func (c Config) bound() Bound {
	b := Bound{LoadFactor: c.LoadFactor, Min: c.MinBound}
	if c.Signal == SignalTokens {
		b.Own = 1
	}
	return b
}

// spread is how many endpoints req's group spreads over (0: the key
// alone places it): see Config.GroupSpread. Not rounded: a fractional
// spread grows a group's set by degrees, so a ninth endpoint or a
// drifting share moves few keys (ring/spread.go).
//
// Only a group whose shared part is long (minGroupShared) is kept
// together. A short one (a 200-token system prompt) saves little prefill
// on the engines that hold it: a cold burst of its requests on one
// engine queued more than it saved, and a known group's set of a few
// engines, where it was kept before stop 31, made those engines busier
// than the key's own placement would and moved conversations when the
// share arrived (multi-turn on the H100 fleet at ×0.25: p99 22–24 ms
// against 19–21 placed by key, hit 0.731–0.737 against 0.742). One that
// is short beside its requests may be every request's (a trace whose
// requests all open with one 512-token block). A group that covers none
// of the request's text (a chat with neither system prompt nor tools, a
// completion whose shared prefix is not known) has nothing to keep
// together either. All of these are placed by their keys alone
// ([byKey]), whatever their share.
//
// A long group whose share is unknown is rare: the shares come from a
// table of the commonest groups, so one it does not list is rarer than
// those it does, or no table has been heard yet, as in a cold start's
// first burst. Its set is then its one endpoint of least u, where a known
// rare group's is too, and that engine computes its shared part once, for
// every request that the bound lets stay.
//
// With [Config.GroupMemory], capTotal the fleet's KV tokens (0: not known
// for every healthy endpoint), a known group's spread is at most the
// number of copies of its shared part that GroupMemory of its share of
// the fleet's memory holds. The cap does not depend on n where
// capacities are equal (GroupMemory·s·C/L, C = n·c), so a joining
// endpoint enters a set with the same chance whether or not it binds.
func (c Config) spread(req Request, n int, capTotal int64) float64 {
	if c.GroupSpread <= 0 || req.Group == 0 || n <= 1 {
		return 0
	}
	if req.SharedTokens < minGroupShared {
		return byKey
	}
	if !(req.GroupShare > 0) {
		return rareSpread
	}
	s := c.GroupSpread * float64(n) * req.GroupShare
	if c.GroupMemory > 0 && capTotal > 0 && req.SharedTokens > 0 {
		copies := c.GroupMemory * req.GroupShare * float64(capTotal) / float64(req.SharedTokens)
		s = min(s, max(copies, rareSpread))
	}
	return min(s, float64(n))
}

// byKey is the spread of a group placed by its requests' keys alone
// (a short shared part, or none): its set is every usable endpoint,
// ranked by the key's rendezvous hash as a long group's set is, not by
// the ring. Before stop 31 a short group went to a set once its share
// was known, and this ranking kept a conversation's engine when the
// share arrived whenever the set held it; on the ring the two
// placements had disagreed for all but 1/n of keys (docs/prefix-key.md,
// "At stop 27's tree"). Now a short group is placed this way at every
// share (TestShortGroupsStayWithTheirKeys).
var byKey = math.Inf(1)

// rareSpread is the spread of a group of unknown share: above 0, so the
// group's own order places it, and below any endpoint's u, so its set is
// the endpoint of least u alone.
const rareSpread = math.SmallestNonzeroFloat64

// minGroupShared is the shortest shared part, in estimated tokens, for
// which a group is kept together: on one endpoint while its share is
// unknown, on its set once it is known. A part that fills the key's whole
// window on it (prefix.DefaultMaxChars, 4096 characters). Chosen on the
// study's seeds for groups of unknown share (docs/study.md, "The first
// burst"): the demo's 1024-token system prompts and shared-prefix's
// 2048-token prompts gain from it. Shorter parts lost: the multi-turn
// workload's 200-token system prompts (64 conversations at once: p99
// TTFT up to 1.68x round-robin's kept together, 0.98x by key) and the
// Mooncake trace's 512-token first block, which every request shares
// (its first 300 requests: mean 1.10x round-robin's kept together,
// 0.68x by key). Agentic's 3700-token tool sets lost from being kept
// together too, each a quarter of the traffic: they spilled, and their
// loops moved when the shares arrived; placing every group by key
// cost the demo its first burst ("Tried again at stop 28's tree").
// Since stop 30 such a group takes an early share instead
// ([Config.share]). Since stop 31 it holds for known shares too
// (docs/study.md, "Short shared parts"): the multi-turn workloads'
// groups of known share had sets of a few engines.
const minGroupShared = 1024
