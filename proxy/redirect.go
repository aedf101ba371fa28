package proxy

import (
	"net/http"
	"net/url"
	"strings"
)

// rewriteLocations points an upstream's Location and Content-Location
// headers that name the endpoint itself at the router instead, as nginx's
// proxy_redirect does by default: "http://10.0.0.7:8000/base/v1/x" (and
// "/base/v1/x") become "/v1/x", a path a client resolves against the
// router's own address. Starlette, under vLLM and SGLang, answers a path
// with a trailing slash with a 307 to its own host:port; passed on, it
// showed clients the engine's address and sent those that follow it past
// the router. A Location elsewhere is left alone.
func rewriteLocations(h http.Header, endpoint *url.URL) {
	if endpoint == nil {
		return
	}
	for _, name := range []string{"Location", "Content-Location"} {
		if v := h.Get(name); v != "" {
			if p, ok := routerPath(v, endpoint); ok {
				h.Set(name, p)
			}
		}
	}
}

// routerPath maps a reference to the endpoint to the router's path for
// it; ok is false for a reference elsewhere (another host, another
// scheme).
func routerPath(ref string, endpoint *url.URL) (string, bool) {
	u, err := url.Parse(ref)
	if err != nil {
		return "", false
	}
	if u.Host != "" || u.Scheme != "" {
		if !strings.EqualFold(u.Scheme, endpoint.Scheme) || !sameHost(u, endpoint) {
			return "", false
		}
	} else if !strings.HasPrefix(u.Path, "/") {
		return "", false // relative to the request's path: already the router's
	}
	p := u.EscapedPath()
	if base := endpoint.EscapedPath(); base != "" {
		if rest, ok := strings.CutPrefix(p, base); ok && (rest == "" || rest[0] == '/') {
			p = rest
		}
	}
	if p == "" {
		p = "/"
	}
	u.Scheme, u.Host, u.User, u.Opaque = "", "", nil, ""
	return p + suffix(u), true
}

func suffix(u *url.URL) string {
	s := ""
	if u.RawQuery != "" || u.ForceQuery {
		s += "?" + u.RawQuery
	}
	if u.Fragment != "" {
		s += "#" + u.EscapedFragment()
	}
	return s
}

// sameHost compares host and port, a missing port being the scheme's.
func sameHost(a, b *url.URL) bool {
	return strings.EqualFold(a.Hostname(), b.Hostname()) && portOf(a) == portOf(b)
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}
