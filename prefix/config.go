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

// ChunkChars is the granularity of common-prefix detection: a Common table
// holds hashes of prompt prefixes whose lengths are multiples of ChunkChars.
const ChunkChars = 256

// maxMaxChars bounds per-request work whatever the flags say.
const maxMaxChars = 1 << 20

// Config sets what Key reads. The zero value is invalid; start from
// DefaultConfig.
type Config struct {
	// MaxChars is how many characters (Unicode code points; a token id
	// counts as 4) of each keyed text part Key reads: the system/developer
	// preamble, the tool definitions, and the anchor (the first user message
	// of a chat, the prompt of a completion). Default DefaultMaxChars.
	MaxChars int

	// Common, if set, is a read-only table of anchor prefixes that nearly
	// all traffic shares (built by Tally.Common from observed traffic).
	// Key skips such a shared prefix before it starts counting MaxChars, so
	// a long shared preamble inside the prompt does not give every request
	// the same key. Default nil: plain first-MaxChars keys.
	Common *Common
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{MaxChars: DefaultMaxChars}
}

// Validate reports a configuration Key cannot honour.
func (c Config) Validate() error {
	if c.MaxChars < 1 || c.MaxChars > maxMaxChars {
		return fmt.Errorf("prefix: MaxChars must be in [1, %d], got %d", maxMaxChars, c.MaxChars)
	}
	if c.Common != nil && c.MaxChars < ChunkChars {
		// With a shorter window the first chunk boundary lies past the
		// limit, so no common prefix could ever be skipped.
		return errors.New("prefix: MaxChars must be at least ChunkChars when Common is set")
	}
	return nil
}
