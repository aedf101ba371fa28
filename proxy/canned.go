package proxy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// net/http's server answers some malformed requests itself, before any
// handler runs, by writing a canned plain-text response straight to the
// connection (server.go, conn.serve): 431 for headers over MaxHeaderBytes,
// 501 for an unknown Transfer-Encoding, 505 for an unsupported HTTP
// version, 400 for bad header bytes, a missing or malformed Host header.
// cannedConn recognizes exactly those writes and turns them into the same
// status with an OpenAI-style JSON body, so every error a client sees has
// one shape.
//
// Recognition is strict: a write is rewritten only when no handler
// response is in progress on the connection, and it is exactly
// "HTTP/1.1 <code> <reason>[: <detail>]" + cannedHeaders + the canned body
// for that status, in one Write (net/http writes it with one fmt.Fprintf).
// TestCannedErrorFormatIsPinned sends each malformed request to a bare
// net/http server and fails if Go ever writes them differently; anything
// not recognized passes through untouched. Still plain text: 417 for an
// Expect other than 100-continue (written as an ordinary response, not
// canned, and with an empty body) and errors on the TLS or h2c layers,
// which the router does not serve.
const cannedHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// markResponses flags a connection's response as in progress from the
// moment its handler starts; trackIdle clears the flag once net/http has
// finished the response and waits for the next request.
func markResponses(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*cannedConn); ok {
			c.inResponse.Store(true)
			// The previous response's write deadline (deadlineWriter)
			// must not outlive it.
			_ = c.SetWriteDeadline(time.Time{})
			if c.ambiguous.Load() {
				w = &closing{ResponseWriter: w} // RFC 9112 §6.1; see framing.go
			}
		}
		h.ServeHTTP(w, r)
	})
}

// closing answers with Connection: close, set on the final answer's header
// as it is written rather than once up front: ReverseProxy clears the
// header map after passing on an upstream's 1xx, which took an early
// Connection: close with it.
type closing struct {
	http.ResponseWriter
	final bool // the final answer's head is written
}

func (c *closing) WriteHeader(code int) {
	if code >= 200 && !c.final {
		c.Header().Set("Connection", "close")
		c.final = true
	}
	c.ResponseWriter.WriteHeader(code)
}

// Write sets it too, for an answer with no WriteHeader.
func (c *closing) Write(p []byte) (int, error) {
	if !c.final {
		c.Header().Set("Connection", "close")
		c.final = true
	}
	return c.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the server's writer (Flush,
// deadlines, Hijack).
func (c *closing) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func trackIdle(c net.Conn, st http.ConnState) {
	if cc, ok := c.(*cannedConn); ok && st == http.StateIdle {
		cc.head.reset()
		cc.inResponse.Store(false)
	}
}

// parseCanned recognizes one of net/http's canned error responses.
func parseCanned(p []byte) (*apiError, bool) {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok {
		return nil, false
	}
	line, body, ok := bytes.Cut(rest, []byte(cannedHeaders))
	if !ok || len(line) < 4 || line[3] != ' ' {
		return nil, false
	}
	code, err := strconv.Atoi(string(line[:3]))
	reason := http.StatusText(code)
	if err != nil || reason == "" || !bytes.HasPrefix(line[4:], []byte(reason)) {
		return nil, false
	}
	detail := string(line[4+len(reason):])
	if detail != "" {
		d, ok := bytes.CutPrefix([]byte(detail), []byte(": "))
		if !ok || len(d) == 0 {
			return nil, false
		}
		detail = string(d)
	}
	want := string(line)
	if code == http.StatusNotImplemented && detail == "" {
		want = "Unsupported transfer encoding"
	}
	if string(body) != want {
		return nil, false
	}
	return cannedError(code, detail), true
}

func cannedError(code int, detail string) *apiError {
	msg, errCode := "Malformed request.", "invalid_request"
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		msg, errCode = "Request headers are larger than the router accepts.", "request_header_too_large"
	case http.StatusNotImplemented:
		msg, errCode = "Unsupported transfer encoding.", "unsupported_transfer_encoding"
	case http.StatusHTTPVersionNotSupported:
		msg, errCode = "Unsupported HTTP version; use HTTP/1.1.", "unsupported_http_version"
	default:
		if detail != "" {
			msg = "Malformed request: " + detail + "."
		}
	}
	return &apiError{code, msg, "invalid_request_error", errCode}
}

func cannedJSON(e *apiError) []byte {
	b := e.json()
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"+
		"X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n%s", e.status, http.StatusText(e.status), len(b), b)
}
