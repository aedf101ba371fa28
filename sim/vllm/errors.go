package vllm

import (
	"encoding/json"
	"net/http"
)

// apiError is an error as vLLM's OpenAI server returns it: the OpenAI
// envelope, with vLLM's exception class names as the type and the HTTP
// status as the code (vllm/entrypoints/openai/protocol.py ErrorResponse).
type apiError struct {
	Status  int
	Type    string
	Message string
	Param   string // the offending request field, when vLLM names one
}

func (e *apiError) Error() string { return e.Message }

func badRequest(msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: msg}
}

func notFound(msg string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "NotFoundError", Message: msg}
}

func internalError(msg string) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Type: "InternalServerError", Message: msg}
}

type errorBody struct {
	Error errorInfo `json:"error"`
}

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	info := errorInfo{Message: e.Message, Type: e.Type, Code: e.Status}
	if e.Param != "" {
		info.Param = &e.Param
	}
	_ = json.NewEncoder(w).Encode(errorBody{info})
}
