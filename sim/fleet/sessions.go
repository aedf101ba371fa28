package fleet

import (
	"cmp"
	"container/heap"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/workload"
)

// CallKey turns a rendered request, arriving at at, into what the picker
// sees, as the router would: the production keyer on its JSON body.
type CallKey func(c *workload.Call, at time.Duration) ring.Request

// pendingTurn is a session's next request, due at at.
type pendingTurn struct {
	at         time.Duration
	session, k int
}

type turnHeap []pendingTurn

func (h turnHeap) Len() int { return len(h) }
func (h turnHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].session < h[j].session
}
func (h turnHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *turnHeap) Push(x any)   { *h = append(*h, x.(pendingTurn)) }
func (h *turnHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// RunSessions plays sessions in closed loop: a session's first turn arrives
// at its Start; each later turn arrives its Think after the previous turn's
// answer, and carries the whole history, the simulated engine's answers
// included (workload.SimAnswerScaled), rendered as the engine sees it and keyed
// by key on the request's JSON body. A turn whose request was rejected
// ends its session. Records are in arrival order, with Session and Turn
// set, beside the requests as the engines got them; cfg.Key is not used.
// With cfg.Concurrency, sessions start as slots free instead of at Start.
// A streamed session's leases settle at each request's first token, the
// others' at completion (Session.Stream); each session's text is tokenized
// at its TokenScale.
func RunSessions(cfg Config, sessions []workload.Session, key CallKey) (*Result, []workload.Request, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	n := 0
	for _, s := range sessions {
		n += len(s.Turns)
	}
	f, err := newFleet(cfg, n)
	if err != nil {
		return nil, nil, err
	}
	answers := make([][]string, len(sessions))
	h := &turnHeap{}
	started := 0 // sessions started, in order (closed loop: cfg.Concurrency)
	start := func(at time.Duration) {
		for started < len(sessions) && len(sessions[started].Turns) == 0 {
			started++
		}
		if started < len(sessions) {
			heap.Push(h, pendingTurn{at: at, session: started})
			started++
		}
	}
	for i, s := range sessions {
		if cfg.Concurrency > 0 {
			if i < cfg.Concurrency {
				start(0)
			}
		} else if len(s.Turns) > 0 {
			heap.Push(h, pendingTurn{at: s.Start, session: i})
		}
	}
	ended := func(at time.Duration) {
		if cfg.Concurrency > 0 {
			start(at)
		}
	}
	reqs := make([]workload.Request, n)
	next := 0
	for {
		ei, end := f.nextStepEnd()
		if h.Len() > 0 && (ei < 0 || (*h)[0].at <= end) {
			p := heap.Pop(h).(pendingTurn)
			s := &sessions[p.session]
			c := s.Call(p.k, answers[p.session])
			if t := &s.Turns[p.k]; s.Trace {
				// A trace's prompt is its blocks: equal ids, equal tokens
				// (the text the keyer reads renders the same ids).
				reqs[next] = workload.Request{Arrival: p.at, InputLen: t.InputLen, OutputLen: c.MaxTokens, HashIDs: t.Blocks}
			} else {
				text, scale := c.EngineText(), engine.CharsPerToken*cmp.Or(s.TokenScale, 1)
				toks := engine.TokenizeScaled(text, scale)
				joint := engine.TokenizeScaled(text+workload.SimAnswerScaled(c.MaxTokens, s.TokenScale), scale)
				reqs[next] = workload.Request{Arrival: p.at, InputLen: len(toks), OutputLen: c.MaxTokens, Tokens: toks, Joint: joint}
			}
			rr := ring.Request{Tokens: int64(reqs[next].InputLen)}
			if key != nil {
				rr = key(&c, p.at)
			}
			f.hold[next] = !s.Stream
			f.arriveAs(next, &reqs[next], rr)
			f.records[next].Session, f.records[next].Turn = p.session, p.k
			if f.records[next].Err != "" {
				ended(p.at) // a rejected turn ends its session, as a client's would
			}
			next++
			continue
		}
		if ei < 0 {
			break
		}
		f.finished = f.finished[:0]
		f.endStep(ei, end)
		for _, i := range f.finished {
			rec := &f.records[i]
			s := &sessions[rec.Session]
			answers[rec.Session] = append(answers[rec.Session], workload.SimAnswerScaled(rec.OutputTokens, s.TokenScale))
			if k := rec.Turn + 1; k < len(s.Turns) {
				heap.Push(h, pendingTurn{at: f.now + s.Turns[k].Think, session: rec.Session, k: k})
			} else {
				ended(f.now)
			}
		}
	}
	return &Result{Records: f.records[:next], End: f.now, Steps: f.steps}, reqs[:next], nil
}
