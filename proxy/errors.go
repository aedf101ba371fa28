package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// apiError is an error shown to a client in OpenAI's shape.
type apiError struct {
	status  int
	message string
	kind    string // OpenAI's "type"
	code    string
}

func (e *apiError) Error() string { return e.message }

var (
	errNotFound          = &apiError{http.StatusNotFound, "Unknown route. prefixring serves the OpenAI API under /v1/.", "invalid_request_error", "not_found"}
	errBadPath           = &apiError{http.StatusBadRequest, "Invalid request path: dot segments, empty segments, encoded slashes and backslashes are not allowed.", "invalid_request_error", "invalid_path"}
	errTooLarge          = &apiError{http.StatusRequestEntityTooLarge, "Request body is larger than the router accepts.", "invalid_request_error", "request_too_large"}
	errBodyTimeout       = &apiError{http.StatusRequestTimeout, "The request body was not received in time.", "invalid_request_error", "request_timeout"}
	errReadBody          = &apiError{http.StatusBadRequest, "Could not read the request body.", "invalid_request_error", "invalid_body"}
	errNoHealthy         = &apiError{http.StatusServiceUnavailable, "No healthy inference endpoint is available. Retry later.", "service_unavailable", "no_healthy_endpoint"}
	errUpstream          = &apiError{http.StatusBadGateway, "The inference endpoints failed to answer. Retry later.", "upstream_error", "upstream_failed"}
	errUpstreamTimeout   = &apiError{http.StatusGatewayTimeout, "The inference endpoint did not answer in time.", "upstream_error", "upstream_timeout"}
	errStreamCut         = &apiError{http.StatusBadGateway, "The inference endpoint failed while streaming; the response is incomplete.", "upstream_error", "stream_interrupted"}
	errStreamIdleTimeout = &apiError{http.StatusGatewayTimeout, "The inference endpoint sent nothing for too long; the response is incomplete.", "upstream_error", "stream_idle_timeout"}
)

// errBodyBudget: the request's body would exceed the budget all buffered
// bodies share; clients retry (the OpenAI SDKs honour Retry-After on 503).
var errBodyBudget = &apiError{http.StatusServiceUnavailable, "The router holds too many request bodies right now. Retry later.",
	"service_unavailable", "body_buffer_full"}

// retryAfter is the Retry-After (seconds) sent with e, or "".
func (e *apiError) retryAfter() string {
	if e == errBodyBudget {
		return "1"
	}
	return ""
}

// errMethod is the answer to a method the route does not take. It sets the
// Allow header on w (RFC 9110 requires one on a 405) from the same list
// its message names, so the two cannot disagree; the caller writes it.
func errMethod(w http.ResponseWriter, allowed ...string) *apiError {
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	use := allowed[len(allowed)-1]
	if n := len(allowed); n > 1 {
		use = strings.Join(allowed[:n-1], ", ") + " or " + use
	}
	return &apiError{http.StatusMethodNotAllowed, "Method not allowed; use " + use + ".", "invalid_request_error", "method_not_allowed"}
}

// errEmptyBody answers an empty body on a route that expects a JSON object.
var errEmptyBody = errBadRequest("request body is empty; this route expects a JSON object")

func errBadRequest(msg string) *apiError {
	return &apiError{http.StatusBadRequest, msg, "invalid_request_error", "invalid_body"}
}

// json returns e as an OpenAI-style error body, newline-terminated.
func (e *apiError) json() []byte {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	}
	b, _ := json.Marshal(map[string]body{"error": {Message: e.message, Type: e.kind, Code: e.code}})
	return append(b, '\n')
}

// writeError writes e as an OpenAI-style JSON error body.
func writeError(w http.ResponseWriter, e *apiError) {
	b := e.json()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	if ra := e.retryAfter(); ra != "" {
		h.Set("Retry-After", ra)
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

// upstreamError is what a client sees of an upstream's error answer that
// is not JSON (an HTML page from a proxy in front of the server, uvicorn's
// plain-text "Internal Server Error"): the same status, in OpenAI's shape.
func upstreamError(status int) *apiError {
	kind := "upstream_error"
	if status < 500 {
		kind = "invalid_request_error"
	}
	return &apiError{status, fmt.Sprintf("The inference endpoint answered %d %s.", status, http.StatusText(status)), kind, "upstream_status"}
}

// normalizeError replaces the body of an upstream error response that is
// not JSON with an OpenAI-style error of the same status. JSON errors pass
// unchanged: vLLM, SGLang and llama.cpp already answer in OpenAI's shape,
// with the detail a client needs. The body replaced is drained (abandon
// is its try's).
func normalizeError(resp *http.Response, abandon context.CancelCauseFunc) {
	if resp.StatusCode < 400 || isJSON(resp.Header) {
		return
	}
	drain(resp.Body, abandon)
	b := upstreamError(resp.StatusCode).json()
	for _, h := range []string{"Content-Encoding", "Content-Language", "Etag", "Last-Modified", "Content-Disposition"} {
		resp.Header.Del(h)
	}
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	resp.ContentLength = int64(len(b))
	resp.TransferEncoding = nil
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
}

func isJSON(h http.Header) bool {
	mt := mediaType(h)
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}
