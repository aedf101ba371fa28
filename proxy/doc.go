// Package proxy is the HTTP path of a prefixring replica: it reads a
// request's body once, derives its affinity key, leases an endpoint from a
// [Picker], and forwards the request through net/http/httputil.ReverseProxy,
// retrying on the key's next candidate when an upstream fails before it
// answers. Server-sent event streams pass through and are flushed per event.
//
// Around that path the package keeps the Prometheus metrics of the request
// path and the router's own routes (/metrics, /healthz, /readyz,
// /debug/ring). The endpoint set and its health live in package upstream;
// the router reaches them through [Targets] and [Observer].
//
// Clients see OpenAI-style errors ({"error":{"message","type","code"}}):
// 400 for a body the key cannot be read from, 404 for an unknown route, 405
// for a wrong method, 413 for a body over the limit, 503 when no endpoint is
// healthy, 502 when upstreams failed on every try. No internal detail leaks.
package proxy
