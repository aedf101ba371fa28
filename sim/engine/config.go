package engine

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config is one engine's configuration.
type Config struct {
	// Profile prices steps and, when NumBlocks is 0, sizes the KV cache.
	Profile Profile
	// BlockSize is the KV block size in tokens (vLLM default 16).
	BlockSize int
	// NumBlocks is the KV cache capacity in blocks; 0 derives it from Profile.
	NumBlocks int
	// MaxNumSeqs caps the running batch (vLLM --max-num-seqs; default 1024,
	// vLLM's V1 default for the OpenAI server on >=70 GiB GPUs).
	MaxNumSeqs int
	// MaxNumBatchedTokens caps the tokens computed per step (vLLM
	// --max-num-batched-tokens; default 8192, same source).
	MaxNumBatchedTokens int
	// MaxModelLen caps prompt plus output tokens (Llama 3.1: 131072).
	MaxModelLen int
	// Slowdown multiplies every step time (0 or 1: the profile's): an
	// engine this many times slower than its profile, as a degraded GPU or
	// one shared with a noisy neighbour is, for a study of routing around
	// it. It must be 0 or at least 1.
	Slowdown float64
}

// DefaultConfig is Llama-3.1-8B on one H100 with vLLM's V1 defaults.
func DefaultConfig() Config {
	return Config{
		Profile:             Llama31_8B_H100(),
		BlockSize:           16,
		MaxNumSeqs:          1024,
		MaxNumBatchedTokens: 8192,
		MaxModelLen:         131072,
	}
}

// Holds reports whether an engine of this configuration takes a request
// of prompt tokens and at most maxTokens out: the two fit in the model's
// context and in the KV cache. [Engine.Add] refuses any other with
// [ErrTooLong].
func (c Config) Holds(prompt, maxTokens int) bool {
	total := prompt + maxTokens
	return total <= c.MaxModelLen && (total+c.BlockSize-1)/c.BlockSize <= c.Blocks()
}

// Blocks is the KV capacity in blocks: NumBlocks, or the profile's.
func (c Config) Blocks() int {
	if c.NumBlocks > 0 {
		return c.NumBlocks
	}
	return c.Profile.KVBlocks(c.BlockSize)
}

// StepTime is the duration of a step of this engine: the profile's, times
// Slowdown.
func (c Config) StepTime(b Batch) time.Duration {
	d := c.Profile.StepTime(b)
	if c.Slowdown > 1 {
		d = time.Duration(float64(d) * c.Slowdown)
	}
	return d
}

// Validate reports a configuration the engine cannot run.
func (c Config) Validate() error {
	if err := c.Profile.Validate(); err != nil {
		return err
	}
	switch {
	case c.BlockSize <= 0:
		return errors.New("engine: BlockSize must be positive")
	case c.NumBlocks < 0:
		return errors.New("engine: NumBlocks must not be negative")
	case c.Blocks() <= 0:
		return fmt.Errorf("engine: profile %q leaves no memory for the KV cache", c.Profile.Name)
	case c.MaxNumSeqs <= 0:
		return errors.New("engine: MaxNumSeqs must be positive")
	case c.MaxNumBatchedTokens <= 0:
		return errors.New("engine: MaxNumBatchedTokens must be positive")
	case c.MaxModelLen <= 0:
		return errors.New("engine: MaxModelLen must be positive")
	case c.Slowdown != 0 && !(c.Slowdown >= 1) || math.IsInf(c.Slowdown, 0):
		return fmt.Errorf("engine: Slowdown %v must be 0 (none) or a finite factor of at least 1", c.Slowdown)
	}
	return nil
}

// ErrTooLong rejects a request whose prompt plus output exceeds MaxModelLen or
// could never fit in the KV cache; vLLM answers it with HTTP 400.
var ErrTooLong = errors.New("engine: request exceeds the model's context or the KV cache")
