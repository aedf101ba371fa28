package workload

import (
	"math/rand/v2"
	"strings"

	"github.com/prefixring/prefixring/sim/engine"
)

// syllables make pseudo-words. Every word is a space and three letters:
// engine.CharsPerToken characters, so n words are n stand-in tokens, and
// a real BPE tokenizer sees text of about the same length in tokens.
const letters = "abcdefghijklmnopqrstuvwxyz"

// Words returns n deterministic pseudo-words (4n characters) drawn from the
// stream (seed, stream): equal arguments give equal text, different
// streams give unrelated text.
func Words(seed, stream uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, stream))
	b := make([]byte, 0, n*engine.CharsPerToken)
	var x uint64 // random digits in base 26, left in this word of randomness
	left := 0
	for range n {
		b = append(b, ' ')
		for range engine.CharsPerToken - 1 {
			if left == 0 {
				// The 12 low base-26 digits of a uniform 64-bit draw are
				// uniform to within 26^12/2^64 < 1%.
				x, left = r.Uint64(), 12
			}
			b = append(b, letters[x%26])
			x /= 26
			left--
		}
	}
	return string(b)
}

// BlockText renders a trace prompt: each hash id stands for
// TraceBlockSize tokens of fixed text (equal ids, equal text), the whole cut
// to inputLen tokens. With the stand-in tokenizer a block's text is exactly
// its TraceBlockSize tokens, so blocks shared in the trace share tokens in
// the engine.
func BlockText(blocks []uint64, inputLen int) string {
	var b strings.Builder
	b.Grow(inputLen * engine.CharsPerToken)
	left := inputLen
	for _, id := range blocks {
		if left <= 0 {
			break
		}
		n := min(left, TraceBlockSize)
		b.WriteString(Words(id, 0x7ace, n))
		left -= n
	}
	return b.String()
}
