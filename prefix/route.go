package prefix

import "strings"

// Route says which OpenAI-compatible endpoint a request targets, and so
// where in the body its prompt lives.
type Route int

const (
	// RouteOther is any path the keyer does not know. Key still looks for a
	// messages, prompt or input field, but never rejects the body.
	RouteOther Route = iota
	// RouteCompletions is POST /v1/completions: the prompt is "prompt".
	RouteCompletions
	// RouteChat is POST /v1/chat/completions: the prompt is rendered from
	// "messages" and "tools".
	RouteChat
	// RouteEmbeddings is POST /v1/embeddings: the prompt is "input".
	RouteEmbeddings
)

// RouteOf maps a URL path (without query) to its Route. A trailing slash is
// tolerated because some clients add one and upstreams accept it.
func RouteOf(path string) Route {
	switch strings.TrimSuffix(path, "/") {
	case "/v1/completions":
		return RouteCompletions
	case "/v1/chat/completions":
		return RouteChat
	case "/v1/embeddings":
		return RouteEmbeddings
	}
	return RouteOther
}

// String returns a short, stable name for metrics labels and logs.
func (r Route) String() string {
	switch r {
	case RouteCompletions:
		return "completions"
	case RouteChat:
		return "chat"
	case RouteEmbeddings:
		return "embeddings"
	}
	return "other"
}

// tag is the byte that separates the key spaces of the three prompt kinds: the
// same text sent as a completion prompt and as a chat message renders to
// different tokens (the chat template wraps it), so it must not share a key.
func (r Route) tag() byte {
	switch r {
	case RouteCompletions:
		return 'c'
	case RouteChat:
		return 'h'
	case RouteEmbeddings:
		return 'e'
	}
	return 'o'
}
