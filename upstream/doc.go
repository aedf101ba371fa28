// Package upstream keeps the set of inference endpoints a replica routes to
// and their health: the endpoint list ([Endpoints], static or re-resolved
// from DNS by [DNSSource]), and active and passive health checking
// ([Health]).
package upstream
