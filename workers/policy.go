package workers

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/prefixring/prefixring/internal/redact"
)

// ErrInvalidURL is the error of a worker URL the policy refuses.
var ErrInvalidURL = errors.New("invalid worker url")

// ErrTooManyWorkers is the error of an add that would take the set past
// its cap.
var ErrTooManyWorkers = errors.New("too many workers")

const (
	// DefaultMaxURLBytes bounds a worker URL: room for any DNS name (253
	// bytes), a port and a path prefix, and small enough that one op
	// (URL, stamp, origin) fits a single UDP gossip packet (about 1,400
	// bytes) with room to spare. The gossip decoder refuses strings past
	// 4,096 bytes; a 5,019-byte URL once made every message of its
	// replica undecodable.
	DefaultMaxURLBytes = 512
	// DefaultMaxWorkers bounds the registered workers: far above any
	// fleet one router fronts (dstack reads at most 8,192 from GET
	// /workers; its services run a handful of replicas), and small enough
	// that the whole set, republished on every push/pull, stays under
	// 256 × (512 + ~80) bytes, about 150 KB, in the worst case.
	DefaultMaxWorkers = 256

	maxURLBytesLimit = 1024       // one op in one UDP packet
	maxWorkersLimit  = maxOps / 4 // the ops held (live and removed) stay decodable
	maxOrigin        = 255        // a replica's name (memberlist node name)
)

// Policy is what a worker URL must be, and how many workers the set
// holds. The same policy on every replica keeps the set's merge a
// deterministic filter: an op one replica refuses, every replica refuses.
// Replicas are not made to agree on it (a rolling change of the flags
// passes through a mixed fleet): each judges its peers' ops by its own
// policy, so a stricter replica holds, and routes, fewer workers
// (TestMergeAppliesThisReplicasPolicy), and the cluster's endpoint verdict
// cannot put back one it refused (upstream.Set routes no endpoint that
// only the verdict names).
type Policy struct {
	// MaxURLBytes bounds a URL's length (DefaultMaxURLBytes).
	MaxURLBytes int
	// MaxWorkers bounds the registered workers (DefaultMaxWorkers).
	MaxWorkers int
	// AllowCIDRs, when not empty, is the only address space workers may
	// be in. It judges addresses, so with it a URL must name an IP
	// literal: a host name's address can change after the check (DNS
	// rebinding), and resolving here would put I/O in the merge.
	AllowCIDRs []netip.Prefix
	// AllowLinkLocal lets a worker be at a link-local address
	// (169.254.0.0/16, fe80::/10, where the clouds' metadata services
	// live), a known metadata address, the unspecified address (0.0.0.0,
	// ::), broadcast or multicast. Off by default: a worker there is
	// more likely an attempt to reach the host's credentials than an
	// inference server.
	AllowLinkLocal bool
}

// DefaultPolicy is the policy of a set that was given none.
func DefaultPolicy() Policy {
	return Policy{MaxURLBytes: DefaultMaxURLBytes, MaxWorkers: DefaultMaxWorkers}
}

// Validate reports a policy that cannot work.
func (p Policy) Validate() error {
	switch {
	case p.MaxURLBytes < 64 || p.MaxURLBytes > maxURLBytesLimit:
		return fmt.Errorf("worker URL cap %d bytes: want 64 to %d", p.MaxURLBytes, maxURLBytesLimit)
	case p.MaxWorkers < 1 || p.MaxWorkers > maxWorkersLimit:
		return fmt.Errorf("max workers %d: want 1 to %d", p.MaxWorkers, maxWorkersLimit)
	}
	for _, c := range p.AllowCIDRs {
		if !c.IsValid() {
			return fmt.Errorf("worker allowlist: invalid prefix %v", c)
		}
	}
	return nil
}

// maxHeld bounds the ops held, removals included: past it the oldest
// removal is forgotten early.
func (p Policy) maxHeld() int { return 4 * p.MaxWorkers }

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidURL}, a...)...)
}

// CheckURL reports why u cannot be a worker, nil if it can: an http or
// https URL of printable ASCII, at most MaxURLBytes long, with a host, an
// optional port and path, and nothing else (no user info, query,
// fragment or '='), whose host is an address the policy allows or, with
// no allowlist, a DNS name. Its errors quote u with any userinfo hidden,
// as endpoint errors do: they are answered to callers and logged.
func (p Policy) CheckURL(u string) error {
	shown := redact.Userinfo(u)
	if u == "" {
		return invalid("the url is empty")
	}
	if len(u) > p.MaxURLBytes {
		return invalid("the url is %d bytes; at most %d", len(u), p.MaxURLBytes)
	}
	for i := 0; i < len(u); i++ {
		if c := u[i]; c <= ' ' || c >= 0x7f || strings.IndexByte("\"<>\\^`{|}", c) >= 0 {
			return invalid("byte %d of the url (%q) is not allowed: use printable ASCII, percent-encoded where needed", i, c)
		}
	}
	if strings.ContainsAny(u, "?#=") {
		return invalid("%q: only scheme, host, port and path are allowed (no query, fragment or '=')", shown)
	}
	pu, err := url.Parse(u)
	switch {
	case err != nil:
		// url.Error quotes the URL, and its cause may quote a piece of
		// the userinfo (a '/' in a password ends the host early).
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if shown != u {
			err = errors.New("not a valid URL")
		}
		return invalid("%q: %v", shown, err)
	case !strings.EqualFold(pu.Scheme, "http") && !strings.EqualFold(pu.Scheme, "https"):
		return invalid("%q: the scheme must be http or https", shown)
	case pu.Opaque != "" || pu.User != nil:
		return invalid("%q: no user info is allowed", shown)
	case pu.Hostname() == "":
		return invalid("%q: no host", shown)
	}
	// Past here the parser found no userinfo, but shown is still quoted:
	// parsers split an authority differently ("http://user:8000/pw@host"
	// is host user:8000 to Go, a password cut at its '/'), and an '@' in
	// a path costs only a vaguer error.
	if port := pu.Port(); port != "" || strings.HasSuffix(pu.Host, ":") {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			if shown != u {
				port = "***" // maybe a piece of the password, as above
			}
			return invalid("%q: port %q is not 1 to 65535", shown, port)
		}
	}
	return p.checkHost(shown, pu.Hostname())
}

