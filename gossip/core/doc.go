// Package core is the pure core of the gossip layer: it does no I/O, starts
// no goroutines and reads no clock (time is passed in).
//
// Each replica owns one [Entry] (its load and its health observation per
// endpoint), versioned by (incarnation, version). [EntryTable] holds the
// newest entry of every replica it heard of, in [lww.Map], the one
// last-writer-wins map every gossiped single-writer state uses (the
// shared-prefix sketch's records in package prefix too); merging returns
// only what changed. Whose entries count is decided by [Liveness]: not a
// tombstone, not declared dead by memberlist, and stamped within
// StaleAfter. [ClusterLoads] implements ring.Loads as this replica's view
// ([ViewMode]: overlay, the default, shared, exact or aligned) plus an immutable sum
// of the others' counted entries ([Remote]), swapped in atomically, so the
// bound reads it with no lock and no allocation. [Tally] turns the voters'
// entries into one endpoint set and health [Verdict] that every replica
// computes identically. The entries' codec (full entries, deltas, tables)
// is here too; package gossip wraps it in its envelope.
//
// Package coretest checks the merge laws of any such state.
package core
