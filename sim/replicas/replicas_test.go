package replicas

import (
	"github.com/prefixring/prefixring/gossip/core"
	"testing"
	"time"

	"github.com/prefixring/prefixring/gossip"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/fleet"
	"github.com/prefixring/prefixring/sim/workload"
)

// TestPublishedCountsReachOthers: after an interval, replica 1 sees
// replica 0's leases; without gossip it never does.
func TestPublishedCountsReachOthers(t *testing.T) {
	for _, gossip := range []bool{true, false} {
		p, err := New(Config{Replicas: 2, Endpoints: fleet.EndpointIDs(4), Ring: requests(), Gossip: gossip, Interval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		key := p.Key(func(*workload.Request) (uint64, bool) { return 7, true })
		at := func(d time.Duration) { key(&workload.Request{Arrival: d}) }
		at(0)
		l, _ := p.Acquire(ring.Request{Key: 7, Keyed: true}) // replica 0
		at(150 * time.Millisecond)
		l2, _ := p.Acquire(ring.Request{Key: 8, Keyed: true}) // replica 1, publishes first
		want := int64(0)
		if gossip {
			want = 1
		}
		if got := p.Loads(1).Load(l.Endpoint) - p.reps[1].bal.Inflight().Load(l.Endpoint); got != want {
			t.Fatalf("gossip=%v: replica 1 sees %d of replica 0's leases, want %d", gossip, got, want)
		}
		if p.Agreement() != 1 {
			t.Fatalf("agreement %v with idle endpoints", p.Agreement())
		}
		l.Release()
		l2.Release()
	}
}

// TestSharedViewDelivery: once the replicas have heard from each other, in
// ViewShared replica 0's lease is invisible to everyone until it publishes;
// then replica 0 sees it at once and replica 1 Latency later. In ViewExact
// replica 0 sees it at once.
func TestSharedViewDelivery(t *testing.T) {
	const lat = time.Millisecond
	for _, mode := range []core.ViewMode{core.ViewShared, core.ViewExact} {
		p, err := New(Config{Replicas: 2, Endpoints: fleet.EndpointIDs(4), Ring: requests(), Gossip: true,
			Interval: 100 * time.Millisecond, Latency: lat, View: mode})
		if err != nil {
			t.Fatal(err)
		}
		at := func(d time.Duration) { p.now = d; p.advance() }
		at(60 * time.Millisecond) // both published (at 0 and 50 ms) and delivered
		l, _ := p.reps[0].bal.Acquire(ring.Request{Key: 7, Keyed: true})
		seen := func() (int64, int64) { return p.Loads(0).Load(l.Endpoint), p.Loads(1).Load(l.Endpoint) }
		want0 := map[core.ViewMode]int64{core.ViewShared: 0, core.ViewExact: 1}[mode]
		if a, b := seen(); a != want0 || b != 0 {
			t.Fatalf("%s before publication: replica 0 sees %d, 1 sees %d", mode, a, b)
		}
		at(100 * time.Millisecond) // replica 0 publishes
		if a, b := seen(); a != 1 || b != 0 {
			t.Fatalf("%s in flight: replica 0 sees %d, 1 sees %d", mode, a, b)
		}
		at(100*time.Millisecond + lat)
		if a, b := seen(); a != 1 || b != 1 {
			t.Fatalf("%s delivered: replica 0 sees %d, 1 sees %d", mode, a, b)
		}
		l.Release()
	}
}

// TestSharedViewAgreesWithoutLatency: with instant delivery every replica
// reads the same numbers in ViewShared, so all decisions agree.
func TestSharedViewAgreesWithoutLatency(t *testing.T) {
	p, err := New(Config{Replicas: 3, Endpoints: fleet.EndpointIDs(4), Ring: requests(), Gossip: true,
		Interval: 100 * time.Millisecond, View: core.ViewShared})
	if err != nil {
		t.Fatal(err)
	}
	hotKeys(t, p, 0)
	if p.Agreement() != 1 || p.Keyed != 400 {
		t.Fatalf("agreement %v over %d", p.Agreement(), p.Keyed)
	}
	if p.Over == 0 {
		t.Fatal("hot keys never overshot the true bound in the shared view")
	}
}

// TestAlignedViewAgreesWithLatency: with 30 ms of latency the shared view
// disagrees on some decisions; the aligned view, which applies every
// publication (the own included) at its stamp plus the 50 ms lag, agrees on
// all, and the replicas see a publication at its stamp plus the lag.
func TestAlignedViewAgreesWithLatency(t *testing.T) {
	for _, mode := range []core.ViewMode{core.ViewShared, core.ViewAligned} {
		p, err := New(Config{Replicas: 3, Endpoints: fleet.EndpointIDs(4), Ring: requests(), Gossip: true,
			Interval: 100 * time.Millisecond, Latency: 30 * time.Millisecond, ApplyLag: 50 * time.Millisecond, View: mode})
		if err != nil {
			t.Fatal(err)
		}
		held := hotKeys(t, p, time.Second)
		if agreed := p.Agreement(); (mode == core.ViewAligned) != (agreed == 1) {
			t.Errorf("%s: agreement %v over %d", mode, agreed, p.Keyed)
		}
		p.AdvanceTo(3850 * time.Millisecond)
		for _, l := range held {
			l.Release()
		}
		// Replica 0 publishes at 3.9 s (every 100 ms from 0): its
		// releases count from 3.95 s, at every replica.
		p.AdvanceTo(3949 * time.Millisecond)
		before := p.Loads(1).Total()
		p.AdvanceTo(3950 * time.Millisecond)
		if mode == core.ViewAligned && (before == p.Loads(1).Total() || p.Loads(0).Total() != p.Loads(1).Total()) {
			t.Errorf("aligned: replica 1 reads a total of %d before 3.95 s and %d at it, replica 0 %d", before, p.Loads(1).Total(), p.Loads(0).Total())
		}
	}
}

// TestDefaultViewIsProductionDefault: a Config that names no view models
// what `prefixring serve` runs, the production default.
func TestDefaultViewIsProductionDefault(t *testing.T) {
	p, err := New(Config{Replicas: 3, Endpoints: fleet.EndpointIDs(4), Ring: requests(), Gossip: true,
		Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.View(), gossip.DefaultConfig().View; got != want {
		t.Fatalf("default view %q, production default %q", got, want)
	}
}

// TestNoPeerYetReadsLiveCounts: in the shared view, a replica that has
// heard from no peer yet reads its own live counts, as core.ClusterLoads
// does (nobody to agree with): its lease is visible to it before it
// publishes.
func TestNoPeerYetReadsLiveCounts(t *testing.T) {
	p, err := New(Config{Replicas: 2, Endpoints: fleet.EndpointIDs(4), Ring: requests(), Gossip: true,
		Interval: 100 * time.Millisecond, Latency: time.Millisecond, View: core.ViewShared})
	if err != nil {
		t.Fatal(err)
	}
	l, err := p.Acquire(ring.Request{Key: 7, Keyed: true}) // replica 0 at t=0, nothing delivered yet
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if got := p.Loads(0).Load(l.Endpoint); got != 1 {
		t.Fatalf("replica 0 reads %d on %s before any peer counts, want its live 1", got, l.Endpoint)
	}
}

// requests is the ring counting requests: these tests follow CHWBL's
// own unit through the view.
func requests() ring.Config {
	c := ring.DefaultConfig()
	c.Signal, c.MinBound = ring.SignalRequests, ring.DefaultMinRequests
	return c
}

// TestPublicationCarriesTheCountsOfItsTick: a release after a replica's
// tick reaches the others at its next tick, not with the tick before it,
// when the driver advances the clock before each event (AdvanceTo); run
// late, at the next pick, the tick would carry the release early.
func TestPublicationCarriesTheCountsOfItsTick(t *testing.T) {
	for _, advance := range []bool{true, false} {
		p, err := New(Config{Replicas: 2, Endpoints: fleet.EndpointIDs(4), Ring: requests(), Gossip: true,
			Interval: 100 * time.Millisecond, View: core.ViewShared})
		if err != nil {
			t.Fatal(err)
		}
		p.AdvanceTo(60 * time.Millisecond) // both published (at 0 and 50 ms)
		l, _ := p.reps[0].bal.Acquire(ring.Request{Key: 7, Keyed: true})
		if advance {
			p.AdvanceTo(130 * time.Millisecond) // replica 0's tick at 100 ms publishes the lease
		}
		l.Release() // at 130 ms
		p.AdvanceTo(140 * time.Millisecond)
		want := int64(0) // the tick ran at 140 ms, after the release
		if advance {
			want = 1
		}
		if got := p.Loads(1).Load(l.Endpoint); got != want {
			t.Fatalf("advance=%v: at 140 ms replica 1 sees %d on the released endpoint, want %d", advance, got, want)
		}
		p.AdvanceTo(210 * time.Millisecond) // replica 0's tick at 200 ms
		if got := p.Loads(1).Load(l.Endpoint); got != 0 {
			t.Fatalf("advance=%v: after the next tick replica 1 sees %d, want 0", advance, got)
		}
	}
}

// TestLossDropsPublications: with Loss 1 replica 1 never hears of replica
// 0's lease; with Loss 0.5 about half the publications are lost, the same
// ones under one seed; Loss outside [0, 1] is refused.
func TestLossDropsPublications(t *testing.T) {
	run := func(loss float64, seed uint64) (seen int64, m Measures) {
		p, err := New(Config{Replicas: 2, Endpoints: fleet.EndpointIDs(4), Ring: requests(), Gossip: true,
			Interval: 10 * time.Millisecond, Latency: time.Millisecond, Loss: loss, Seed: seed, View: core.ViewShared})
		if err != nil {
			t.Fatal(err)
		}
		l, _ := p.reps[0].bal.Acquire(ring.Request{Key: 7, Keyed: true})
		defer l.Release()
		p.AdvanceTo(400 * time.Millisecond)
		return p.Loads(1).Load(l.Endpoint), p.Measures
	}
	if seen, m := run(0, 1); seen != 1 || m.Lost != 0 || m.Delivered < 70 {
		t.Fatalf("loss 0: replica 1 sees %d, %d delivered, %d lost", seen, m.Delivered, m.Lost)
	}
	if seen, m := run(1, 1); seen != 0 || m.Delivered != 0 || m.Lost < 70 {
		t.Fatalf("loss 1: replica 1 sees %d, %d delivered, %d lost", seen, m.Delivered, m.Lost)
	}
	_, a := run(0.5, 3)
	_, b := run(0.5, 3)
	if frac := float64(a.Lost) / float64(a.Lost+a.Delivered); frac < 0.3 || frac > 0.7 {
		t.Fatalf("loss 0.5: %d lost, %d delivered", a.Lost, a.Delivered)
	}
	if a != b {
		t.Fatalf("one seed, two runs: %+v, %+v", a, b)
	}
	for _, loss := range []float64{-0.1, 1.1} {
		if _, err := New(Config{Replicas: 2, Endpoints: fleet.EndpointIDs(4), Ring: requests(), Gossip: true, Interval: time.Second, Loss: loss}); err == nil {
			t.Errorf("loss %v accepted", loss)
		}
	}
}

// hotKeys places 400 requests on 5 hot keys from start on, 7 ms apart,
// releasing one every third (enough to spill), and returns those it holds.
func hotKeys(t *testing.T, p *Picker, start time.Duration) []ring.Lease {
	t.Helper()
	var held []ring.Lease
	for k := range 400 {
		p.now = start + time.Duration(k)*7*time.Millisecond
		l, err := p.Acquire(ring.Request{Key: uint64(k % 5), Keyed: true})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		if k%3 == 0 {
			held[0].Release()
			held = held[1:]
		}
	}
	return held
}

// TestFalseSpillReadsTrueKV: replica 1 spills a request off its home
// because its view still holds K that replica 0 has released there; by
// the true cluster-wide loads (P and K) the home had room, so the spill
// is a false one.
func TestFalseSpillReadsTrueKV(t *testing.T) {
	p, err := New(Config{Replicas: 2, Endpoints: fleet.EndpointIDs(4), Ring: ring.DefaultConfig(), Gossip: true,
		KVCapacity: 1000, Interval: 100 * time.Millisecond, Latency: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p.AdvanceTo(60 * time.Millisecond) // both published (at 0 and 50 ms) and delivered
	big, err := p.reps[0].bal.Acquire(ring.Request{Key: 7, Keyed: true, Tokens: 800})
	if err != nil {
		t.Fatal(err)
	}
	p.AdvanceTo(120 * time.Millisecond) // replica 0 published its 800 tokens of K at 100 ms
	big.Release()
	p.now, p.turn = 130*time.Millisecond, 1 // replica 1 picks next; replica 0 publishes again at 200 ms
	l, err := p.Acquire(ring.Request{Key: 7, Keyed: true, Tokens: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l.Decision == ring.DecisionHome {
		t.Fatalf("replica 1 kept %s home: its view should hold the released K", l.Endpoint)
	}
	if p.FalseSpills != 1 {
		t.Fatalf("%d false spills, want 1: nothing is in flight, so the home had room", p.FalseSpills)
	}
}
