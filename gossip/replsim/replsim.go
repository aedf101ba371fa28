// Package replsim models R prefixring router replicas inside the fleet
// simulator (package sim): each replica is a real ring.Balancer with its own
// in-flight counters, and clients are spread over the replicas round-robin.
// Replica j publishes its counts every Interval (at phase j*Interval/R);
// the others receive a publication Latency later. What a replica's bound
// reads depends on View:
//
//   - gossip.ViewExact: its own exact live counts plus the others' last
//     received publications;
//   - gossip.ViewShared: its own last publication (seen the instant it
//     publishes) plus the others' last received publications;
//   - ViewShared with CapSlack > 0 (the hybrid): the shared view for the
//     walk, except that an endpoint whose exact view load exceeds
//     (1+CapSlack) times the exact view's bound reads as full.
//
// One replica alone reads its exact live counts in every view.
//
// With Gossip off, each replica sees only its own counts.
//
// Counts change only at arrivals (acquire) and completions (release); the
// picker learns the time at arrivals, so a publication due at t carries the
// counts as of the first arrival at or after t (completions in between
// included), and is delivered at t+Latency.
//
// At every keyed arrival the picker also asks every replica where the
// request would go, to measure decision agreement, and checks the choice
// against the true cluster-wide load, to measure overshoot of the bound.
package replsim

import (
	"errors"
	"math"
	"time"

	"github.com/prefixring/prefixring/gossip"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim"
)

// Config describes the replicas.
type Config struct {
	Replicas  int
	Endpoints []string
	Ring      ring.Config
	// Gossip on: replicas see each other's published counts.
	Gossip bool
	// Interval between two publications of one replica.
	Interval time.Duration
	// Latency from a publication to its receipt by the others.
	Latency time.Duration
	// View is what the bound reads; default gossip.ViewExact.
	View gossip.ViewMode
	// CapSlack > 0 (ViewShared only) adds the hybrid's local cap.
	CapSlack float64
}

// publication is one replica's counts in flight to the others.
type publication struct {
	at     time.Duration // delivery time
	from   int
	counts map[string]int64
	total  int64
}

// Picker implements sim.Picker over R replicas.
type Picker struct {
	cfg  Config
	bals []*ring.Balancer
	pub  []map[string]int64 // last publication of each replica, as it sees it
	pubT []int64
	rcv  []map[string]int64 // last publication of each replica the others received
	rcvT []int64
	sum  map[string]int64 // sum of rcv over replicas
	sumT int64
	wire []publication   // in flight, in delivery order
	next []time.Duration // next publication of each replica
	now  time.Duration
	turn int
	Measures
}

// Measures are what a run measured.
type Measures struct {
	// Keyed counts keyed requests; Agreed those every replica would have
	// sent to the same endpoint.
	Keyed, Agreed int
	// Over counts keyed requests sent to an endpoint whose true
	// cluster-wide load already exceeded the bound computed from the true
	// cluster-wide total, i.e. that a replica with a perfect view would
	// not have sent there; MaxExcess is the largest such excess.
	Over      int
	MaxExcess int64
}

// New builds the replicas over cfg.Endpoints.
func New(cfg Config) (*Picker, error) {
	if cfg.Replicas < 1 || (cfg.Gossip && cfg.Interval <= 0) || cfg.Latency < 0 || cfg.CapSlack < 0 {
		return nil, errors.New("replsim: need replicas >= 1, with gossip an interval, and no negative latency or slack")
	}
	if cfg.View == "" || !cfg.Gossip || cfg.Replicas == 1 {
		// Without gossip: own live counts only. Alone, a ViewShared
		// replica reads its live counts too, as gossip.ClusterLoads does.
		cfg.View = gossip.ViewExact
	}
	if _, err := gossip.ParseViewMode(string(cfg.View)); err != nil {
		return nil, err
	}
	p := &Picker{cfg: cfg, sum: map[string]int64{}}
	for i := range cfg.Replicas {
		b, err := ring.NewBalancer(cfg.Ring)
		if err != nil {
			return nil, err
		}
		if err := b.SetEndpoints(cfg.Endpoints); err != nil {
			return nil, err
		}
		b.SetLoads(&view{p: p, i: i})
		p.bals = append(p.bals, b)
		p.pub, p.rcv = append(p.pub, map[string]int64{}), append(p.rcv, map[string]int64{})
		p.pubT, p.rcvT = append(p.pubT, 0), append(p.rcvT, 0)
		p.next = append(p.next, time.Duration(i)*cfg.Interval/time.Duration(cfg.Replicas))
	}
	return p, nil
}

// Key wraps a key function to learn the virtual time: the simulator keys a
// request just before it acquires a lease for it.
func (p *Picker) Key(k sim.KeyFunc) sim.KeyFunc {
	return func(r *sim.Request) (uint64, bool) {
		p.now = r.Arrival
		return k(r)
	}
}

