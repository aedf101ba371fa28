package engine

import (
	"errors"
	"time"
)

// Engine is one simulated vLLM server. It is not safe for concurrent use.
type Engine struct {
	cfg     Config
	kv      *kvCache
	waiting []*Request // FIFO; preempted requests go back to the front
	running []*Request // admission order; preemption takes from the back
	batch   []*Request // scheduled in the step in flight
	inStep  bool
	res     StepResult
	hits    []int32
}

// ErrStepInFlight reports Begin called twice without End.
var ErrStepInFlight = errors.New("engine: a step is already in flight")

// New returns an idle engine.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, kv: newKVCache(cfg.Blocks())}, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Add queues a request that arrived at now.
func (e *Engine) Add(r *Request, now time.Duration) error {
	switch {
	case r.Prompt.Len <= 0 || r.MaxTokens <= 0:
		return errors.New("engine: a request needs a prompt and MaxTokens >= 1")
	case len(r.Prompt.Blocks) < r.Prompt.Len/e.cfg.BlockSize:
		return errors.New("engine: prompt blocks do not match its length and the block size")
	case !e.cfg.Holds(r.Prompt.Len, r.MaxTokens):
		return ErrTooLong
	}
	r.Arrival = now
	e.waiting = append(e.waiting, r)
	return nil
}

// Abort withdraws a request (its client went away). Its blocks are released
// at the next Begin or End; it produces no further events.
func (e *Engine) Abort(r *Request) { r.aborted = true }

// Busy reports whether any request is waiting or running.
func (e *Engine) Busy() bool { return len(e.waiting)+len(e.running) > 0 }

// Running, Waiting and KVUsage are the scheduler's gauges.
func (e *Engine) Running() int { return len(e.running) }

// Waiting is the number of queued requests.
func (e *Engine) Waiting() int { return len(e.waiting) }

// KVUsage is the fraction of KV blocks in use (0..1).
func (e *Engine) KVUsage() float64 { return e.kv.usage() }

// dropAborted releases aborted requests and removes them from both queues.
func (e *Engine) dropAborted() {
	keep := func(q []*Request) []*Request {
		out := q[:0]
		for _, r := range q {
			if r.aborted {
				e.kv.release(r.blocks)
				r.blocks, r.running, r.Done = r.blocks[:0], false, true
				continue
			}
			out = append(out, r)
		}
		clear(q[len(out):])
		return out
	}
	e.running = keep(e.running)
	e.waiting = keep(e.waiting)
}
