// Package fleet is a discrete-event fleet simulator for routing-policy
// studies: N engines from package engine, driven by a virtual clock, behind
// a routing policy plugged in through the same one-method Picker the proxy
// uses, so CHWBL in a simulation is the production ring code.
//
// Run replays a workload of timed requests (LoadMooncake reads a Mooncake
// trace) and records, per request, the endpoint, decision, queueing delay,
// TTFT, end-to-end latency, cached tokens and prefill tokens computed. A
// request acquires a lease at its arrival and releases it when its last token
// is out, so the picker sees the in-flight load it would see in production;
// a streamed request's lease is told its TTFT at its first token
// (ring.Lease.FirstToken), as the proxy tells it at the first byte.
// Config.Slowdown makes chosen engines slower than the others.
//
// Nothing here reads the wall clock or starts a goroutine; a run is a pure
// function of its configuration and workload.
package fleet
