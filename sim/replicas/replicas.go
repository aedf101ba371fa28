// Package replicas models R prefixring router replicas inside the fleet
// simulator (package sim) with the production code: each replica is a real
// ring.Balancer whose bound reads a real core.ClusterLoads, fed by the
// gossip node's own view (core.View: core.Entry publications merged into
// its table and summed under the production liveness rule). Only the
// network is
// modelled: replica j publishes its entry every Interval (at phase
// j*Interval/R), sees it at once, and the others receive it Latency later.
// Clients are spread over the replicas round-robin.
//
// With Gossip off, each replica's bound reads only its own counters.
//
// Counts change only at arrivals (acquire) and completions (release); the
// picker learns the time at arrivals, so a publication due at t carries the
// counts as of the first arrival at or after t (completions in between
// included), and is delivered at t+Latency.
//
// Every ring.PacePublishEvery a replica's publication also carries its
// pace sums (ring.Pace.Sums), which its receivers pool with their own
// (ring.Pace.SetPeer), as the router's pace share does over gossip.
//
// At every keyed arrival the picker also asks every replica where the
// request would go, to measure decision agreement, and checks the choice
// against the true cluster-wide load, to measure overshoot of the bound.
package replicas

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/prefixring/prefixring/gossip"
	"github.com/prefixring/prefixring/gossip/core"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/workload"
)

// Config describes the replicas.
type Config struct {
	// KVCapacity is every endpoint's KV capacity in tokens as the
	// replicas know it (vllm:cache_config_info); 0: unknown.
	KVCapacity int64
	Replicas   int
	Endpoints  []string
	Ring       ring.Config
	// Gossip on: replicas see each other's published counts.
	Gossip bool
	// Interval between two publications of one replica.
	Interval time.Duration
	// Latency from a publication to its receipt by the others.
	Latency time.Duration
	// Loss is the probability that one publication is lost on its way to
	// one other replica (each receiver drawn apart, from a generator seeded
	// by Seed); 0: none lost. It is a whole publication's loss, every copy
	// of it: gossip sends each publication gossip.Config.Copies times (2),
	// so a publication loss of 20% stands for about 45% of datagrams lost
	// (0.45² ≈ 0.2), and 1% for 10%.
	Loss float64
	Seed uint64
	// View is what the bound reads; default: the production default,
	// gossip.DefaultConfig().View.
	View core.ViewMode
	// StaleAfter is the liveness rule's expiry; default the production
	// default, raised to 3 intervals for long intervals (production
	// requires it above the heartbeat, which is at least the interval).
	StaleAfter time.Duration
	// ApplyLag is how long after its stamp a publication applies in
	// core.ViewAligned; default the production default.
	ApplyLag time.Duration
	// Wrap, when set, returns the policy replica i runs over its
	// balancer (eval's chwbl-follow); nil: the balancer's own pick. The
	// agreement and false-spill measures still ask the balancers alone.
	Wrap func(i int, bal *ring.Balancer) Acquirer
}

// Acquirer is a replica's policy: policy.Picker.
type Acquirer interface {
	Acquire(ring.Request) (ring.Lease, error)
}

// epoch anchors virtual time to the wall-clock stamps entries carry.
var epoch = time.Unix(1_700_000_000, 0)

// replica is one router replica: the production balancer, view and state.
type replica struct {
	name  string
	bal   *ring.Balancer
	pick  Acquirer           // bal, or cfg.Wrap's policy over it
	loads *core.ClusterLoads // nil without gossip: the balancer reads its own counters
	view  *core.View         // entries received, its own included; nil without gossip
	ver   uint64
	next  time.Duration // its next publication
	// nextPace is when its next publication carries its pace sums, as
	// the router sends them every ring.PacePublishEvery.
	nextPace time.Duration
}

// delivery is one publication in flight to one replica.
type delivery struct {
	at    time.Duration
	to    int
	entry core.Entry
	pace  map[string]ring.PaceSums // the sender's pace sums; nil: none
}

// Picker implements policy.Picker over R replicas.
type Picker struct {
	cfg  Config
	reps []*replica
	bals []*ring.Balancer // the replicas' balancers, in order
	wire []delivery       // in delivery order
	now  time.Duration
	turn int
	rng  *rand.Rand // draws the publications lost (Config.Loss)
	Measures
}

// Measures are what a run measured.
type Measures struct {
	// Keyed counts keyed requests; Agreed those every replica would have
	// sent to the same endpoint.
	Keyed, Agreed int
	// Over counts keyed requests that left their endpoint holding more than
	// the bound computed from the true cluster-wide loads before the pick:
	// a replica with a perfect, instant view would not have placed them
	// there. MaxExcess is the largest such excess.
	Over      int
	MaxExcess int64
	// FalseSpills counts keyed requests that left their home, though the
	// home was within its bound by the true cluster-wide loads: spills a
	// replica with a perfect, instant view would not have made.
	FalseSpills int
	// Delivered and Lost count publications, one per receiver.
	Delivered, Lost int
}

