package vllm

import (
	"errors"
	"fmt"
	"time"

	"github.com/prefixring/prefixring/sim/engine"
)

// Config configures one simulated server.
type Config struct {
	// Engine is the simulated engine (model profile, KV cache, scheduler).
	Engine engine.Config
	// Model is the served model name: the model_name label and the only
	// model the API accepts.
	Model string
	// DefaultMaxTokens is the output length of a request that sets no
	// max_tokens (vLLM would generate until EOS; the filler has none).
	DefaultMaxTokens int
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64
	// Faults are the initial fault knobs; change them at run time with
	// SetFaults or PUT /admin/faults.
	Faults Faults
	// Seed seeds the fault dice, so a chaos run can be replayed.
	Seed uint64
}

// DefaultConfig serves Llama-3.1-8B-Instruct on a simulated H100.
func DefaultConfig() Config {
	return Config{
		Engine:           engine.DefaultConfig(),
		Model:            "meta-llama/Llama-3.1-8B-Instruct",
		DefaultMaxTokens: 128,
		MaxBodyBytes:     32 << 20,
	}
}

// Validate reports a configuration that cannot serve.
func (c Config) Validate() error {
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	switch {
	case c.Model == "":
		return errors.New("vllm: Model is required")
	case c.DefaultMaxTokens <= 0:
		return errors.New("vllm: DefaultMaxTokens must be positive")
	case c.MaxBodyBytes <= 0:
		return errors.New("vllm: MaxBodyBytes must be positive")
	}
	return c.Faults.Validate()
}

// Faults are the chaos knobs. Rates are per request, in [0, 1].
type Faults struct {
	// Latency is added before a request reaches the engine.
	Latency time.Duration `json:"-"`
	// ErrorRate answers that fraction of requests with a 500 error.
	ErrorRate float64 `json:"error_rate"`
	// HangRate never answers that fraction of requests (until the client
	// goes away or the server stops).
	HangRate float64 `json:"hang_rate"`
	// CloseRate abruptly closes that fraction of streams after
	// CloseAfterTokens tokens (non-streaming requests: before the body).
	CloseRate        float64 `json:"close_rate"`
	CloseAfterTokens int     `json:"close_after_tokens"`
	// Poison, when set, answers every request whose body contains it with
	// a 500 error: a prompt the engine cannot serve, whichever engine it
	// reaches.
	Poison string `json:"poison,omitempty"`
}

// Validate reports knobs out of range.
func (f Faults) Validate() error {
	for name, r := range map[string]float64{"error_rate": f.ErrorRate, "hang_rate": f.HangRate, "close_rate": f.CloseRate} {
		if r < 0 || r > 1 {
			return fmt.Errorf("vllm: %s %v is not in [0, 1]", name, r)
		}
	}
	if f.Latency < 0 || f.CloseAfterTokens < 0 {
		return errors.New("vllm: latency and close_after_tokens must not be negative")
	}
	return nil
}
