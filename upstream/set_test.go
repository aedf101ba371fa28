package upstream

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

// recordingArbiter records the observations the set reports.
type recordingArbiter struct {
	mu                                sync.Mutex
	gen                               uint64
	discovered, down, failing, served []string
	calls                             int
}

func (a *recordingArbiter) Vote(gen uint64, discovered, down, failing, served []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	if gen >= a.gen {
		a.gen, a.discovered, a.down, a.failing, a.served = gen, discovered, down, failing, served
	}
}

func (a *recordingArbiter) get() ([]string, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.discovered, a.down
}

// evidence returns what the last vote said of requests.
func (a *recordingArbiter) evidence() (failing, served []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.failing, a.served
}

func TestSourcesAreUnited(t *testing.T) {
	s := newTestSet(t, fastHealth(), newFakeNet())
	_ = s.SetSource("static", []string{"gpu-a=http://a:1", "http://b:1"})
	_ = s.SetSource("dns", []string{"http://b:1", "http://c:1/v1"})
	if got := s.Snapshot().IDs(); !slices.Equal(got, []string{"http://a:1", "http://b:1", "http://c:1"}) {
		t.Fatalf("union %v", got)
	}
	if s.Name("http://a:1") != "gpu-a" || s.Name("http://c:1") != "c:1" || s.URL("http://b:1").Host != "b:1" {
		t.Fatalf("names %q %q", s.Name("http://a:1"), s.Name("http://c:1"))
	}
	if err := s.SetSource("dns", []string{"http://d:1", "ftp://x"}); err == nil {
		t.Fatal("a bad endpoint accepted")
	}
	if len(s.Snapshot().Endpoints) != 3 {
		t.Fatal("a rejected list changed the set")
	}
	_ = s.SetSource("static", nil)
	if got := s.Snapshot().IDs(); !slices.Equal(got, []string{"http://b:1", "http://c:1"}) {
		t.Fatalf("after the static source emptied: %v", got)
	}
	if s.URL("http://a:1") != nil || s.Name("http://a:1") != "" {
		t.Fatal("a removed endpoint still resolves")
	}
}

// TestVerdictDecidesWhatIsRouted: with an arbiter, the set reports its own
// observations to it, and routes what the verdict says, with the health
// the verdict says, but never an endpoint that only the verdict names: a
// peer (or a stranger holding the gossip key) can take endpoints out of
// this replica's set, never point it at a server of its own. Before, the
// verdict's c:1 was routed.
func TestVerdictDecidesWhatIsRouted(t *testing.T) {
	a := &recordingArbiter{}
	s := newTestSet(t, fastHealth(), newFakeNet(), func(o *Options) { o.Arbiter = a })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Dispatch(ctx)
	_ = s.SetSource("static", []string{"http://a:1", "http://b:1"})
	for range 3 {
		s.ObserveFailure("http://b:1", errors.New("refused"))
	}
	if err := s.WaitDispatched(ctx); err != nil {
		t.Fatal(err)
	}
	disc, down := a.get()
	if !slices.Equal(disc, []string{"http://a:1", "http://b:1"}) || !slices.Equal(down, []string{"http://b:1"}) {
		t.Fatalf("arbiter saw discovered %v down %v", disc, down)
	}
	// Before the first verdict the replica routes its own view.
	if got := healthyIDs(s); !slices.Equal(got, []string{"http://a:1"}) {
		t.Fatalf("before a verdict: healthy %v", got)
	}
	s.ApplyVerdict([]string{"http://a:1", "http://b:1", "http://c:1"}, []string{"http://a:1"})
	if got := healthyIDs(s); !slices.Equal(got, []string{"http://b:1"}) {
		t.Fatalf("after the verdict: healthy %v", got)
	}
	if s.URL("http://c:1") != nil {
		t.Fatal("an endpoint only the verdict names is routable")
	}
	s.ApplyVerdict([]string{"http://b:1"}, nil)
	if got := healthyIDs(s); !slices.Equal(got, []string{"http://b:1"}) {
		t.Fatalf("a verdict without a: healthy %v", got)
	}
}

// TestSubscribersSeeEveryChangeInOrder: the dispatcher hands the latest
// snapshot to subscribers, never an older one after a newer one.
func TestSubscribersSeeEveryChangeInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestSet(t, fastHealth(), newFakeNet())
		var mu sync.Mutex
		var seen []uint64
		var last []string
		s.Subscribe(func(old, cur *Snapshot) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, cur.Gen)
			last = cur.IDs()
		})
		ctx, cancel := context.WithCancel(context.Background())
		go s.Dispatch(ctx)
		for i := range 20 {
			_ = s.SetSource("dns", []string{"http://a:1", "http://x" + string(rune('a'+i)) + ":1"})
		}
		if err := s.WaitDispatched(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if !slices.IsSorted(seen) || !slices.Equal(last, []string{"http://a:1", "http://xt:1"}) {
			t.Fatalf("generations %v, last %v", seen, last)
		}
		mu.Unlock()
		cancel()
	})
}
