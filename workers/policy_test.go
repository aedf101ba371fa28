package workers

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// Every class of URL the policy refuses, with the default policy and with
// an allowlist; the set stays empty.
func TestPolicyRefusesURLs(t *testing.T) {
	long := "http://10.0.0.7:8000/" + strings.Repeat("a", 600)
	for _, u := range []string{
		"", "10.0.0.7:8000", "ftp://10.0.0.7:21", "file:///etc/passwd", "http://", "http://:8000",
		"http://user:pw@10.0.0.7:8000", "http://user@10.0.0.7:8000",
		"http://10.0.0.7:8000?x=1", "http://10.0.0.7:8000/?", "http://10.0.0.7:8000#frag",
		"http://10.0.0.7:8000/a b", "http://10.0.0.7:8000/é", "http://10.0.0.7:8000/\"x\"",
		"http://a=http://10.0.0.7:8000", "http://10.0.0.7:8000/x=y",
		long, "http://" + strings.Repeat("a", 5019),
		// link-local, cloud metadata, unspecified, broadcast, multicast
		"http://169.254.169.254", "http://169.254.1.1:8000", "http://[fe80::1]:8000", "http://[fe80::1%25eth0]:8000",
		"http://[::ffff:169.254.169.254]", "http://[fd00:ec2::254]", "http://100.100.100.200",
		"http://0.0.0.0:8000", "http://[::]:8000", "http://255.255.255.255", "http://224.0.0.1:8000", "http://[ff02::1]:8000",
		"http://168.63.129.16", "http://[fd20:ce::254]",
		// IPv4 addresses inside IPv6 ones: IPv4-compatible, NAT64, 6to4,
		// NAT64's local-use prefix (RFC 8215) in RFC 6052's /96 and /48
		// forms, SIIT's IPv4-translated form (RFC 2765)
		"http://[::169.254.169.254]", "http://[64:ff9b::169.254.169.254]", "http://[2002:a9fe:a9fe::1]",
		"http://[64:ff9b:1::169.254.169.254]", "http://[64:ff9b:1:a9fe:0:a9fe::]", "http://[::ffff:0:169.254.169.254]",
		// the metadata services' own names (a name is not resolved here)
		"http://metadata", "http://metadata.google.internal", "http://METADATA.GOOGLE.INTERNAL.", "http://metadata.goog",
		"http://instance-data", "http://instance-data.ec2.internal", "http://instance-data.us-west-2.compute.internal",
		// numbers that some resolvers read as addresses (inet_aton)
		"http://2852039166", "http://127.1:8000", "http://0x7f.0.0.1", "http://0177.0.0.1:8000",
		"http://10.0.0.7:99999", "http://10.0.0.7:x",
	} {
		s := NewSet("r0", nil, 0)
		added, err := s.Register(u)
		if added || !errors.Is(err, ErrInvalidURL) || s.Add(u) || len(s.Members()) != 0 {
			t.Errorf("%.60q: added %v, err %v, members %v; want ErrInvalidURL", u, added, err, s.Members())
		}
	}
}

// The policy's errors reach the workers API's callers and logs, so none
// quotes a URL's userinfo: every branch that names the URL, hit by a URL
// with a password (until stop 43 each quoted it whole, the user-info
// refusal itself included).
func TestPolicyErrorsHideCredentials(t *testing.T) {
	p := DefaultPolicy()
	p.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, u := range []string{
		"http://admin:s3cret@10.0.0.7:8000",                             // user info
		"http://admin:s3cret@10.0.0.7:8000/?x",                          // query
		"http://admin:s3cret@10.0.0.7:8000/x=y",                         // '='
		"ftp://admin:s3cret@10.0.0.7:21",                                // scheme
		"http:admin:s3cret@10.0.0.7",                                    // opaque
		"http://admin:s3cret@[::1",                                      // url.Parse's error
		"http://admin:s3/cret@10.0.0.7:8000",                            // a '/' ends the host early
		"http://admin:s3cret@10.0.0.7:8000/a b",                         // a byte
		"http://admin:s3cret@10.0.0.7:8000/" + strings.Repeat("a", 600), // length
	} {
		if err := p.CheckURL(u); err == nil || strings.Contains(err.Error(), "s3") || !errors.Is(err, ErrInvalidURL) {
			t.Errorf("%.50q: %v, want ErrInvalidURL without the password", u, err)
		}
	}
	// A password Go reads as a port, ended early by a '/' in it.
	if err := p.CheckURL("http://admin:70000/s3cret@10.0.0.7"); err == nil || strings.Contains(err.Error(), "70000") {
		t.Errorf("a numeric password read as a port: %v, want an error without it", err)
	}
	// The branches past the user-info check, reached only without one,
	// still name the URL (the caller's own, so it can tell which).
	for _, u := range []string{
		"http://", "http://10.0.0.7:99999", "http://[fe80::1%25eth0]:8000", "http://169.254.169.254",
		"http://192.168.1.2:8000", "http://worker:8000",
	} {
		if err := p.CheckURL(u); err == nil || !strings.Contains(err.Error(), u) {
			t.Errorf("%q: %v, want an error quoting the URL", u, err)
		}
	}
}

