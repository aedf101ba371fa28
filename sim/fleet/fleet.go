package fleet

import (
	"github.com/prefixring/prefixring/sim/workload"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/engine"
)

type fleetEngine struct {
	e      *engine.Engine
	inStep bool
	end    time.Duration
}

// fleet is the state of one run: engines, leases and records.
type fleet struct {
	cfg     Config
	engines []fleetEngine
	ids     []string // engine i's name, Config.IDs
	index   map[string]int
	leases  []ring.Lease
	records []Record
	chain   *engine.Chain
	now     time.Duration
	steps   int
	// finished collects the requests that finished, for a driver that
	// reacts to completions (RunSessions); nil-safe to ignore.
	finished []int
	gauges   []Gauges
	// hold marks the requests not streamed: their leases settle at
	// completion (Release), not at the first token.
	hold []bool
}

// epoch is the wall time the fleet's virtual time starts at, for what
// reads times of day (a lease's first token: ring.Pace).
var epoch = time.Unix(1_700_000_000, 0)

func newFleet(cfg Config, n int) (*fleet, error) {
	f := &fleet{
		cfg:     cfg,
		engines: make([]fleetEngine, cfg.Engines),
		index:   map[string]int{},
		leases:  make([]ring.Lease, n),
		records: make([]Record, n),
		hold:    make([]bool, n),
		chain:   engine.NewChain(cfg.Engine.BlockSize),
		ids:     cfg.IDs(),
	}
	for i, id := range f.ids {
		ec := cfg.Engine
		if s, ok := cfg.Slowdown[i]; ok {
			ec.Slowdown = s
		}
		e, err := engine.New(ec)
		if err != nil {
			return nil, err
		}
		f.engines[i].e = e
		f.index[id] = i
	}
	return f, nil
}

// nextStepEnd returns the engine whose step ends first, or -1.
func (f *fleet) nextStepEnd() (int, time.Duration) {
	best, end := -1, time.Duration(0)
	for i := range f.engines {
		if fe := &f.engines[i]; fe.inStep && (best < 0 || fe.end < end) {
			best, end = i, fe.end
		}
	}
	return best, end
}

// arrive routes request i and queues it on its engine.
func (f *fleet) arrive(i int, r *workload.Request) {
	rr := ring.Request{Tokens: int64(r.InputLen)}
	if f.cfg.Key != nil {
		rr.Key, rr.Keyed = f.cfg.Key(r)
	}
	f.arriveAs(i, r, rr)
}

// arriveAs routes request i as rr says and queues it on its engine.
func (f *fleet) arriveAs(i int, r *workload.Request, rr ring.Request) {
	f.now = r.Arrival
	if f.cfg.Observe != nil {
		f.gauges = f.gauges[:0]
		for i, id := range f.ids { // in order: not the index's map order, which changes from run to run
			e := f.engines[i].e
			f.gauges = append(f.gauges, Gauges{ID: id, Waiting: e.Waiting(), Running: e.Running(), KVUsage: e.KVUsage()})
		}
		f.cfg.Observe(f.now, f.gauges)
	}
	rec := &f.records[i]
	*rec = Record{Index: i, Arrival: r.Arrival, PromptTokens: r.InputLen, Session: -1, Keyed: rr.Keyed}
	lease, err := f.cfg.Picker.Acquire(rr)
	if err != nil {
		rec.Err = err.Error()
		return
	}
	rec.Endpoint, rec.Decision = lease.Endpoint, lease.Decision.String()
	ei, ok := f.index[lease.Endpoint]
	if !ok {
		lease.Release()
		rec.Err = "sim: picker chose unknown endpoint " + lease.Endpoint
		return
	}
	er := &engine.Request{ID: uint64(i), Prompt: r.EnginePrompt(f.chain), MaxTokens: r.OutputLen}
	fe := &f.engines[ei]
	if err := fe.e.Add(er, f.now); err != nil {
		lease.Release()
		rec.Err = err.Error()
		return
	}
	f.leases[i] = lease
	lease.Sent(epoch.Add(f.now))
	if !fe.inStep {
		f.begin(fe)
	}
}

func (f *fleet) begin(fe *fleetEngine) {
	fe.end, fe.inStep = fe.e.Begin(f.now)
}

// endStep applies engine ei's step and starts its next one.
func (f *fleet) endStep(ei int, end time.Duration) {
	if f.cfg.Advance != nil {
		f.cfg.Advance(end)
	}
	f.now = end
	f.steps++
	fe := &f.engines[ei]
	res := fe.e.End(end)
	fe.inStep = false
	for _, er := range res.Tokens {
		if er.Output == 1 && !f.hold[er.ID] { // its prefill is over: the router sees the first byte
			l := f.leases[er.ID]
			l.Settle()
			l.FirstToken(er.TTFT(), epoch.Add(end)) // a streamed answer: its first byte is its first token
		}
	}
	for _, er := range res.Finished {
		i := int(er.ID)
		f.finished = append(f.finished, i)
		rec := &f.records[i]
		rec.QueueDelay, rec.TTFT, rec.E2E = er.QueueDelay(), er.TTFT(), er.E2E()
		rec.OutputTokens, rec.CachedTokens = er.Output, er.CachedTokens
		rec.PrefillComputed, rec.Preemptions = er.PrefillComputed, er.Preemptions
		er.Prompt.Blocks = nil
		if f.hold[i] { // not streamed: its first byte is its whole answer
			f.leases[i].WholeAnswer(er.E2E(), epoch.Add(end))
		}
		f.leases[i].Release()
	}
	f.begin(fe)
}
