// Package upstream keeps the set of inference endpoints a replica routes to
// and their health, with one owner of that state: [Set].
//
// Sources each hand the set their own list through [Set.SetSource] (the
// [Sink] they write to): the static --endpoints, [DNSSource] (A/AAAA
// records of a headless Service, or SRV records, re-resolved by
// [DNSSource.Watch]), [FileSource] (an endpoints file, re-read on a tick or
// at once on a signal) and the registered workers. The routed set is their
// union by endpoint ID, each entry parsed by [ParseEndpoint] (a URL,
// host:port or label=url) into its canonical ID, so spellings of one
// server are one endpoint.
//
// Health ([HealthConfig]): active probes of each endpoint's /health, and
// passive observations of the requests ([Set.ObserveSuccess],
// [Set.ObserveFailure], [Set.ObserveServerError]). FailureThreshold
// consecutive failures of either, counted apart, eject an endpoint. One out
// by its probes returns at its first passing probe; one ejected by failed
// requests stays out for a time that grows with repeated ejections, and
// only MaxEjectionPercent of the endpoints may be out that way at once.
// Below PanicThreshold healthy, every endpoint is routed. A 5xx that a second endpoint repeats
// for the same request is the request's fault and counts against neither.
// With gossip, an [Arbiter] turns this replica's observations into the
// cluster's verdict, handed back through [Set.ApplyVerdict].
//
// Every change builds an immutable [Snapshot], swapped in atomically and
// handed to subscribers in order on one goroutine ([Set.Run]). An endpoint
// that leaves the set finishes the tries it holds ([Set.Hold]); only one
// that stops answering its probes at all has them abandoned.
//
// Each engine's KV cache capacity in tokens ([KVConfig]: scraped on a slow
// tick from vLLM's vllm:cache_config_info or SGLang's
// sglang:max_total_num_tokens, or llama.cpp's /props, or given by the
// operator) rides in every [Snapshot] to the ring's bound on K.
package upstream