// New builds the replicas over cfg.Endpoints.
func New(cfg Config) (*Picker, error) {
	if cfg.Replicas < 1 || (cfg.Gossip && cfg.Interval <= 0) || cfg.Latency < 0 || !(cfg.Loss >= 0 && cfg.Loss <= 1) {
		return nil, errors.New("replicas: need replicas >= 1, with gossip an interval, no negative latency, and a loss in [0, 1]")
	}
	d := gossip.DefaultConfig()
	if cfg.View == "" {
		cfg.View = d.View
	}
	if _, err := core.ParseViewMode(string(cfg.View)); err != nil {
		return nil, err
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = max(d.StaleAfter, 3*cfg.Interval)
	}
	if cfg.ApplyLag == 0 {
		cfg.ApplyLag = d.ApplyLag
	}
	p := &Picker{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x1055))}
	for i := range cfg.Replicas {
		b, err := ring.NewBalancer(cfg.Ring)
		if err != nil {
			return nil, err
		}
		eps := make([]ring.Endpoint, len(cfg.Endpoints))
		for i, id := range cfg.Endpoints {
			eps[i] = ring.Endpoint{ID: id, Healthy: true, KVCapacity: cfg.KVCapacity}
		}
		if err := b.Update(eps); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("replica-%d", i)
		r := &replica{name: name, bal: b, pick: b, next: time.Duration(i) * cfg.Interval / time.Duration(cfg.Replicas)}
		if cfg.Wrap != nil {
			r.pick = cfg.Wrap(i, b)
		}
		if cfg.Gossip {
			r.loads = core.NewClusterLoads(b.Inflight(), cfg.View)
			r.loads.SetMirrors(cfg.Replicas - 1) // every replica is a member from the start
			r.view = core.NewModeView(name, cfg.StaleAfter, cfg.ApplyLag, r.loads)
			b.SetLoads(r.loads)
			b.SetKVLoads(r.loads.KV(b.Inflight().KV()))
		}
		p.reps, p.bals = append(p.reps, r), append(p.bals, b)
	}
	return p, nil
}

// View returns the view mode the replicas' bounds read.
func (p *Picker) View() core.ViewMode { return p.cfg.View }

// Loads returns what replica i's bound reads.
func (p *Picker) Loads(i int) ring.Loads {
	if r := p.reps[i]; r.loads != nil {
		return r.loads
	}
	return p.reps[i].bal.Inflight()
}

// Key wraps a key function to learn the virtual time: the simulator keys a
// request just before it acquires a lease for it.
func (p *Picker) Key(k workload.KeyFunc) workload.KeyFunc {
	return func(r *workload.Request) (uint64, bool) {
		p.now = r.Arrival
		return k(r)
	}
}

// SetNow tells the replicas the virtual time of the next pick, for drivers
// that key requests without [Picker.Key] (closed-loop sessions).
func (p *Picker) SetNow(now time.Duration) { p.now = now }

// AdvanceTo runs the publications and deliveries due by now, for a driver
// to call before it applies an event at now (fleet.Config.Advance): a
// publication then carries the counts as they were at its tick, not the
// releases and settles that came after it. Without it a replica's tick is
// run at its next pick, with the counts of that moment, and the others see
// its finished requests early.
func (p *Picker) AdvanceTo(now time.Duration) {
	p.now = now
	p.advance()
}

// Acquire publishes and delivers what is due, asks every replica for
// agreement, and acquires on the next replica in turn.
func (p *Picker) Acquire(req ring.Request) (ring.Lease, error) {
	p.advance()
	i := p.turn % len(p.reps)
	p.turn++
	var trueP, trueKV ring.Loads
	if req.Keyed {
		trueP, trueKV = TrueLoads(p.bals)
	}
	lease, err := p.reps[i].pick.Acquire(req)
	if err != nil || !req.Keyed {
		return lease, err
	}
	p.Keyed++
	if lease.Decision != ring.DecisionHome {
		if _, d, err := p.reps[i].bal.DecideKV(req, trueP, trueKV); err == nil && d == ring.DecisionHome {
			p.FalseSpills++
		}
	}
	if e := p.excess(lease.Endpoint); e > 0 {
		p.Over++
		p.MaxExcess = max(p.MaxExcess, e)
	}
	// The others decide on the state i decided on: i's new lease is
	// neither published nor (in ViewExact) counted by them.
	same := true
	for j, r := range p.reps {
		if j == i {
			continue
		}
		if id, _, err := r.bal.Peek(req); err != nil || id != lease.Endpoint {
			same = false
		}
	}
	if same {
		p.Agreed++
	}
	return lease, nil
}

// excess is how far the true cluster-wide load of id, the lease just
// acquired on it included, is above the bound computed from the true loads
// before that lease.
func (p *Picker) excess(id string) int64 {
	var load, total int64
	for _, r := range p.reps {
		load += r.bal.Inflight().Load(id)
		total += r.bal.Inflight().Total()
	}
	b := ring.Bound{LoadFactor: p.cfg.Ring.LoadFactor, Min: p.cfg.Ring.MinBound}
	return load - b.Slots(total-1, len(p.cfg.Endpoints))
}

