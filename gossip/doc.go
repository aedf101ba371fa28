// Package gossip replicates in-flight load and endpoint health between
// prefixring router replicas, so every replica's bounded-load check sees the
// cluster-wide load and all replicas pick the same endpoint for the same key.
//
// The package has a pure core and a memberlist shell.
//
// The core ([State], [Entry], [Liveness], [Decide], the wire codec) does no
// I/O, starts no goroutines and reads no clock. The state is a CRDT of
// single-writer entries: each replica owns one [Entry] (its in-flight count
// and its health observation per endpoint), versioned by (incarnation,
// version); [State.Merge] keeps the newest version of each entry and returns
// only what changed. Whose counts count is decided by [Liveness]: not a
// tombstone, not declared dead by memberlist, and stamped within StaleAfter.
// [ClusterLoads] implements ring.Loads as this replica's last published
// counts ([ViewShared], the default: every replica reads the same numbers) or
// its exact live counters ([ViewExact]) plus an immutable sum of the others'
// counted entries, swapped in atomically, so the bound reads it with no lock
// and no allocation.
// [Decide] turns the voters' observations into one endpoint set and health
// verdict that every replica computes identically.
//
// The shell ([Node]) runs a hashicorp/memberlist member: a ticker publishes
// this replica's entry to every live member as a small UDP delta each
// interval; push/pull exchanges full state for anti-entropy; memberlist
// callbacks copy their input onto a bounded queue and never block. The
// registered-worker set ([Node.ShareWorkers]) and the shared-prefix sketch
// ([Node.ShareSketch]) ride on message kinds of their own. See DESIGN.md
// for the protocol, its message sizes and its cost.
package gossip
