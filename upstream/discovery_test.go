package upstream

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type fakeResolver struct {
	mu    sync.Mutex
	hosts []string
	srv   []*net.SRV
	err   error
}

func (f *fakeResolver) LookupHost(context.Context, string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.hosts), f.err
}

func (f *fakeResolver) LookupSRV(context.Context, string, string, string) (string, []*net.SRV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return "", f.srv, f.err
}

func (f *fakeResolver) setSRV(srv []*net.SRV, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.srv, f.err = srv, err
}

func (f *fakeResolver) set(hosts []string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hosts, f.err = hosts, err
}

// sinkLog records the lists a source sets.
type sinkLog struct {
	mu      sync.Mutex
	changes [][]string
}

func (s *sinkLog) SetSource(source string, raw []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if source != "dns" {
		return errors.New("wrong source " + source)
	}
	if n := len(s.changes); n == 0 || !slices.Equal(s.changes[n-1], raw) {
		s.changes = append(s.changes, slices.Clone(raw))
	}
	return nil
}

func (s *sinkLog) last() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.changes) == 0 {
		return nil
	}
	return s.changes[len(s.changes)-1]
}

func TestDNSWatchAppliesChangesAndKeepsLastGoodSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res := &fakeResolver{hosts: []string{"10.0.0.2", "10.0.0.1"}}
		sink := &sinkLog{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go DNSSource{Name: "vllm.default.svc:8000", Resolver: res}.Watch(ctx, 10*time.Second, sink, slog.New(slog.DiscardHandler))
		synctest.Wait()
		want := []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000"}
		if !slices.Equal(sink.last(), want) {
			t.Fatalf("endpoints %v, want %v", sink.last(), want)
		}
		res.set(nil, errors.New("SERVFAIL"))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		res.set([]string{}, nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !slices.Equal(sink.last(), want) {
			t.Fatalf("a failed or empty lookup changed the set: %v", sink.last())
		}
		res.set([]string{"10.0.0.3"}, nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := sink.last(); !slices.Equal(got, []string{"http://10.0.0.3:8000"}) {
			t.Fatalf("after a change: %v", got)
		}
		if len(sink.changes) != 2 {
			t.Fatalf("changes %v, want 2", sink.changes)
		}
		cancel()
	})
}

// TestDNSUsesTheGoodRecordsOfAnAnswer: a record that cannot become an
// endpoint is left out, named in the error, and the rest of the answer is
// routed, as Envoy's STRICT_DNS and nginx's resolver use the good records
// of an answer. Such records: an address with an IPv6 zone (Go reads them
// from /etc/hosts; a URL cannot hold one unescaped), an SRV target of "."
// (RFC 2782: no service here), and the invalid names Go's resolver filters
// out of an SRV answer, returning the rest with an error. Before, the
// whole answer was refused and the last set kept, stale for as long as
// the bad record stayed.
func TestDNSUsesTheGoodRecordsOfAnAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res := &fakeResolver{hosts: []string{"10.0.0.1"}}
		set := newTestSet(t, fastHealth(), newFakeNet())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go DNSSource{Name: "vllm.default.svc:8000", Resolver: res}.Watch(ctx, 10*time.Second, set, slog.New(slog.DiscardHandler))
		synctest.Wait()
		res.set([]string{"10.0.0.1", "fe80::1%eth0", "10.0.0.2"}, nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got, want := set.Snapshot().IDs(), []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000"}; !slices.Equal(got, want) {
			t.Fatalf("routed %v, want %v: one bad record held up the answer", got, want)
		}
		cancel()
	})
}

// TestDNSSRVUsesTheGoodRecordsOfAnAnswer: TestDNSUsesTheGoodRecordsOfAnAnswer
// for SRV answers.
func TestDNSSRVUsesTheGoodRecordsOfAnAnswer(t *testing.T) {
	res := &fakeResolver{}
	src := DNSSource{Name: "_http._tcp.vllm.ns.svc", Resolver: res}
	good := &net.SRV{Target: "vllm-0.vllm.ns.svc.", Port: 8000}
	for _, c := range []struct {
		srv []*net.SRV
		err error
	}{
		{[]*net.SRV{good, {Target: ".", Port: 8000}}, nil},
		{[]*net.SRV{good}, &net.DNSError{Err: "DNS response contained records which contain invalid names", Name: src.Name}},
	} {
		res.setSRV(c.srv, c.err)
		got, err := src.Resolve(context.Background())
		if want := []string{"http://vllm-0.vllm.ns.svc:8000"}; !slices.Equal(got, want) || err == nil {
			t.Errorf("%d SRV records, error %v: got %v, %v; want %v and an error naming the bad record", len(c.srv), c.err, got, err, want)
		}
	}
	res.setSRV(nil, errors.New("SERVFAIL"))
	if got, err := src.Resolve(context.Background()); got != nil || err == nil {
		t.Errorf("a failed lookup: %v, %v", got, err)
	}
}

func TestDNSSRV(t *testing.T) {
	res := &fakeResolver{srv: []*net.SRV{{Target: "vllm-1.vllm.ns.svc.", Port: 8000}, {Target: "vllm-0.vllm.ns.svc.", Port: 8000}}}
	got, err := DNSSource{Name: "_http._tcp.vllm.ns.svc", Resolver: res}.Resolve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://vllm-0.vllm.ns.svc:8000", "http://vllm-1.vllm.ns.svc:8000"}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if _, err := (DNSSource{Name: "no-port", Resolver: res}).Resolve(context.Background()); err == nil {
		t.Fatal("a name without port or SRV form was accepted")
	}
}

