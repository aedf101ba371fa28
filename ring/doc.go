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
// An endpoint may take a request if, with it, it holds at most
// ceil(c · (total + 1) / n) requests (CHWBL's bound, and HAProxy's
// "served < slots"), where c is [Config.LoadFactor], total the in-flight
// load of all endpoints and n the number of healthy endpoints; with
// [Config.MinBound] = K, at most max(K, that). The walk takes the first
// candidate that passes; if none does, the least loaded usable endpoint.
// Since c >= 1, some endpoint always passes when the loads cover the healthy
// set, so a sequence of picks over one view of the loads never exceeds the
// bound (TestSequentialPicksNeverExceedTheBound). Replicas that learn each
// other's placements late can: see gossip/DESIGN.md.
package ring
