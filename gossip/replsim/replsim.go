// Package replsim models R prefixring router replicas inside the fleet
// simulator (package sim): each replica is a real ring.Balancer with its own
// in-flight counters, clients are spread over the replicas round-robin, and
// each replica's bound reads its own exact counts plus the counts the
// others last published, as the gossip layer delivers them: replica j
// publishes every Interval (at phase j*Interval/R) and every replica sees a
// publication at once (delivery takes well under a millisecond on a LAN).
// With Gossip off, each replica sees only its own counts.
//
// At every keyed arrival the picker also asks every replica where the
// request would go, to measure decision agreement.
package replsim

import (
	"errors"
	"time"

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
}

// Picker implements sim.Picker over R replicas.
type Picker struct {
	cfg   Config
	bals  []*ring.Balancer
	pub   []map[string]int64 // last published counts of each replica
	pubT  []int64            // their totals
	sum   map[string]int64   // sum of pub over replicas
	sumT  int64
	next  []time.Duration // next publication of each replica
	now   time.Duration
	turn  int
	keyed int
	agree int
}

// New builds the replicas over cfg.Endpoints.
func New(cfg Config) (*Picker, error) {
	if cfg.Replicas < 1 || (cfg.Gossip && cfg.Interval <= 0) {
		return nil, errors.New("replsim: need replicas >= 1 and, with gossip, an interval")
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
		p.pub = append(p.pub, map[string]int64{})
		p.pubT = append(p.pubT, 0)
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

// Acquire publishes what is due, asks every replica for agreement, and
// acquires on the next replica in turn.
func (p *Picker) Acquire(req ring.Request) (ring.Lease, error) {
	p.publish()
	i := p.turn % len(p.bals)
	p.turn++
	lease, err := p.bals[i].Acquire(req)
	if err != nil || !req.Keyed {
		return lease, err
	}
	// i chose before counting the lease, and the others have not seen it
	// yet: all of them decide on the same moment's state.
	p.keyed++
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
		p.agree++
	}
	return lease, nil
}

// Agreement is the fraction of keyed requests on which every replica would
// have picked the same endpoint.
func (p *Picker) Agreement() float64 {
	if p.keyed == 0 {
		return 1
	}
	return float64(p.agree) / float64(p.keyed)
}

func (p *Picker) publish() {
	if !p.cfg.Gossip {
		return
	}
	for j := range p.bals {
		if p.now < p.next[j] {
			continue
		}
		steps := (p.now-p.next[j])/p.cfg.Interval + 1
		p.next[j] += steps * p.cfg.Interval
		counts := p.bals[j].Inflight().Counts()
		for id, n := range p.pub[j] {
			p.sum[id] -= n
		}
		for id, n := range counts {
			p.sum[id] += n
		}
		p.sumT += p.bals[j].Inflight().Total() - p.pubT[j]
		p.pub[j], p.pubT[j] = counts, p.bals[j].Inflight().Total()
	}
}

// view is replica i's loads: its own live counts plus the others' last
// publications.
type view struct {
	p *Picker
	i int
}

func (v *view) Load(id string) int64 {
	own := v.p.bals[v.i].Inflight()
	return own.Load(id) + v.p.sum[id] - v.p.pub[v.i][id]
}

func (v *view) Total() int64 {
	own := v.p.bals[v.i].Inflight()
	return own.Total() + v.p.sumT - v.p.pubT[v.i]
}
