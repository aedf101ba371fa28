package upstream

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/prefixring/prefixring/internal/redact"
)

// Endpoint is one inference server. Its ID is its canonical base URL
// ("http://10.0.0.7:8000"), so it is stable across restarts of the router
// and equal on every replica that discovers the same server, however each
// spelled it; the ring, gossip and metrics all key endpoints by it.
type Endpoint struct {
	ID   string
	URL  *url.URL
	Name string // what clients may see: an operator's label, or host:port
}

// labelPattern is what an operator label may look like: a DNS-label-like
// word, so it is safe in a header and a metric.
var labelPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ParseEndpoint checks one endpoint as an operator writes it: a server root
// URL, optionally behind a label ("gpu-a=http://10.0.0.7:8000"). A missing
// scheme means http. An OpenAI base URL ("http://host:8000/v1") is taken as
// its server root: the router appends the client's whole path
// (/v1/chat/completions), so a trailing /v1 would send every request to
// /v1/v1/... and fail; stripped reports that it was removed.
//
// The ID is canonical, so that spellings of one server are one endpoint
// (one share of routing and of the load bound, one worker in the workers
// API): scheme
// and host in lower case, the scheme's default port (80, 443) dropped, as
// most operators already write such URLs, any other port without leading
// zeros, an IPv4-mapped IPv6 address written as the IPv4 address, other IP
// addresses in net/netip's form, and no trailing slash. A port must be 1
// to 65535.
func ParseEndpoint(raw string) (ep Endpoint, stripped bool, err error) {
	s := strings.TrimSpace(raw)
	shown := redact.Userinfo(raw) // errors are logged: never quote a password
	label := ""
	if i := strings.Index(s, "="); i >= 0 && !strings.Contains(s[:i], "/") {
		label, s = s[:i], s[i+1:]
		if !labelPattern.MatchString(label) {
			return Endpoint{}, false, fmt.Errorf("endpoint %q: label %q: want letters, digits, '.', '_' or '-'", shown, label)
		}
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		// url.Error quotes the URL, and its cause may quote a piece of
		// the userinfo (a '/' in a password ends the host early).
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if shown != raw {
			err = errors.New("not a valid URL")
		}
		return Endpoint{}, false, fmt.Errorf("endpoint %q: %v", shown, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return Endpoint{}, false, fmt.Errorf("endpoint %q: scheme must be http or https", shown)
	case u.Host == "" || u.Hostname() == "":
		return Endpoint{}, false, fmt.Errorf("endpoint %q: no host", shown)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return Endpoint{}, false, fmt.Errorf("endpoint %q: only scheme, host, port and path are allowed", shown)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Host, err = canonicalHost(u); err != nil {
		if shown != raw {
			// An '@' past the host: Go read no userinfo, but a password
			// with a '/' in it ("user:8000/pw@host") may be the port.
			err = errors.New("not a valid host and port")
		}
		return Endpoint{}, false, fmt.Errorf("endpoint %q: %v", shown, err)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if p, ok := strings.CutSuffix(u.Path, "/v1"); ok {
		u.Path, stripped = p, true
	}
	u.RawPath, u.ForceQuery = "", false
	if label == "" {
		label = u.Host
	}
	return Endpoint{ID: u.String(), URL: u, Name: label}, stripped, nil
}

// canonicalHost is u's host and port as the ID writes them.
func canonicalHost(u *url.URL) (string, error) {
	host := strings.ToLower(u.Hostname())
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	port := u.Port()
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return "", fmt.Errorf("port %q is not 1 to 65535", port)
		}
		port = strconv.FormatUint(n, 10)
	}
	if port == "" || u.Scheme == "http" && port == "80" || u.Scheme == "https" && port == "443" {
		if strings.Contains(host, ":") {
			return "[" + host + "]", nil // IPv6
		}
		return host, nil
	}
	return net.JoinHostPort(host, port), nil
}
