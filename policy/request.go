package policy

import (
	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
)

// RingRequest is what the ring sees of a request the keyer keyed on
// route: its key and group, and token estimates at 4 bytes a token
// (bodyLen the body's bytes). The router (proxy) and the study (sim/eval)
// both build requests with it, through BodyRequest, so the study places
// requests as the router does.
func RingRequest(route prefix.Route, bodyLen int, key prefix.Key) ring.Request {
	req := ring.Request{Key: key.Hash, Keyed: key.Keyed, Group: key.Group, GroupShare: key.GroupShare,
		EarlyShare: key.EarlyShare, SharedTokens: int64(key.SharedChars / 4), Tokens: int64(bodyLen / 4), NewKnown: route == prefix.RouteChat}
	if key.NewBytes >= 0 {
		req.NewTokens = int64(key.NewBytes / 4)
	}
	return req
}

// Blocker hashes a body's whole prompt into chained blocks
// (*prefix.Keyer and *prefix.Live implement it).
type Blocker interface {
	Blocks(route prefix.Route, body []byte, dst []uint64) ([]uint64, error)
}

// BodyRequest is RingRequest for a body the keyer keyed as key, as the
// router derives it: a keyed completion weighs at its home what h, the
// replica's History of its keys' last prompts, finds beyond the key's
// last prompt (nil: no History), and with blocks the request carries its
// prompt's Blocks for the policies that read them. The prompt is hashed
// once for both.
func BodyRequest(b Blocker, route prefix.Route, body []byte, key prefix.Key, h *prefix.History, blocks bool) ring.Request {
	history := h != nil && route == prefix.RouteCompletions && key.Keyed
	var bl []uint64
	if blocks || history {
		bl, _ = b.Blocks(route, body, nil)
	}
	if history {
		h.Continue(&key, bl, len(body))
	}
	req := RingRequest(route, len(body), key)
	if blocks {
		req.Blocks = bl
	}
	return req
}
