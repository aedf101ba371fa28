package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeNet answers probes without sockets: hosts in down fail to connect,
// hosts in hang accept and never answer.
type fakeNet struct {
	mu         sync.Mutex
	down, hang map[string]bool
}

func newFakeNet() *fakeNet { return &fakeNet{down: map[string]bool{}, hang: map[string]bool{}} }

func (f *fakeNet) set(host string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[host] = down
}

func (f *fakeNet) setHang(host string, hang bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hang[host] = hang
}

func (f *fakeNet) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	down, hang := f.down[r.URL.Host], f.hang[r.URL.Host]
	f.mu.Unlock()
	if hang {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	if down {
		return nil, &net.OpError{Op: "dial", Err: errors.New("connection refused")}
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// healthyIDs lists the snapshot's healthy endpoints.
func healthyIDs(s *Set) []string {
	var out []string
	for _, e := range s.Snapshot().Endpoints {
		if e.Healthy {
			out = append(out, e.ID)
		}
	}
	return out
}

func newTestSet(t *testing.T, cfg HealthConfig, fn *fakeNet, o ...func(*Options)) *Set {
	t.Helper()
	opts := Options{Transport: fn}
	for _, f := range o {
		f(&opts)
	}
	s, err := NewSet(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fastHealth() HealthConfig {
	return HealthConfig{Interval: time.Second, Timeout: time.Second, Path: "/health", FailureThreshold: 3,
		BaseEjection: 30 * time.Second, MaxEjection: 5 * time.Minute, ServedWindow: 10 * time.Second}
}

// TestEjectedEndpointThatLeavesAndReturnsIsUsedAgain is the Kubernetes path
// crash -> NotReady -> Ready: an ejected endpoint drops out of discovery and
// comes back healthy at the same address. It starts afresh: its old
// ejection does not outlive it. (A balancer that kept ejections by
// address would keep it down for good.)
func TestEjectedEndpointThatLeavesAndReturnsIsUsedAgain(t *testing.T) {
	s := newTestSet(t, fastHealth(), newFakeNet())
	_ = s.SetSource("dns", []string{"http://a:1", "http://b:1"})
	for range 3 {
		s.ObserveFailure("http://a:1", errors.New("connection refused"))
	}
	if got := healthyIDs(s); !slices.Equal(got, []string{"http://b:1"}) {
		t.Fatalf("after 3 failures, healthy %v", got)
	}
	_ = s.SetSource("dns", []string{"http://b:1"})
	_ = s.SetSource("dns", []string{"http://a:1", "http://b:1"})
	if got := healthyIDs(s); !slices.Equal(got, []string{"http://a:1", "http://b:1"}) {
		t.Fatalf("returned endpoint not used: healthy %v", got)
	}
}

func TestProbesEjectAfterThresholdAndRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn := newFakeNet()
		s := newTestSet(t, fastHealth(), fn)
		_ = s.SetSource("static", []string{"http://a:1", "http://b:1"})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Run(ctx)
		synctest.Wait()
		fn.set("a:1", true)
		time.Sleep(1500 * time.Millisecond) // probes at t=1s: 1 failure
		synctest.Wait()
		if len(healthyIDs(s)) != 2 {
			t.Fatal("ejected after one failed probe")
		}
		time.Sleep(2 * time.Second) // t=2s, 3s: failures 2 and 3
		synctest.Wait()
		if got := healthyIDs(s); !slices.Equal(got, []string{"http://b:1"}) {
			t.Fatalf("after 3 failed probes, healthy %v", got)
		}
		fn.set("a:1", false)
		time.Sleep(time.Second) // a probe-ejected endpoint returns at its first passing probe
		synctest.Wait()
		if len(healthyIDs(s)) != 2 {
			t.Fatalf("after recovery, healthy %v", healthyIDs(s))
		}
		cancel()
	})
}

// TestHungEndpointIsEjectedByProbeTimeout: an endpoint that accepts
// connections and never answers fails its probes by their own timeout.
func TestHungEndpointIsEjectedByProbeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn := newFakeNet()
		s := newTestSet(t, fastHealth(), fn)
		_ = s.SetSource("static", []string{"http://a:1", "http://b:1"})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Run(ctx)
		synctest.Wait()
		fn.setHang("b:1", true)
		start := time.Now()
		for slices.Contains(healthyIDs(s), "http://b:1") {
			time.Sleep(100 * time.Millisecond)
			if time.Since(start) > time.Minute {
				t.Fatal("hung endpoint never ejected")
			}
		}
		// 3 probes, one per second, each failing after its 1 s timeout.
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("hung endpoint ejected after %v", d)
		}
		if h := s.Health(); !strings.Contains(h[1].LastError, "deadline") && !strings.Contains(h[1].LastError, "Timeout") {
			t.Fatalf("last error %q", h[1].LastError)
		}
		cancel()
	})
}

