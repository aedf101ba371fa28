// Package router is one prefixring replica as a unit: the endpoint set and
// its discovery, the bounded-load balancer, the affinity key and its
// shared-prefix sketch, the gossip node, the registered-worker set, the
// HTTP path, the admin routes, and the drain.
//
// [New] assembles a replica from a [Config] (what `prefixring serve`'s
// flags say; a test puts an in-memory memberlist transport in
// Config.Gossip.Transport) and [Options] (what a test or another host
// injects: the listeners, the transport to the endpoints, the DNS
// resolver, the registry, the logger, the random policies' seed, the
// reload signal); [Replica.Run] runs it until its context ends, then
// drains. The binary and the chaos harness run this same type,
// so the chaos suite tests the router that ships.
//
// The assembly order matters and is written once, in [New] and
// [Replica.Run]: the balancer first (everything reads its loads), then the
// endpoint set (which applies every change to the balancer on its own
// goroutine), the gossip node between them (the set reports this replica's
// observations to it and applies the cluster's verdict), then the policy
// and the HTTP path over them; at run time the sources feed the set, the
// set's first snapshot reaches the balancer, the node joins, and only then
// do the listeners accept.
package router
