// Package gossip replicates load and endpoint health between prefixring
// router replicas, so every replica's bounded-load check sees the
// cluster-wide load and all replicas pick the same endpoint for the same
// key. A replica's load on an endpoint is the sum of its leases' weights
// there (token-weighted when the balancer weighs leases by tokens), not a
// count of requests.
//
// This package is the memberlist shell. The pure core is package
// gossip/core: the entries each replica owns, the last-writer-wins table
// that merges them, the liveness rule, the view the bound reads
// (core.ClusterLoads: overlay, the default, shared, exact or aligned) and the tally
// of the endpoint-set votes. [Node] runs a hashicorp/memberlist member: a
// ticker publishes this replica's entry to every live member as a small UDP
// message each interval (a delta, without the endpoint list, when the full
// entry does not fit a packet); push/pull exchanges full state for
// anti-entropy; memberlist callbacks copy their input onto a bounded queue
// and never block. Other packages' replicated values ride along as a
// [Payload] ([Node.Carry]): the node carries their bytes in tagged sections
// of one envelope without understanding them (the registered-worker set,
// workers.Share; the shared-prefix sketch, prefix.Share). See DESIGN.md for
// the protocol, its message sizes and its cost.
package gossip
