package proxy

import (
	"crypto/sha256"
	"encoding/hex"
)

// endpointName is what X-Prefixring-Endpoint shows of endpoint id: the
// operator's label; for an endpoint without one, an opaque name, or its
// host:port when EndpointAddress is set. Targets names an unlabelled
// endpoint by its host:port, so a name equal to the URL's host is no label.
func (rt *Router) endpointName(id string) string {
	name := rt.targets.Name(id)
	if rt.cfg.EndpointAddress || name == "" {
		return name
	}
	if u := rt.targets.URL(id); u != nil && name != u.Host {
		return name
	}
	return opaqueName(id)
}

// opaqueName is "ep-" and the first 8 hex digits of the SHA-256 of id:
// stable across replicas and restarts, since the ID is the endpoint's
// canonical URL.
func opaqueName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "ep-" + hex.EncodeToString(sum[:4])
}
