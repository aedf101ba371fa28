package proxy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prefixring/prefixring/prefix"
)

// Config configures the request path.
type Config struct {
	// MaxBodyBytes bounds a request body; larger bodies get 413. Default
	// 32 MiB: a 128K-token prompt is about 0.5 MiB of text, so this leaves
	// room for token-id prompts, images as data URLs and long tool lists.
	// The body buffer grows as bytes arrive, never to the length a client
	// declares before sending it.
	MaxBodyBytes int64
	// ClientBodyTimeout is the longest the router waits for the next bytes
	// of a request body (an inactivity timeout, as nginx's
	// client_body_timeout); a client that stalls longer gets 408. Default
	// 30s.
	ClientBodyTimeout time.Duration
	// MaxBufferedBodyBytes is the budget for request bodies held in memory
	// by all requests together: those arriving and those being forwarded
	// (a body stays buffered until its request ends, for retries). A
	// request whose body would exceed it gets 503 with Retry-After (as
	// Envoy's overload manager answers 503 when it stops accepting
	// requests; not 429, which blames the client). Default 1 GiB: 2,048
	// maximal 128K-token prompts (0.5 MiB each) at once, far more of the
	// usual few-KiB ones than --max-connections lets in, while the
	// worst case without it is MaxConnections × MaxBodyBytes (256 GiB
	// from the defaults). Short answers read whole before they are passed
	// on (up to 1 MiB each, so a cut one can be retried) take their bytes
	// from it too; when it has none left, they stream as they come. It
	// must cover one body of MaxBodyBytes at its
	// peak, 1.5 to 3 times MaxBodyBytes and at least 64 KiB (Validate
	// says how much): the buffer grows by doubling, and holds its old and
	// its new capacity while it grows.
	MaxBufferedBodyBytes int64
	// ClientBodyDeadline bounds the whole read of a request body, beside
	// ClientBodyTimeout's bound on each wait: a client trickling a byte
	// just inside the inactivity timeout holds its buffer no longer than
	// this (as HAProxy's timeout http-request bounds a buffered request as
	// a whole). Over it: 408. Default 60s: a maximal 32 MiB body needs
	// 4.5 Mbit/s; an LLM prompt of a few KiB needs nothing a client would
	// notice.
	ClientBodyDeadline time.Duration
	// MaxRetries is how many other endpoints a request may try after the
	// first fails (connection error, timeout, 502/503/504) before any byte
	// reached the client. An answer of declared length up to 1 MiB, not an
	// event stream, is read whole before any of it is passed on, so one
	// cut in its body is such a failure too. Default 2.
	MaxRetries int
	// RetryTimeout is the retry budget, counted from the first try: once it
	// has passed, no new try starts and the last failure is answered.
	// Connection errors and gateway errors come within milliseconds; a
	// failure after seconds means the endpoint already spent GPU time on
	// the request, and replaying it costs that again (the client's own
	// retry policy decides then). Default 10s; 0 turns retries off.
	RetryTimeout time.Duration
	// UpstreamTimeout bounds the wait for an upstream's response headers
	// after the request was sent; past it the client gets 504 and the
	// endpoint a failure. Inference servers send the headers of a
	// non-streamed completion only when the whole completion is done, and
	// queue requests for minutes under load, so the default is 10 minutes,
	// the default timeout of OpenAI's own clients.
	UpstreamTimeout time.Duration
	// StreamIdleTimeout ends a response whose upstream sent nothing for
	// this long after its headers (Envoy's stream_idle_timeout, and its
	// default: 5 minutes). An event stream ends with an OpenAI-style error
	// event (stream_idle_timeout), a short answer read whole (see
	// Config.MaxRetries) fails its try (retried, else 504), any other
	// body is cut; the upstream
	// connection is closed and the endpoint charged a failure. Time spent
	// waiting on a slow client does not count. 5 minutes is half the
	// 10-minute read timeout of OpenAI's own clients, so the router ends a
	// stalled stream with an error the client can read before the client
	// gives up on its own with an opaque one; a request queued on an engine
	// that sent its headers early waits that long for its first token.
	StreamIdleTimeout time.Duration
	// ClientWriteTimeout is the longest one write of a response to the
	// client may wait (nginx's send_timeout, and its default: 60s): a client
	// that stops reading, with its socket buffers full, is disconnected and
	// the upstream connection behind it released.
	ClientWriteTimeout time.Duration
	// Blocks makes the router hash the whole prompt of every keyed request
	// into chained blocks (ring.Request.Blocks), for the policies that
	// match prompts against a tree (radix, score). Default false.
	Blocks bool
	// CompletionHistory is how many keys the router remembers the last
	// completion prompt of (prefix.History), to weigh a completion at its
	// home by what its key's last prompt did not cover, as a chat turn is
	// weighed by its text after the last assistant message. Default
	// 65536 (a few MiB); 0 turns it off, and a completion weighs its whole
	// prompt there.
	CompletionHistory int
	// SessionHeader, when present on a request, keys it by its value
	// instead of its prompt (session affinity). Default X-Session-ID; empty
	// turns it off.
	SessionHeader string
	// RoutingHeaders adds X-Prefixring-Endpoint (an operator's label or an
	// opaque name; see EndpointAddress) and
	// X-Prefixring-Decision (home, spill, fallback) to responses. Default
	// true.
	RoutingHeaders bool
	// EndpointAddress makes X-Prefixring-Endpoint show an unlabelled
	// endpoint's host:port. Default false: clients see the operator's label
	// (gpu-a=http://...), else an opaque name, "ep-" and 8 hex digits of
	// the SHA-256 of the endpoint's ID, the same on every replica. The
	// opaque name keeps the address out of sight, not secret: a client
	// could hash guessed addresses; label endpoints where that matters.
	EndpointAddress bool
	// DialTimeout bounds connecting to an upstream. Default 2s.
	DialTimeout time.Duration
	// MaxIdleConnsPerHost is the keep-alive pool per upstream. Default 512.
	MaxIdleConnsPerHost int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		MaxBodyBytes:         32 << 20,
		ClientBodyTimeout:    30 * time.Second,
		MaxBufferedBodyBytes: 1 << 30,
		ClientBodyDeadline:   60 * time.Second,
		MaxRetries:           2,
		CompletionHistory:    prefix.DefaultHistoryKeys,
		RetryTimeout:         10 * time.Second,
		UpstreamTimeout:      10 * time.Minute,
		StreamIdleTimeout:    5 * time.Minute,
		ClientWriteTimeout:   60 * time.Second,
		SessionHeader:        "X-Session-ID",
		RoutingHeaders:       true,
		DialTimeout:          2 * time.Second,
		MaxIdleConnsPerHost:  512,
	}
}

