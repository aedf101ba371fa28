// Package proxy is the HTTP path of a prefixring replica: it reads a
// request's body once, derives its affinity key ([Keyer]), leases an
// endpoint from a [policy.Picker], and forwards the request through net/http/httputil.ReverseProxy
// over one shared net/http Transport ([NewTransport]). Server-sent event
// streams pass through and are flushed per event.
//
// The upstream side:
//   - A try that fails before anything reached the client (connection
//     error, timeout, 502, 503, 504) is retried on the key's next candidate,
//     never an endpoint already tried, at most [Config].MaxRetries times and
//     never after [Config].RetryTimeout has passed since the first try.
//     A 500 is passed on: it is the server's answer to this request.
//     An answer of declared length up to 1 MiB (not an event stream) is
//     read whole first, so a body cut or stalled midway fails its try
//     too; a longer or chunked one streams, and a cut aborts it.
//   - Every connection error, timeout and 5xx is reported to the [Observer]
//     (passive ejection, as Envoy's outlier detection counts consecutive
//     5xx); a reused keep-alive connection the server had closed is resent
//     by the Transport on a fresh one and counts for nothing.
//   - [Config].UpstreamTimeout bounds the wait for response headers (504).
//   - A stream the upstream cuts, or leaves silent for
//     [Config].StreamIdleTimeout, ends with an OpenAI-style error event
//     (prefixring_stream_errors_total).
//   - A Location naming the endpoint itself is rewritten to the router's
//     path (nginx's proxy_redirect default). Websocket upgrades are
//     tunnelled with their lease held until they close; an unasked 101 is
//     refused (502) and its connection closed.
//   - X-Prefixring-Endpoint shows an operator's label or an opaque name,
//     never an address unless [Config].EndpointAddress is set.
//   - Expect is never forwarded: the router has the whole body, and
//     net/http's server answers the client's 100 Continue when the router
//     reads it.
//
// The client side ([Server], [Public]): a per-read body timeout and a total
// body deadline (408), a budget for all buffered bodies (503 with
// Retry-After), a write timeout for clients that stop reading, an
// idle keep-alive timeout, Connection: close after a request with both
// Content-Length and Transfer-Encoding, a cap on connections, a body buffer that grows
// with what arrives (pooled, returned only when the handler and every
// reader the Transport was given are done), paths with dot segments or
// encoded separators refused before the route allowlist, and the errors
// net/http writes itself (400, 431, 501, 505) rewritten to OpenAI's shape.
//
// Operators get [Admin]: /metrics, /debug/ring, /debug/pprof/ on request,
// and the routes in [Ops].Extra, on their own listener; the public one
// serves the API, /healthz and /readyz only. The endpoint set and its
// health live in package upstream; the router reaches them through
// [Targets] and [Observer].
//
// Clients see OpenAI-style errors ({"error":{"message","type","param",
// "code"}}): 400 for a body the key cannot be read from or a refused path,
// 404 for an unknown route, 405 for a wrong method, 408 for a stalled body,
// 413 for a body over the limit, 503 when no endpoint is healthy (or every
// pick had just left the set, so no try was sent), 502 when upstreams
// failed on every try, 504 when one did not answer in time, and
// an upstream's own error status in the same shape when its body was not
// JSON. No internal detail leaks.
package proxy
