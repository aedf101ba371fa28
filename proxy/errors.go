package proxy

import (
	"encoding/json"
	"net/http"
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
	errNotFound  = &apiError{http.StatusNotFound, "Unknown route. prefixring serves the OpenAI API under /v1/.", "invalid_request_error", "not_found"}
	errTooLarge  = &apiError{http.StatusRequestEntityTooLarge, "Request body is larger than the router accepts.", "invalid_request_error", "request_too_large"}
	errNoHealthy = &apiError{http.StatusServiceUnavailable, "No healthy inference endpoint is available. Retry later.", "service_unavailable", "no_healthy_endpoint"}
	errUpstream  = &apiError{http.StatusBadGateway, "The inference endpoints failed to answer. Retry later.", "upstream_error", "upstream_failed"}
	errReadBody  = &apiError{http.StatusBadRequest, "Could not read the request body.", "invalid_request_error", "invalid_body"}
)

func errMethod(allowed string) *apiError {
	return &apiError{http.StatusMethodNotAllowed, "Method not allowed; use " + allowed + ".", "invalid_request_error", "method_not_allowed"}
}

func errBadRequest(msg string) *apiError {
	return &apiError{http.StatusBadRequest, msg, "invalid_request_error", "invalid_body"}
}

// writeError writes e as an OpenAI-style JSON error body.
func writeError(w http.ResponseWriter, e *apiError) {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]body{"error": {Message: e.message, Type: e.kind, Code: e.code}})
}