// TrueLoads returns the cluster-wide loads of the replicas whose
// balancers are bals, as a replica with a perfect, instant view would
// read them: P summed over their counters, and K summed but for each
// endpoint's shared parts, counted once (the largest replica's), as
// core.Remote sums published entries. False spills are judged by these:
// by P alone, a spill that a stale view of K caused (the small-KV fleet's)
// looked like a true one.
func TrueLoads(bals []*ring.Balancer) (p, kv ring.Loads) {
	tp, tk := sumLoads{byID: map[string]int64{}}, sumLoads{byID: map[string]int64{}}
	shared := map[string]int64{}
	for _, b := range bals {
		in := b.Inflight()
		for id, n := range in.Counts() {
			tp.byID[id] += n
			tp.total += n
		}
		sh := in.KVSharedCounts()
		for id, n := range in.KVCounts() {
			tk.byID[id] += n - sh[id]
			tk.total += n - sh[id]
		}
		for id, n := range sh {
			shared[id] = max(shared[id], n)
		}
	}
	for id, n := range shared {
		tk.byID[id] += n
		tk.total += n
	}
	return tp, tk
}

type sumLoads struct {
	byID  map[string]int64
	total int64
}

func (s sumLoads) Load(id string) int64 { return s.byID[id] }
func (s sumLoads) Total() int64         { return s.total }

// FalseSpillRate is the fraction of keyed requests spilled off a home that
// was within its bound by the true loads.
func (p *Picker) FalseSpillRate() float64 { return ratio(p.FalseSpills, p.Keyed, 0) }

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

// advance applies, in time order, every publication and delivery due by
// now, and in core.ViewAligned every publication a view holds that falls
// due by now (as gossip.Node's timer does); at one instant a view's due
// publications go first, then a delivery, then a publication.
func (p *Picker) advance() {
	if !p.cfg.Gossip {
		return
	}
	for {
		j := 0
		for k, r := range p.reps {
			if r.next < p.reps[j].next {
				j = k
			}
		}
		if k, due, ok := p.nextDue(); ok && due <= p.now && due <= p.reps[j].next && (len(p.wire) == 0 || due <= p.wire[0].at) {
			p.reps[k].view.Promote(epoch.Add(due))
			continue
		}
		if len(p.wire) > 0 && p.wire[0].at <= p.now && p.wire[0].at <= p.reps[j].next {
			p.deliver(p.wire[0])
			p.wire = p.wire[1:]
			continue
		}
		if p.reps[j].next > p.now {
			return
		}
		p.publish(j)
	}
}

// publish builds replica j's entry as gossip.Node does, publishes it in
// j's view at once, refreshes that view (as the node's publication tick
// does), and puts it on the wire to the others.
func (p *Picker) publish(j int) {
	r := p.reps[j]
	at := r.next
	r.next += p.cfg.Interval
	r.ver++
	e := core.NewEntryKV(r.name, r.name, 1, r.ver, epoch.Add(at), p.cfg.Endpoints, r.bal.Inflight().Counts(), r.bal.Inflight().KVCounts(), nil).
		WithKVShared(r.bal.Inflight().KVSharedCounts())
	r.view.Publish(e)
	r.view.Refresh(epoch.Add(at), nil)
	var ps map[string]ring.PaceSums
	if at >= r.nextPace { // as the router's pace share sends them
		ps = r.bal.Pace().Sums(epoch.Add(at))
		r.nextPace = at + ring.PacePublishEvery
	}
	for k := range p.reps {
		if k == j {
			continue
		}
		if p.cfg.Loss > 0 && p.rng.Float64() < p.cfg.Loss {
			p.Lost++
			continue
		}
		p.Delivered++
		d := delivery{at: at + p.cfg.Latency, to: k, entry: e, pace: ps}
		if p.cfg.Latency == 0 {
			p.deliver(d)
			continue
		}
		p.wire = append(p.wire, d)
	}
}

// nextDue returns the replica whose view holds the publication due first,
// and when (core.ViewAligned); false: none is held.
func (p *Picker) nextDue() (k int, due time.Duration, ok bool) {
	for i, r := range p.reps {
		if at, held := r.view.NextDue(); held && (!ok || at.Sub(epoch) < due) {
			k, due, ok = i, at.Sub(epoch), true
		}
	}
	return k, due, ok
}

// deliver merges a publication into its receiver's view, as
// gossip.Node's receive does, then rebuilds the sum at the delivery's time,
// so an entry that went stale meanwhile stops counting at once.
func (p *Picker) deliver(d delivery) {
	r := p.reps[d.to]
	if d.pace != nil {
		r.bal.Pace().SetPeer(d.entry.Node, d.pace, epoch.Add(d.at))
	}
	if changed, _ := r.view.Receive(epoch.Add(d.at), d.entry); len(changed) > 0 {
		r.view.Refresh(epoch.Add(d.at), nil)
	}
}