// Validate reports a configuration the router cannot run with.
func (c Config) Validate() error {
	var errs []error
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s %v must be > 0", name, d))
		}
	}
	if c.MaxBodyBytes < 1 {
		errs = append(errs, fmt.Errorf("max body bytes %d must be >= 1", c.MaxBodyBytes))
	}
	if c.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("max retries %d must be >= 0", c.MaxRetries))
	}
	if c.CompletionHistory < 0 {
		errs = append(errs, fmt.Errorf("completion history %d must be >= 0", c.CompletionHistory))
	}
	if c.RetryTimeout < 0 {
		errs = append(errs, fmt.Errorf("retry timeout %v must be >= 0", c.RetryTimeout))
	}
	positive("client body timeout", c.ClientBodyTimeout)
	positive("client body deadline", c.ClientBodyDeadline)
	if peak := peakBodyBytes(max(c.MaxBodyBytes, 1)); c.MaxBufferedBodyBytes < peak {
		// Less, and an idle router would answer 503 to the largest bodies
		// it accepts, forever (see peakBodyBytes).
		errs = append(errs, fmt.Errorf("max buffered body bytes %d must be >= %d: reading one body of max body bytes %d holds that much at its peak (its buffer doubles as it arrives, the old and the new one held while the bytes are copied)",
			c.MaxBufferedBodyBytes, peak, c.MaxBodyBytes))
	}
	positive("upstream timeout", c.UpstreamTimeout)
	positive("stream idle timeout", c.StreamIdleTimeout)
	positive("client write timeout", c.ClientWriteTimeout)
	positive("dial timeout", c.DialTimeout)
	if c.MaxIdleConnsPerHost < 1 {
		errs = append(errs, fmt.Errorf("max idle conns per host %d must be >= 1", c.MaxIdleConnsPerHost))
	}
	if !validHeaderName(c.SessionHeader) {
		errs = append(errs, fmt.Errorf("session header %q is not a header name", c.SessionHeader))
	}
	return errors.Join(errs...)
}

// validHeaderName reports whether s is empty (off) or an HTTP token: the
// characters RFC 9110 allows in a field name.
func validHeaderName(s string) bool {
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}
