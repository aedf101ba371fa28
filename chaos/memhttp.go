// Package chaos runs prefixring under faults: replica crashes and
// restarts, gossip partitions and lossy links, engines that die, flap,
// slow down, fail or hang, and replicas that disagree on the endpoint set,
// all under steady load, with the invariants that must survive them checked
// (see Invariants). The in-process form runs whole clusters (gossiping
// router replicas, simulated vLLM engines, clients) inside one
// testing/synctest bubble on in-memory networks: chaos/memnet for
// memberlist, internal/memhttp for HTTP.
package chaos

import "time"

// keepAlive is how long idle HTTP connections on the network live.
const keepAlive = 4 * time.Second
