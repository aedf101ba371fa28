package engine

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// BlockHash identifies a full KV block together with every token before it,
// like vLLM's chained block hash: equal hashes mean equal prefixes.
type BlockHash uint64

// rootHash is the parent of a prompt's first block (vLLM's NONE_HASH, fixed
// here so that runs are reproducible).
const rootHash BlockHash = 0x9e3779b97f4a7c15

// Prompt is what the engine needs to know of a prompt: its length in tokens
// and the chained hashes of its full blocks (Len/blockSize of them). Blocks
// may go on past the prompt's with the blocks its output will fill
// ([PromptThenOutput]), which the engine then caches as it generates them.
type Prompt struct {
	Len    int
	Blocks []BlockHash
}

// Chain turns a stream of tokens into a Prompt, hashing each block as soon as
// it is full. It keeps no per-token slice: only the open, partial block.
type Chain struct {
	blockSize int
	n         int
	prev      BlockHash
	blocks    []BlockHash
	open      []uint32
	buf       []byte
}

// NewChain returns an empty chain for blocks of blockSize tokens.
func NewChain(blockSize int) *Chain {
	return &Chain{
		blockSize: blockSize,
		prev:      rootHash,
		open:      make([]uint32, 0, blockSize),
		buf:       make([]byte, 8+4*blockSize),
	}
}

// Append adds tokens to the chain.
func (c *Chain) Append(tokens ...uint32) {
	for len(tokens) > 0 {
		take := min(c.blockSize-len(c.open), len(tokens))
		c.open = append(c.open, tokens[:take]...)
		tokens = tokens[take:]
		c.n += take
		if len(c.open) == c.blockSize {
			c.prev = c.hash(c.prev, c.open)
			c.blocks = append(c.blocks, c.prev)
			c.open = c.open[:0]
		}
	}
}

// hash covers the parent hash and the block's tokens, with the parent in a
// fixed-width field so that no two (parent, tokens) inputs share bytes.
func (c *Chain) hash(parent BlockHash, block []uint32) BlockHash {
	binary.LittleEndian.PutUint64(c.buf, uint64(parent))
	for i, t := range block {
		binary.LittleEndian.PutUint32(c.buf[8+4*i:], t)
	}
	return BlockHash(xxhash.Sum64(c.buf[:8+4*len(block)]))
}

// BlockSize is the chain's block size in tokens.
func (c *Chain) BlockSize() int { return c.blockSize }

// Len is the number of tokens appended so far.
func (c *Chain) Len() int { return c.n }

// Prompt returns the prompt built so far. The chain may be reused after
// Reset; the returned Blocks slice is not shared with it.
func (c *Chain) Prompt() Prompt {
	return Prompt{Len: c.n, Blocks: append([]BlockHash(nil), c.blocks...)}
}

// Reset empties the chain, keeping its buffers.
func (c *Chain) Reset() {
	c.n, c.prev, c.blocks, c.open = 0, rootHash, c.blocks[:0], c.open[:0]
}

// PromptOf hashes a whole token sequence.
func PromptOf(blockSize int, tokens []uint32) Prompt {
	c := NewChain(blockSize)
	c.Append(tokens...)
	return c.Prompt()
}

// PromptThenOutput is the Prompt of prompt whose Blocks are those of
// joint, the prompt's text and the output's tokenized as one text, as a
// follow-up request carrying both will be. vLLM v1 caches full blocks of
// generated tokens as it does the prompt's, so a conversation's next turn
// finds its last answer cached; the simulated engine knows its output in
// advance (the filler text), and the caller, which knows the texts, gives
// it their hashes. The two tokenizations part only where the stand-in
// tokenizer cut the prompt's last token short (a real tokenizer keeps a
// chat template's boundary); from there the blocks are the joint text's,
// the last full prompt block included when that token ends it: the next
// turn carries that block as the joint text cuts it, and finds it and the
// answer after it cached. Only prompt's length is read, unless joint is
// too short to cover it (no caller's is), when the prompt's own blocks
// stand alone.
func PromptThenOutput(blockSize int, prompt, joint []uint32) Prompt {
	j := PromptOf(blockSize, joint)
	if len(j.Blocks) < len(prompt)/blockSize {
		return PromptOf(blockSize, prompt)
	}
	j.Len = len(prompt)
	return j
}
