package upstream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeNet answers probes without sockets: hosts in down fail to connect.
type fakeNet struct {
	mu   sync.Mutex
	down map[string]bool
}

func (f *fakeNet) set(host string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[host] = down
}

func (f *fakeNet) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	down := f.down[r.URL.Host]
	f.mu.Unlock()
	if down {
		return nil, &net.OpError{Op: "dial", Err: errors.New("connection refused")}
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// sinkLog records health decisions.
type sinkLog struct {
	mu     sync.Mutex
	events []string
}

func (s *sinkLog) SetHealthy(id string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	state := "down"
	if ok {
		state = "up"
	}
	s.events = append(s.events, id+" "+state)
}

func (s *sinkLog) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...)
}

func TestProbesEjectAfterThresholdAndRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn := &fakeNet{down: map[string]bool{}}
		sink := &sinkLog{}
		h, err := NewHealth(HealthConfig{Interval: time.Second, Timeout: time.Second, Path: "/health", FailureThreshold: 3}, sink, fn, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		eps := NewEndpoints(func(ids []string) {})
		_ = eps.Set([]string{"http://a:1", "http://b:1"})
		h.SetTargets(eps, eps.IDs())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go h.Run(ctx)

		synctest.Wait()
		fn.set("a:1", true)
		time.Sleep(1500 * time.Millisecond) // probes at t=1s: 1 failure
		synctest.Wait()
		if ev := sink.get(); len(ev) != 0 {
			t.Fatalf("ejected after one failed probe: %v", ev)
		}
		time.Sleep(2 * time.Second) // t=2s, 3s: failures 2 and 3
		synctest.Wait()
		if ev := sink.get(); len(ev) != 1 || ev[0] != "http://a:1 down" {
			t.Fatalf("after 3 failed probes: %v", ev)
		}
		fn.set("a:1", false)
		time.Sleep(time.Second)
		synctest.Wait()
		if ev := sink.get(); len(ev) != 2 || ev[1] != "http://a:1 up" {
			t.Fatalf("after recovery: %v", ev)
		}
		cancel()
	})
}

func TestPassiveEjection(t *testing.T) {
	sink := &sinkLog{}
	h, err := NewHealth(DefaultHealthConfig(), sink, &fakeNet{down: map[string]bool{}}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	eps := NewEndpoints()
	_ = eps.Set([]string{"http://a:1"})
	h.SetTargets(eps, eps.IDs())
	boom := errors.New("connection reset")
	h.ObserveFailure("http://a:1", boom)
	h.ObserveFailure("http://a:1", boom)
	h.ObserveSuccess("http://a:1") // a success in between resets the count
	h.ObserveFailure("http://a:1", boom)
	h.ObserveFailure("http://a:1", context.Canceled) // the client's doing, not the endpoint's
	h.ObserveFailure("http://a:1", boom)
	if ev := sink.get(); len(ev) != 0 {
		t.Fatalf("ejected before 3 consecutive failures: %v", ev)
	}
	h.ObserveFailure("http://a:1", boom)
	h.ObserveFailure("http://a:1", boom)
	if ev := sink.get(); len(ev) != 1 || ev[0] != "http://a:1 down" {
		t.Fatalf("events %v, want one ejection", ev)
	}
	h.ProbeAll(context.Background())
	if ev := sink.get(); len(ev) != 2 || ev[1] != "http://a:1 up" {
		t.Fatalf("events %v, want a probe to bring it back", ev)
	}
}

func TestHealthConfigValidate(t *testing.T) {
	bad := []HealthConfig{
		{Interval: 0, Timeout: time.Second, FailureThreshold: 1},
		{Interval: time.Second, Timeout: 0, FailureThreshold: 1},
		{Interval: time.Second, Timeout: time.Second, FailureThreshold: 0},
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
