package policy

import (
	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
)

// RingRequest is what the ring sees of a request the keyer keyed on
// route: its key and group, and token estimates at 4 bytes a token
// (bodyLen the body's bytes). The router (proxy) and the study (sim/eval)
// both build requests with it, so the study places requests as the router
// does. Blocks, which only some policies read, are the caller's.
func RingRequest(route prefix.Route, bodyLen int, key prefix.Key) ring.Request {
	req := ring.Request{Key: key.Hash, Keyed: key.Keyed, Group: key.Group, GroupShare: key.GroupShare,
		EarlyShare: key.EarlyShare, SharedTokens: int64(key.SharedChars / 4), Tokens: int64(bodyLen / 4), NewKnown: route == prefix.RouteChat}
	if key.NewBytes >= 0 {
		req.NewTokens = int64(key.NewBytes / 4)
	}
	return req
}
