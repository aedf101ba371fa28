// Package policy holds the routing policies prefixring can run, behind the
// one [Picker] interface that the proxy and the fleet simulator both use;
// [Names] lists the twelve [New] builds, by the names serve --policy and
// eval --policies take:
//
//   - chwbl (the default): prefixring's own, the ring.Balancer's bounded
//     walk over the gossiped cluster-wide loads when gossip is on;
//   - chwbl-local: the same walk bounded by this replica's own counts only,
//     as HAProxy or KubeAI run CHWBL behind several replicas;
//   - chash: the key's home whatever the load, placed as the vLLM
//     router's consistent_hash places, but on prefixring's prompt key,
//     which that router does not compute ([CHash]);
//   - dualmap: the less loaded of the key's two hash homes ([DualMap]);
//   - prefix-key: the home of the shared part's key (system prompt and
//     tools) whatever the load ([PrefixKey]);
//   - session: the home of the session header's value, unbounded; without
//     the header, least-load ([Session]);
//   - radix: an approximate radix tree per replica of the prompts it sent,
//     with the SGLang Model Gateway's cache_aware thresholds ([Radix]);
//   - score: α·estimated overlap − β·queue over what this replica sent
//     ([Score]);
//   - the load-only baselines, which ignore the key: round-robin (a plain
//     load balancer), random (a Kubernetes Service), least-load (join the
//     shortest queue) and p2c (power of two choices).
//
// Every policy reads the same endpoint set, health and loads as chwbl
// ([Endpoints], implemented by *ring.Balancer), and counts its requests in
// the same counters, so metrics, /debug/ring and gossip see every policy
// alike, and an A/B through the same replicas compares routing alone.
// radix and score compare in-flight request counts whatever the balancer's
// signal, since their thresholds are per request.
package policy