// TestParseEndpointCanonicalID: every spelling of one server gives one
// ID, so one engine registered under several spellings is one endpoint
// (one share of routing, of the load bound and of --max-workers), and
// spellings of different servers stay apart.
func TestParseEndpointCanonicalID(t *testing.T) {
	same := map[string][]string{
		"http://10.0.0.1": {"http://10.0.0.1:80", "http://10.0.0.1", "HTTP://10.0.0.1:080/", "http://[::ffff:10.0.0.1]:80",
			"http://[0:0:0:0:0:ffff:a00:1]", "10.0.0.1:80", "10.0.0.1", "http://10.0.0.1:", "http://10.0.0.1:80/v1/"},
		"http://10.0.0.7:8000": {"http://10.0.0.7:8000", "10.0.0.7:8000", "http://10.0.0.7:08000/", "http://[::FFFF:10.0.0.7]:8000",
			"gpu-a=http://10.0.0.7:8000"},
		"https://gpu.example":    {"https://gpu.example", "HTTPS://GPU.Example:443/", "https://gpu.example:0443"},
		"https://gpu.example:80": {"https://gpu.example:80"},
		"http://gpu.example:443": {"http://gpu.example:443"},
		"http://[2001:db8::1]":   {"http://[2001:DB8:0:0:0:0:0:1]", "http://[2001:db8::1]:80", "http://[2001:0db8::0001]"},
		"http://[::1]:8000":      {"http://[::1]:8000", "http://[0:0:0:0:0:0:0:1]:8000", "[::1]:8000"},
		"http://gw/models/llama": {"http://gw:80/models/llama/", "HTTP://GW/models/llama/v1"},
	}
	ids := map[string]bool{}
	for id, spellings := range same {
		if ids[id] {
			t.Fatalf("two groups want ID %s", id)
		}
		ids[id] = true
		for _, in := range spellings {
			ep, _, err := ParseEndpoint(in)
			if err != nil || ep.ID != id || ep.URL.String() != id {
				t.Errorf("ParseEndpoint(%q) = %+v, %v; want ID %s", in, ep, err, id)
			}
		}
	}
	// Different ports, hosts, schemes and paths stay different endpoints.
	apart := []string{"http://10.0.0.1:8000", "http://10.0.0.1:8001", "http://10.0.0.2", "https://10.0.0.1",
		"http://10.0.0.1/a", "http://10.0.0.1/A", "http://[::1]", "http://[::2]", "http://gw", "http://[::10.0.0.1]"}
	seen := map[string]string{}
	for _, in := range apart {
		ep, _, err := ParseEndpoint(in)
		if err != nil {
			t.Fatalf("ParseEndpoint(%q): %v", in, err)
		}
		if prev, ok := seen[ep.ID]; ok {
			t.Errorf("%q and %q share ID %s", in, prev, ep.ID)
		}
		seen[ep.ID] = in
	}
	if ep, _, _ := ParseEndpoint("http://10.0.0.1:80"); ep.Name != "10.0.0.1" {
		t.Errorf("the name of http://10.0.0.1:80 is %q, want the canonical host", ep.Name)
	}
	for _, in := range []string{"http://x:0", "http://x:65536", "http://x:99999999999999999999"} {
		if _, _, err := ParseEndpoint(in); err == nil {
			t.Errorf("ParseEndpoint(%q) accepted a port outside 1 to 65535", in)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	good := map[string]struct{ id, name string }{
		"10.0.0.1:8000":                 {"http://10.0.0.1:8000", "10.0.0.1:8000"},
		"http://VLLM-0:8000/":           {"http://vllm-0:8000", "vllm-0:8000"},
		"https://gpu.example/v1x/":      {"https://gpu.example/v1x", "gpu.example"},
		" http://[::1]:8000 ":           {"http://[::1]:8000", "[::1]:8000"},
		"gpu-a=http://10.0.0.7:8000":    {"http://10.0.0.7:8000", "gpu-a"},
		"http://host:8000/v1":           {"http://host:8000", "host:8000"},
		"http://host:8000/v1/":          {"http://host:8000", "host:8000"},
		"b.2=http://gw/models/llama/v1": {"http://gw/models/llama", "b.2"},
		"http://host:8000/?":            {"http://host:8000", "host:8000"},
	}
	for in, want := range good {
		ep, _, err := ParseEndpoint(in)
		if err != nil || ep.ID != want.id || ep.Name != want.name || ep.URL.String() != want.id {
			t.Errorf("ParseEndpoint(%q) = %+v, %v; want %v", in, ep, err, want)
		}
	}
	if _, stripped, _ := ParseEndpoint("http://host:8000/v1"); !stripped {
		t.Error("a stripped /v1 is not reported")
	}
	for _, in := range []string{"ftp://x:1", "http://", "http://u:p@x:1", "http://x:1/?q=1", "http://x:1/#f",
		"http://%zz", "bad label=http://x:1", "=http://x:1"} {
		if _, _, err := ParseEndpoint(in); err == nil {
			t.Errorf("ParseEndpoint(%q) accepted", in)
		}
	}
}
