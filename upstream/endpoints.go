package upstream

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Endpoints is the set of upstream inference servers, by ID. An endpoint's
// ID is its canonical base URL ("http://10.0.0.7:8000"), so it is stable
// across restarts of the router and equal on every replica that discovers
// the same servers.
type Endpoints struct {
	mu        sync.Mutex // serializes Set
	urls      atomic.Pointer[map[string]*url.URL]
	listeners []func(ids []string)
}

// NewEndpoints returns an empty set. Each listener is called, in order, with
// the sorted IDs every time the set changes.
func NewEndpoints(listeners ...func(ids []string)) *Endpoints {
	e := &Endpoints{listeners: listeners}
	m := map[string]*url.URL{}
	e.urls.Store(&m)
	return e
}

// ParseEndpoint checks raw and returns its URL and ID. A missing scheme
// means http.
func ParseEndpoint(raw string) (*url.URL, string, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("endpoint %q: %v", raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, "", fmt.Errorf("endpoint %q: scheme must be http or https", raw)
	case u.Host == "" || u.Hostname() == "":
		return nil, "", fmt.Errorf("endpoint %q: no host", raw)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, "", fmt.Errorf("endpoint %q: only scheme, host, port and path are allowed", raw)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	u.Host = strings.ToLower(u.Host)
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, u.String(), nil
}

// Set replaces the set with the endpoints raw. It changes nothing and
// returns an error if any of them does not parse.
func (e *Endpoints) Set(raw []string) error {
	m := make(map[string]*url.URL, len(raw))
	for _, r := range raw {
		u, id, err := ParseEndpoint(r)
		if err != nil {
			return err
		}
		m[id] = u
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := *e.urls.Load()
	if len(old) == len(m) {
		same := true
		for id := range m {
			if old[id] == nil {
				same = false
				break
			}
		}
		if same {
			return nil
		}
	}
	e.urls.Store(&m)
	ids := e.IDs()
	for _, l := range e.listeners {
		l(ids)
	}
	return nil
}

// URL returns the base URL of endpoint id, or nil.
func (e *Endpoints) URL(id string) *url.URL { return (*e.urls.Load())[id] }

// Name returns the name clients may see of endpoint id: its host:port, or
// "" when id is not in the set.
func (e *Endpoints) Name(id string) string {
	if u := e.URL(id); u != nil {
		return u.Host
	}
	return ""
}

// IDs returns the sorted endpoint IDs.
func (e *Endpoints) IDs() []string {
	m := *e.urls.Load()
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
