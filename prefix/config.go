package prefix

import (
	"errors"
	"fmt"
)

// DefaultMaxChars is the default Config.MaxChars, chosen in
// docs/prefix-key.md from the workload measurements: 4096 characters (~1K
// tokens) reads past a shared 512-token block at the top of every prompt
// (the Mooncake conversation trace), which 2048 does not, and costs nothing
// in chat turn stability, since chat keys never read past the first user
// message.
const DefaultMaxChars = 4096

// DefaultPromptChars is the default Config.PromptChars, chosen in
// docs/prefix-key.md: one chunk, so that the first turn of a conversation
// sent as one growing completions prompt already holds the whole window
// past a shared preamble, and every later turn keys like it.
const DefaultPromptChars = ChunkChars

// DefaultSharedChars is the default Config.SharedChars: a shared preamble
// of up to 32768 characters (~8K tokens) is skipped.
const DefaultSharedChars = 128 * ChunkChars

// ChunkChars is the granularity of common-prefix detection: a Common table
// holds hashes of prompt prefixes whose lengths are multiples of ChunkChars.
const ChunkChars = 256

// maxMaxChars bounds per-request work whatever the flags say.
const maxMaxChars = 1 << 20

// Config sets what Key reads. The zero value is invalid; start from
// DefaultConfig.
type Config struct {
	// MaxChars is how many characters (Unicode code points; a token id
	// counts as 4) of each keyed text part of a chat Key reads: the
	// system/developer preamble, the tool definitions, and the anchor (the
	// first user message). Default DefaultMaxChars.
	MaxChars int

	// PromptChars is how many characters of a completions prompt (or an
	// embeddings input) Key reads after the shared prefix it skips (see
	// Common): the anchor's window. Default DefaultPromptChars.
	PromptChars int

	// SharedChars bounds the shared prefix Key may skip. Default
	// DefaultSharedChars.
	SharedChars int

	// Common, if set, is a read-only table of anchor prefixes after which
	// requests diverge (built by a Sketch from observed traffic: a shared
	// system prompt, RAG preamble or few-shot block). Key skips the anchor
	// up to the deepest such prefix within SharedChars and reads its window
	// after it, so a long shared preamble does not give every request the
	// same key, and a short window still reaches past it. Default nil: the
	// anchor's first window.
	Common *Common
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{MaxChars: DefaultMaxChars, PromptChars: DefaultPromptChars, SharedChars: DefaultSharedChars}
}

// window is the anchor's window for route.
func (c *Config) window(route Route) int {
	if route == RouteChat {
		return c.MaxChars
	}
	return c.PromptChars
}

// chunks rounds a number of characters up to chunks.
func chunks(chars int) int { return (chars + ChunkChars - 1) / ChunkChars }

// Validate reports a configuration Key cannot honour.
func (c Config) Validate() error {
	if c.MaxChars < 1 || c.MaxChars > maxMaxChars {
		return fmt.Errorf("prefix: MaxChars must be in [1, %d], got %d", maxMaxChars, c.MaxChars)
	}
	if c.PromptChars < 1 || c.PromptChars > maxMaxChars {
		return fmt.Errorf("prefix: PromptChars must be in [1, %d], got %d", maxMaxChars, c.PromptChars)
	}
	if c.SharedChars < 0 || c.SharedChars > maxMaxChars {
		return fmt.Errorf("prefix: SharedChars must be in [0, %d], got %d", maxMaxChars, c.SharedChars)
	}
	if c.Common != nil && (c.MaxChars%ChunkChars != 0 || c.PromptChars%ChunkChars != 0) {
		// The window after a skipped prefix ends at a chunk boundary.
		return errors.New("prefix: with Common, MaxChars and PromptChars must be multiples of ChunkChars")
	}
	return nil
}
