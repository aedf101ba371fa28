package engine

import (
	"fmt"
	"testing"
)

func TestTraceBlocksEqualTheirTokens(t *testing.T) {
	// The fleet simulator feeds hash_ids; the HTTP path feeds token ids.
	// Both must give the same block hashes for the same prompt.
	ids := []uint64{0, 7, 42}
	tr := NewChain(16)
	var toks []uint32
	for i, id := range ids {
		n := 512
		if i == len(ids)-1 {
			n = 100 // a partial last trace block
		}
		tr.AppendTraceBlock(id, n)
		toks = TraceBlockTokens(toks, id, n)
	}
	got, want := tr.Prompt(), PromptOf(16, toks)
	if got.Len != 1124 || len(got.Blocks) != 70 {
		t.Fatalf("len %d blocks %d, want 1124 and 70", got.Len, len(got.Blocks))
	}
	for i := range want.Blocks {
		if got.Blocks[i] != want.Blocks[i] {
			t.Fatalf("block %d differs", i)
		}
	}
}

func TestChainIsChained(t *testing.T) {
	a := PromptOf(4, seq(0, 12))
	b := PromptOf(4, append(seq(50, 4), seq(4, 8)...)) // same blocks 1, 2
	if a.Blocks[0] == b.Blocks[0] || a.Blocks[1] == b.Blocks[1] || a.Blocks[2] == b.Blocks[2] {
		t.Fatal("a block's hash must cover every token before it")
	}
	c := NewChain(4)
	for _, tok := range seq(0, 12) { // token by token
		c.Append(tok)
	}
	if p := c.Prompt(); p.Blocks[2] != a.Blocks[2] || p.Len != 12 {
		t.Fatal("hashes depend on how tokens were appended")
	}
}

func TestTokenizer(t *testing.T) {
	toks := Tokenize("Hello, world!")
	if len(toks) != 4 || CountTokens("Hello, world!") != 4 {
		t.Fatalf("%d tokens, want 4 (13 chars / 4, rounded up)", len(toks))
	}
	again := Tokenize("Hello, world! And more.")
	for i := range 3 {
		if toks[i] != again[i] {
			t.Fatal("a shared prefix must share its whole-chunk tokens")
		}
	}
	if got := FillerText(0, 3); got != " the and for" || CountTokens(got) != 3 {
		t.Fatalf("filler %q", got)
	}
}

func ExampleEngine() {
	cfg := DefaultConfig()
	e, _ := New(cfg)
	prompt := PromptOf(cfg.BlockSize, TraceBlockTokens(nil, 1, 1024))
	for i, at := range []int{0, 1} { // the same prompt twice, a second apart
		r := &Request{ID: uint64(i), Prompt: prompt, MaxTokens: 1}
		now := secs(at)
		_ = e.Add(r, now)
		for e.Busy() {
			end, _ := e.Begin(now)
			e.End(end)
			now = end
		}
		fmt.Printf("cached %4d tokens, TTFT %v\n", r.CachedTokens, r.TTFT())
	}
	// Output:
	// cached    0 tokens, TTFT 28.677597ms
	// cached 1008 tokens, TTFT 7.582449ms
}