func TestPolicyAcceptsUsableURLs(t *testing.T) {
	for _, u := range []string{
		"http://10.0.0.7:8000", "https://10.0.0.7", "http://127.0.0.1:30001", "http://[2001:db8::1]:8000",
		// usable IPv4 addresses inside the same IPv6 forms
		"http://[64:ff9b:1::10.0.0.7]:8000", "http://[::ffff:0:10.0.0.7]:8000",
		"http://sglang-0.sglang.default.svc:8000", "HTTP://Worker-1:8000/", "http://10.0.0.7:8000/prefix",
		"http://10.0.0.7:8000/" + strings.Repeat("a", 512-len("http://10.0.0.7:8000/")),
	} {
		s := NewSet("r0", nil, 0)
		if added, err := s.Register(u); !added || err != nil {
			t.Errorf("%.60q: added %v, err %v", u, added, err)
		}
	}
}

// An allowlist judges addresses, so it takes IP literals only: a name's
// address can change after the check.
func TestPolicyAllowlist(t *testing.T) {
	p := DefaultPolicy()
	p.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	for u, ok := range map[string]bool{
		"http://10.1.2.3:8000": true, "http://[2001:db8::7]:8000": true, "http://[::ffff:10.1.2.3]:8000": true,
		"http://192.168.1.2:8000": false, "http://127.0.0.1:8000": false, "http://worker:8000": false,
		"http://localhost:8000": false,
	} {
		if err := p.CheckURL(u); (err == nil) != ok {
			t.Errorf("%s: %v, want ok=%v", u, err, ok)
		}
	}
	// Link-local needs its own flag, allowlisted or not.
	p.AllowCIDRs = append(p.AllowCIDRs, netip.MustParsePrefix("169.254.0.0/16"))
	if p.CheckURL("http://169.254.1.1:8000") == nil {
		t.Error("link-local accepted by the allowlist alone")
	}
	p.AllowLinkLocal = true
	for _, u := range []string{"http://169.254.1.1:8000"} {
		if err := p.CheckURL(u); err != nil {
			t.Errorf("%s with AllowLinkLocal: %v", u, err)
		}
	}
	q := DefaultPolicy()
	q.AllowLinkLocal = true
	for _, u := range []string{"http://169.254.169.254", "http://[fe80::1]:8000", "http://0.0.0.0:8000", "http://224.0.0.1:8000"} {
		if err := q.CheckURL(u); err != nil {
			t.Errorf("%s with AllowLinkLocal: %v", u, err)
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	d := DefaultPolicy()
	if d.MaxURLBytes != 512 || d.MaxWorkers != 256 {
		t.Fatalf("defaults %+v", d)
	}
	for name, p := range map[string]Policy{
		"max workers 0":         {MaxURLBytes: 512, MaxWorkers: 0},
		"max workers too many":  {MaxURLBytes: 512, MaxWorkers: maxOps},
		"url cap 0":             {MaxURLBytes: 0, MaxWorkers: 8},
		"url cap past the wire": {MaxURLBytes: 4096, MaxWorkers: 8},
		"bad prefix":            {MaxURLBytes: 512, MaxWorkers: 8, AllowCIDRs: []netip.Prefix{{}}},
	} {
		if p.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The cap: an add past it is refused; a remove makes room.
func TestRegisterCapsWorkers(t *testing.T) {
	s := NewSet("r0", nil, 0)
	p := DefaultPolicy()
	p.MaxWorkers = 2
	s.SetPolicy(p)
	for _, u := range []string{"http://10.0.0.1:1", "http://10.0.0.2:1"} {
		if _, err := s.Register(u); err != nil {
			t.Fatal(err)
		}
	}
	if added, err := s.Register("http://10.0.0.3:1"); added || !errors.Is(err, ErrTooManyWorkers) || len(s.Members()) != 2 {
		t.Fatalf("third add: %v %v, members %v", added, err, s.Members())
	}
	if added, err := s.Register("http://10.0.0.2:1"); added || err != nil {
		t.Fatalf("re-adding a member at the cap: %v %v", added, err)
	}
	s.Remove("http://10.0.0.1:1")
	if added, err := s.Register("http://10.0.0.3:1"); !added || err != nil {
		t.Fatalf("after a remove: %v %v", added, err)
	}
}

// A peer's op that fails the policy is dropped alone and counted; the
// valid ops beside it apply. So is an add past the cap.
func TestMergeDropsInvalidOpsAlone(t *testing.T) {
	c := &clock{t0}
	s := newSet("r0", c)
	p := DefaultPolicy()
	p.MaxWorkers = 3
	s.SetPolicy(p)
	st := uint64(t0.UnixMilli()) << 16
	ops := []Op{
		{URL: "http://10.0.0.1:8000", Stamp: st, Origin: "r1"},
		{URL: "http://10.0.0.1:8000/" + strings.Repeat("a", 5000), Stamp: st, Origin: "r1"},
		{URL: "http://169.254.169.254", Stamp: st, Origin: "r1"},
		{URL: "", Stamp: st, Origin: "r1"},
		{URL: "http://10.0.0.2:8000", Stamp: st, Origin: strings.Repeat("o", 300)},
		{URL: "http://10.0.0.3:8000", Stamp: st, Origin: "r1"},
		{URL: "http://10.0.0.4:8000", Stamp: st, Origin: "r1"},
		{URL: "http://10.0.0.5:8000", Stamp: st, Origin: "r1"},
		{URL: "http://10.0.0.6:8000", Stamp: st, Origin: "r1", Removed: true},
	}
	if !s.Merge(ops) {
		t.Fatal("Merge applied nothing")
	}
	if got, want := s.Members(), []string{"http://10.0.0.1:8000", "http://10.0.0.3:8000", "http://10.0.0.4:8000"}; !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	if d := s.Dropped(); d != (Dropped{Invalid: 4, OverCap: 1}) {
		t.Fatalf("dropped %+v, want 4 invalid, 1 over the cap", d)
	}
	// A bad op's stamp does not move the clock.
	s2 := newSet("r2", c)
	s2.Merge([]Op{{URL: "http://169.254.169.254", Stamp: ^uint64(0), Origin: "r1"}})
	s2.Add("http://10.0.0.9:1")
	if op := s2.Ops()[0]; op.Stamp == 0 || op.Stamp < st {
		t.Fatalf("a refused op's stamp moved the clock: %v", op)
	}
}

// TestMergeAppliesThisReplicasPolicy: replicas may run different policies
// (a rolling change of --workers-allow-cidr, a misconfigured one), and each
// judges a peer's ops by its own. Workers registered through a replica
// without an allowlist are refused by one with it when outside its CIDRs,
// or named by host, and counted; its removal of them is refused too, and
// the allowed worker beside them comes and goes.
func TestMergeAppliesThisReplicasPolicy(t *testing.T) {
	c := &clock{t0}
	loose, strict := newSet("r0", c), newSet("r1", c)
	p := DefaultPolicy()
	p.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}
	if err := strict.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"http://10.0.0.5:8000", "http://10.1.0.5:8000", "http://gpu-7:8000"} {
		if !loose.Add(u) {
			t.Fatalf("the loose replica refused %s", u)
		}
	}
	strict.Merge(loose.Ops())
	if got, want := strict.Members(), []string{"http://10.0.0.5:8000"}; !slices.Equal(got, want) {
		t.Fatalf("the strict replica took %v from its peer, want %v", got, want)
	}
	if d := strict.Dropped(); d.Invalid != 2 {
		t.Fatalf("dropped %+v, want 2 invalid", d)
	}
	c.t = c.t.Add(time.Second)
	for _, u := range []string{"http://10.0.0.5:8000", "http://10.1.0.5:8000"} {
		loose.Remove(u)
	}
	strict.Merge(loose.Ops())
	if got := strict.Members(); len(got) != 0 || len(strict.Ops()) != 1 || strict.Dropped().Invalid != 4 {
		t.Fatalf("after the removals: members %v, ops %v, dropped %+v", got, strict.Ops(), strict.Dropped())
	}
}
