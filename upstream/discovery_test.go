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

func (f *fakeResolver) set(hosts []string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hosts, f.err = hosts, err
}

func TestDNSWatchAppliesChangesAndKeepsLastGoodSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res := &fakeResolver{hosts: []string{"10.0.0.2", "10.0.0.1"}}
		var mu sync.Mutex
		var changes [][]string
		eps := NewEndpoints(func(ids []string) { mu.Lock(); changes = append(changes, ids); mu.Unlock() })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go DNSSource{Name: "vllm.default.svc:8000", Resolver: res}.Watch(ctx, 10*time.Second, eps, slog.New(slog.DiscardHandler))
		synctest.Wait()
		want := []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000"}
		if !slices.Equal(eps.IDs(), want) {
			t.Fatalf("endpoints %v, want %v", eps.IDs(), want)
		}
		res.set(nil, errors.New("SERVFAIL"))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		res.set([]string{}, nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !slices.Equal(eps.IDs(), want) {
			t.Fatalf("a failed or empty lookup changed the set: %v", eps.IDs())
		}
		res.set([]string{"10.0.0.1", "10.0.0.3"}, nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := eps.IDs(); !slices.Equal(got, []string{"http://10.0.0.1:8000", "http://10.0.0.3:8000"}) {
			t.Fatalf("after the change: %v", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(changes) != 2 {
			t.Fatalf("%d change notifications, want 2 (unchanged answers notify nobody)", len(changes))
		}
	})
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

func TestParseEndpoint(t *testing.T) {
	good := map[string]string{
		"10.0.0.1:8000":            "http://10.0.0.1:8000",
		"http://VLLM-0:8000/":      "http://vllm-0:8000",
		"https://gpu.example/v1x/": "https://gpu.example/v1x",
		" http://[::1]:8000 ":      "http://[::1]:8000",
	}
	for in, want := range good {
		if _, id, err := ParseEndpoint(in); err != nil || id != want {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want %q", in, id, err, want)
		}
	}
	for _, in := range []string{"ftp://x:1", "http://", "http://u:p@x:1", "http://x:1/?q=1", "http://x:1/#f", "http://%zz"} {
		if _, _, err := ParseEndpoint(in); err == nil {
			t.Errorf("ParseEndpoint(%q) accepted", in)
		}
	}
	eps := NewEndpoints()
	if err := eps.Set([]string{"http://a:1", "ftp://b"}); err == nil || len(eps.IDs()) != 0 {
		t.Fatalf("a bad endpoint in the list: err %v, set %v", err, eps.IDs())
	}
}
