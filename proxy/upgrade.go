package proxy

import (
	"errors"
	"net/http"
	"strings"
)

// Protocol upgrades. vLLM serves a websocket API (/v1/realtime), so a
// websocket upgrade passes through: httputil.ReverseProxy tunnels it, and
// ServeHTTP returns, releasing the lease, only when the tunnel closes.
// Any other upgrade a client asks for (h2c) is dropped before the request
// leaves, as a server may ignore Upgrade (RFC 9110 §7.8). An endpoint that
// switches protocols unasked, or to another protocol than asked, is
// refused with 502 and its connection closed (ReverseProxy leaves a 101
// it cannot tunnel open).

var errUnaskedUpgrade = errors.New("endpoint switched protocols unasked")

// upgradeOf is the protocol a request or response asks to switch to, or "".
func upgradeOf(h http.Header) string {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

// dropUpgrade removes an upgrade other than websocket from a client's
// request headers, with its Connection token.
func dropUpgrade(h http.Header) {
	p := upgradeOf(h)
	if p == "" || strings.EqualFold(p, "websocket") {
		return
	}
	h.Del("Upgrade")
	// The other headers Connection names stay named, so ReverseProxy
	// still removes them (HTTP2-Settings).
	var keep []string
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" && !strings.EqualFold(tok, "upgrade") {
				keep = append(keep, tok)
			}
		}
	}
	h.Del("Connection")
	if len(keep) > 0 {
		h.Set("Connection", strings.Join(keep, ", "))
	}
}

// checkUpgrade reports a 101 the router will not tunnel.
func checkUpgrade(resp *http.Response) error {
	asked := upgradeOf(resp.Request.Header)
	if asked == "" || !strings.EqualFold(asked, upgradeOf(resp.Header)) {
		return errUnaskedUpgrade
	}
	return nil
}