// TestRequestFailuresEjectDespitePassingProbes: an endpoint that answers
// its health probe but fails requests (a 500 on every request) is ejected
// after FailureThreshold failed requests; a passing probe does not reset
// that count, nor bring it back before BaseEjection; a second ejection in a
// row lasts twice as long (as Envoy's outlier detection does), so it does
// not flap back at every probe.
func TestRequestFailuresEjectDespitePassingProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestSet(t, fastHealth(), newFakeNet())
		_ = s.SetSource("static", []string{"http://a:1", "http://b:1"})
		fail := func() {
			for range 2 {
				s.ObserveFailure("http://a:1", errors.New("status 500"))
				s.ProbeAll(context.Background()) // passes
			}
			s.ObserveFailure("http://a:1", errors.New("status 500"))
		}
		fail()
		if got := healthyIDs(s); slices.Contains(got, "http://a:1") {
			t.Fatal("3 failed requests between passing probes did not eject")
		}
		time.Sleep(29 * time.Second)
		s.ProbeAll(context.Background())
		if slices.Contains(healthyIDs(s), "http://a:1") {
			t.Fatal("back before its 30 s ejection")
		}
		time.Sleep(time.Second)
		s.ProbeAll(context.Background())
		if !slices.Contains(healthyIDs(s), "http://a:1") {
			t.Fatal("not back after its ejection time and a passing probe")
		}
		fail()
		time.Sleep(59 * time.Second)
		s.ProbeAll(context.Background())
		if slices.Contains(healthyIDs(s), "http://a:1") {
			t.Fatal("second ejection shorter than 60 s")
		}
		time.Sleep(time.Second)
		s.ProbeAll(context.Background())
		if !slices.Contains(healthyIDs(s), "http://a:1") {
			t.Fatal("not back after its second ejection")
		}
		// Requests that succeed reset the count.
		s.ObserveFailure("http://a:1", errors.New("status 500"))
		s.ObserveFailure("http://a:1", errors.New("status 500"))
		s.ObserveSuccess("http://a:1")
		s.ObserveFailure("http://a:1", errors.New("status 500"))
		s.ObserveFailure("http://a:1", context.Canceled) // the client's doing
		if !slices.Contains(healthyIDs(s), "http://a:1") {
			t.Fatal("ejected without 3 failures in a row")
		}
	})
}

func TestNilLoggerAndMetricsDoNotPanic(t *testing.T) {
	s, err := NewSet(fastHealth(), Options{Transport: newFakeNet()})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.SetSource("static", []string{"http://a:1"})
	for range 3 {
		s.ObserveFailure("http://a:1", errors.New("refused"))
	}
	if len(healthyIDs(s)) != 0 {
		t.Fatal("not ejected")
	}
}

func TestHealthConfigValidate(t *testing.T) {
	bad := []HealthConfig{
		{Interval: 0, Timeout: time.Second, FailureThreshold: 1},
		{Interval: time.Second, Timeout: 0, FailureThreshold: 1},
		{Interval: time.Second, Timeout: time.Second, FailureThreshold: 0},
		{Interval: time.Second, Timeout: time.Second, FailureThreshold: 1, BaseEjection: time.Minute, MaxEjection: time.Second},
		{Interval: time.Second, Timeout: time.Second, FailureThreshold: 1},
		// A served window under 1 ms: its watcher ticks every quarter of
		// it, and a quarter of 3 ns is 0, which time.NewTicker refuses
		// with a panic (serve crashed with --served-window 3ns until
		// stop 40).
		{Interval: time.Second, Timeout: time.Second, FailureThreshold: 1, ServedWindow: 3},
		{Interval: time.Second, Timeout: time.Second, FailureThreshold: 1, ServedWindow: time.Millisecond - 1},
	}
	for _, c := range bad {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := DefaultHealthConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}
