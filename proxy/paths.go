package proxy

import (
	"net/url"
	"strings"

	"github.com/prefixring/prefixring/prefix"
)

// cleanPath reports whether a request's path may be routed: checked before
// the route allowlist, so what the allowlist approves is exactly what the
// upstream receives. Refused (400):
//
//   - percent-encoded slashes (%2F) and backslashes (%5C), and literal
//     backslashes: an upstream or a proxy behind it may decode them into
//     separators the allowlist never saw;
//   - dot segments ("." and "..") and empty segments ("//") in the decoded
//     path, so "/v1/%2e%2e/admin" cannot walk out of /v1/;
//   - control characters and a path that does not start with "/".
//
// What passes is forwarded in its decoded form, re-encoded by net/url:
// "/v1/%63hat/completions" reaches the upstream as "/v1/chat/completions".
// A trailing slash is kept. No refused path has a legitimate use in the
// OpenAI API or the servers' own routes.
func cleanPath(u *url.URL) bool {
	p := u.Path
	if !strings.HasPrefix(p, "/") {
		return false
	}
	if raw := u.EscapedPath(); strings.ContainsAny(raw, "\\") || containsFold(raw, "%2f") || containsFold(raw, "%5c") {
		return false
	}
	for _, c := range []byte(p) {
		if c < 0x20 || c == 0x7f || c == '\\' {
			return false
		}
	}
	return cleanSegments(p)
}

// cleanSegments reports whether p, which starts with "/", has no dot
// segments and no empty ones (a trailing slash aside).
func cleanSegments(p string) bool {
	segs := strings.Split(strings.TrimSuffix(p[1:], "/"), "/")
	for _, s := range segs {
		if s == "." || s == ".." || (s == "" && len(segs) > 1) {
			return false
		}
	}
	return true
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), sub)
}

// nonV1Routes are the inference servers' routes outside /v1 that the
// router proxies too (vLLM's and SGLang's).
var nonV1Routes = map[string]bool{
	"/tokenize": true, "/detokenize": true, "/pooling": true, "/classify": true,
	"/score": true, "/rerank": true, "/v2/rerank": true, "/generate": true,
}

// routeOf is the allowlist: the OpenAI API under /v1/ and the servers'
// routes above. Call it on a path cleanPath accepted.
func routeOf(path string) (prefix.Route, bool) {
	if strings.HasPrefix(path, "/v1/") || nonV1Routes[path] {
		return prefix.RouteOf(path), true
	}
	return 0, false
}