// Acquire publishes and delivers what is due, asks every replica for
// agreement, and acquires on the next replica in turn.
func (p *Picker) Acquire(req ring.Request) (ring.Lease, error) {
	p.advance()
	i := p.turn % len(p.bals)
	p.turn++
	lease, err := p.bals[i].Acquire(req)
	if err != nil || !req.Keyed {
		return lease, err
	}
	p.Keyed++
	if e := p.excess(lease.Endpoint); e > 0 {
		p.Over++
		p.MaxExcess = max(p.MaxExcess, e)
	}
	// The others decide on the state i decided on: i's new lease is
	// neither published nor (in ViewExact) counted by them.
	same := true
	for j, b := range p.bals {
		if j == i {
			continue
		}
		l, err := b.Acquire(req)
		if err == nil {
			l.Release()
		}
		if err != nil || l.Endpoint != lease.Endpoint {
			same = false
		}
	}
	if same {
		p.Agreed++
	}
	return lease, nil
}

// excess is how far the true cluster-wide load of id was above the true
// bound when the lease just acquired on it was placed.
func (p *Picker) excess(id string) int64 {
	var load, total int64
	for _, b := range p.bals {
		load += b.Inflight().Load(id)
		total += b.Inflight().Total()
	}
	load, total = load-1, total-1 // before the new lease
	return load - bound(p.cfg.Ring.LoadFactor, total, len(p.cfg.Endpoints))
}

// bound is ring.State.Bound with every endpoint healthy.
func bound(c float64, total int64, n int) int64 {
	return int64(math.Ceil(c * float64(total+1) / float64(n)))
}

// Agreement is the fraction of keyed requests on which every replica would
// have picked the same endpoint.
func (p *Picker) Agreement() float64 { return ratio(p.Agreed, p.Keyed, 1) }

// OverBound is the fraction of keyed requests placed above the true bound.
func (p *Picker) OverBound() float64 { return ratio(p.Over, p.Keyed, 0) }

func ratio(a, b int, empty float64) float64 {
	if b == 0 {
		return empty
	}
	return float64(a) / float64(b)
}

// advance applies, in time order, every publication and delivery due by now.
func (p *Picker) advance() {
	if !p.cfg.Gossip {
		return
	}
	for {
		j := 0
		for k := range p.next {
			if p.next[k] < p.next[j] {
				j = k
			}
		}
		if len(p.wire) > 0 && p.wire[0].at <= p.now && p.wire[0].at <= p.next[j] {
			p.deliver(p.wire[0])
			p.wire = p.wire[1:]
			continue
		}
		if p.next[j] > p.now {
			return
		}
		p.publish(j)
	}
}

// publish sends replica j's counts: j sees its publication at once, the
// others Latency later.
func (p *Picker) publish(j int) {
	at := p.next[j]
	p.next[j] += p.cfg.Interval
	pub := publication{at: at + p.cfg.Latency, from: j, counts: p.bals[j].Inflight().Counts(), total: p.bals[j].Inflight().Total()}
	p.pub[j], p.pubT[j] = pub.counts, pub.total
	if p.cfg.Latency == 0 {
		p.deliver(pub)
		return
	}
	p.wire = append(p.wire, pub)
}

func (p *Picker) deliver(pub publication) {
	j := pub.from
	for id, n := range p.rcv[j] {
		p.sum[id] -= n
	}
	for id, n := range pub.counts {
		p.sum[id] += n
	}
	p.sumT += pub.total - p.rcvT[j]
	p.rcv[j], p.rcvT[j] = pub.counts, pub.total
}

// view is replica i's loads.
type view struct {
	p *Picker
	i int
}

// exact is i's own live count plus the others' received publications.
func (v *view) exact(id string) int64 {
	p := v.p
	return p.bals[v.i].Inflight().Load(id) + p.sum[id] - p.rcv[v.i][id]
}

func (v *view) exactTotal() int64 {
	p := v.p
	return p.bals[v.i].Inflight().Total() + p.sumT - p.rcvT[v.i]
}

func (v *view) Load(id string) int64 {
	p := v.p
	if p.cfg.View == gossip.ViewExact {
		return v.exact(id)
	}
	shared := p.pub[v.i][id] + p.sum[id] - p.rcv[v.i][id]
	if p.cfg.CapSlack > 0 {
		limit := (1 + p.cfg.CapSlack) * float64(bound(p.cfg.Ring.LoadFactor, v.exactTotal(), len(p.cfg.Endpoints)))
		if float64(v.exact(id)) > limit {
			return math.MaxInt64 / 2 // full: the walk passes it by
		}
	}
	return shared
}

func (v *view) Total() int64 {
	p := v.p
	if p.cfg.View == gossip.ViewExact {
		return v.exactTotal()
	}
	return p.pubT[v.i] + p.sumT - p.rcvT[v.i]
}