// metadata are cloud metadata addresses outside the link-local ranges.
var metadata = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
	netip.MustParseAddr("fd20:ce::254"),    // Google Cloud's metadata server over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("168.63.129.16"),   // Azure's wire server
	netip.MustParseAddr("255.255.255.255"), // broadcast
}

// metadataNames are the names the clouds give their metadata services
// (Google's short and long names, EC2's instance-data in every region's
// internal domain). A worker URL is checked as written, not resolved (the
// merge does no I/O), so any other name that resolves to a refused
// address still passes: --workers-allow-cidr, which takes IP literals
// only, is the strict boundary (docs/security.md).
func metadataName(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	switch {
	case h == "metadata", h == "metadata.google.internal", h == "metadata.goog", h == "instance-data":
		return true
	case strings.HasPrefix(h, "instance-data.") && strings.HasSuffix(h, ".internal"):
		return true
	}
	return false
}

// embeddedV4 lists the IPv4 addresses an IPv6 address carries by a
// translation scheme, which a host or a network on the path may turn into
// a connection to that IPv4 address: IPv4-compatible (::a.b.c.d, not :: or
// ::1), SIIT's IPv4-translated (::ffff:0:a.b.c.d, RFC 2765), NAT64's
// well-known prefix (64:ff9b::/96), NAT64's local-use prefix
// (64:ff9b:1::/48, RFC 8215) and 6to4 (2002::/16). (IPv4-mapped addresses
// are unmapped before.)
func embeddedV4(ip netip.Addr) []netip.Addr {
	if !ip.Is6() {
		return nil
	}
	b := ip.As16()
	v4 := func(i, j, k, l int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[j], b[k], b[l]}) }
	switch {
	case isZero(b[:12]) && !(isZero(b[12:15]) && b[15] <= 1),
		isZero(b[:8]) && b[8] == 0xff && b[9] == 0xff && isZero(b[10:12]):
		return []netip.Addr{v4(12, 13, 14, 15)}
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && isZero(b[4:12]):
		return []netip.Addr{v4(12, 13, 14, 15)}
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0x00 && b[5] == 0x01:
		// The network picks a prefix length of /48 to /96 inside it, and
		// RFC 6052 places the IPv4 address by that length, skipping byte
		// 8: the router cannot know which, so it looks through each. A
		// shorter form's all-zero reading is the padding of a longer one,
		// not an address.
		out := []netip.Addr{v4(12, 13, 14, 15)}
		for _, a := range []netip.Addr{v4(6, 7, 9, 10), v4(7, 9, 10, 11), v4(9, 10, 11, 12)} {
			if !a.IsUnspecified() {
				out = append(out, a)
			}
		}
		return out
	case b[0] == 0x20 && b[1] == 0x02:
		return []netip.Addr{v4(2, 3, 4, 5)}
	}
	return nil
}

func isZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// refusedAddr reports an address a worker may not have unless the
// policy allows link-local ones, looking through an IPv4 address an IPv6
// one carries.
func refusedAddr(ip netip.Addr) bool {
	refused := func(a netip.Addr) bool {
		return a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() || containsAddr(metadata, a)
	}
	if refused(ip) {
		return true
	}
	for _, v4 := range embeddedV4(ip) {
		if refused(v4) {
			return true
		}
	}
	return false
}

func (p Policy) checkHost(u, host string) error {
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return p.checkName(u, host)
	}
	if ip.Zone() != "" {
		return invalid("%q: an address with a zone is link-local", u)
	}
	ip = ip.Unmap()
	if !p.AllowLinkLocal && refusedAddr(ip) {
		return invalid("%q: link-local, metadata, unspecified and multicast addresses are refused unless the router runs with --workers-allow-link-local", u)
	}
	if len(p.AllowCIDRs) == 0 {
		return nil
	}
	for _, c := range p.AllowCIDRs {
		if c.Contains(ip) {
			return nil
		}
	}
	return invalid("%q: the address is outside --workers-allow-cidr", u)
}

func containsAddr(list []netip.Addr, ip netip.Addr) bool {
	for _, a := range list {
		if a == ip {
			return true
		}
	}
	return false
}

// checkName accepts a DNS name: labels of letters, digits, '-' and '_',
// the last one not all digits, so nothing a resolver might read as an
// address in another notation (127.1, 0x7f.0.0.1, 2130706433) passes as
// a name.
func (p Policy) checkName(u, host string) error {
	if len(p.AllowCIDRs) > 0 {
		return invalid("%q: with --workers-allow-cidr a worker must be named by an IP address, not a host name (its address could change after the check)", u)
	}
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || strings.Trim(l, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
			return invalid("%q: the host is neither an IP address nor a DNS name", u)
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(strings.ToLower(last), "0x") {
		return invalid("%q: the host is neither an IP address nor a DNS name", u)
	}
	if !p.AllowLinkLocal && metadataName(host) {
		return invalid("%q: a cloud metadata service's name is refused unless the router runs with --workers-allow-link-local", u)
	}
	return nil
}
