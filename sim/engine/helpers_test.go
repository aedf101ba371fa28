package engine

import (
	"testing"
	"time"
)

// smallConfig is a toy engine: blocks of 4 tokens, n blocks.
func smallConfig(n int) Config {
	c := DefaultConfig()
	c.BlockSize, c.NumBlocks = 4, n
	return c
}

func newEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// seq returns tokens start, start+1, ..., start+n-1.
func seq(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

func req(id uint64, blockSize int, tokens []uint32, maxTokens int) *Request {
	return &Request{ID: id, Prompt: PromptOf(blockSize, tokens), MaxTokens: maxTokens}
}

func add(t *testing.T, e *Engine, r *Request, now time.Duration) {
	t.Helper()
	if err := e.Add(r, now); err != nil {
		t.Fatal(err)
	}
}

// drain runs steps back to back from now until the engine is idle and
// returns the end time and the number of steps.
func drain(t *testing.T, e *Engine, now time.Duration) (time.Duration, int) {
	t.Helper()
	steps := 0
	for e.Busy() {
		end, ok := e.Begin(now)
		if !ok {
			t.Fatalf("busy engine scheduled nothing at %v", now)
		}
		e.End(end)
		now = end
		steps++
		if steps > 1e6 {
			t.Fatal("engine does not drain")
		}
	}
	return now, steps
}

// step runs one step and returns its result.
func step(t *testing.T, e *Engine, now time.Duration) *StepResult {
	t.Helper()
	end, ok := e.Begin(now)
	if !ok {
		t.Fatalf("nothing to schedule at %v", now)
	}
	return e.End(end)
}

func secs(s int) time.Duration { return time.Duration(s) * time.Second }
