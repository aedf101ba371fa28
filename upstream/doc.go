// Package upstream keeps the set of inference endpoints a replica routes to
// and their health: the endpoint list ([Endpoints], static or re-resolved
// from DNS by [DNSSource]), active and passive health checking
// ([Health]), and each engine's KV cache capacity in tokens ([KVConfig]:
// scraped from vLLM's or SGLang's metrics or llama.cpp's /props, or given
// by the operator), which every [Snapshot] carries to the ring.
package upstream
