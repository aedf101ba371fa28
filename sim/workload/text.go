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
	var b strings.Builder
	b.Grow(n * engine.CharsPerToken)
	for range n {
		b.WriteByte(' ')
		for range engine.CharsPerToken - 1 {
			b.WriteByte(letters[r.IntN(len(letters))])
		}
	}
	return b.String()
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
