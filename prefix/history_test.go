package prefix

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func completionBlocks(t *testing.T, prompt string) []uint64 {
	t.Helper()
	k, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.Blocks(RouteCompletions, []byte(`{"model":"m","prompt":"`+prompt+`"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A key's next prompt shares the whole chunks of its last one; a prompt
// that departs from it, or is shorter, shares nothing, and becomes the
// key's last prompt in its turn. Keys do not see each other's prompts.
func TestHistoryFindsTheKeysLastPrompt(t *testing.T) {
	turn1 := strings.Repeat("a conversation so far. ", 60) // 1380 characters: 5 whole chunks and a tail
	turn2 := turn1 + strings.Repeat("the answer and a question. ", 20)
	turn3 := turn2 + "more"
	other := strings.Repeat("another conversation. ", 70)
	b1, b2, b3, bo := completionBlocks(t, turn1), completionBlocks(t, turn2), completionBlocks(t, turn3), completionBlocks(t, other)
	h := NewHistory(16)
	if got := h.Extend(1, b1); got != 0 {
		t.Fatalf("first prompt shares %d", got)
	}
	// turn1's last block hashes a partial chunk: every block before it is whole.
	if got, want := h.Extend(1, b2), (len(b1)-1)*ChunkChars; got != want || got > len(turn1)+8 || got < len(turn1)-ChunkChars {
		t.Fatalf("turn 2 shares %d, want %d (turn 1 is %d characters)", got, want, len(turn1))
	}
	if got := h.Extend(2, b3); got != 0 {
		t.Fatalf("another key shares %d", got)
	}
	if got, want := h.Extend(1, b3), (len(b2)-1)*ChunkChars; got != want {
		t.Fatalf("turn 3 shares %d, want %d", got, want)
	}
	if got, want := h.Extend(1, b3), (len(b3)-1)*ChunkChars; got != want {
		t.Fatalf("the same prompt again (a retry) shares %d, want %d", got, want)
	}
	if got := h.Extend(1, bo); got != 0 {
		t.Fatalf("a departing prompt shares %d", got)
	}
	if got := h.Extend(1, b1); got != 0 {
		t.Fatalf("after the departing prompt, turn 1 shares %d", got)
	}
	if got := h.Extend(1, b2); got == 0 {
		t.Fatal("turn 1 was not remembered in its turn")
	}
	if got := h.Extend(1, b1); got != 0 {
		t.Fatalf("a prompt shorter than the last shares %d", got)
	}
	// A prompt of one block or less is not remembered, and forgets the key.
	short := completionBlocks(t, "hi")
	if len(short) != 1 {
		t.Fatalf("%d blocks for a short prompt", len(short))
	}
	h.Extend(1, short)
	if got := h.Extend(1, b2); got != 0 {
		t.Fatalf("after a short prompt, turn 2 shares %d", got)
	}
	if h.Len() != 2 {
		t.Fatalf("%d keys remembered, want 2", h.Len())
	}
}

// The least recently seen key goes first once the History is full.
func TestHistoryForgetsTheLeastRecentKey(t *testing.T) {
	b := completionBlocks(t, strings.Repeat("x", 3*ChunkChars))
	h := NewHistory(2)
	h.Extend(1, b)
	h.Extend(2, b)
	h.Extend(1, b) // 1 is now the more recent
	h.Extend(3, b) // forgets 2
	if h.Len() != 2 {
		t.Fatalf("%d keys, want 2", h.Len())
	}
	// In this order: each Extend remembers its key in turn.
	for _, c := range []struct {
		key  uint64
		want bool
	}{{3, true}, {1, true}, {2, false}} {
		if got := h.Extend(c.key, b) > 0; got != c.want {
			t.Errorf("key %d remembered: %v, want %v", c.key, got, c.want)
		}
	}
}

// Continue turns what is shared into a key's new bytes, at least 4; a key
// with nothing shared keeps its NewBytes.
func TestHistoryContinueSetsNewBytes(t *testing.T) {
	turn1 := strings.Repeat("y", 4*ChunkChars+10)
	b1, b2 := completionBlocks(t, turn1), completionBlocks(t, turn1+"z")
	h := NewHistory(4)
	key := Key{Hash: 7, Keyed: true, NewBytes: -1}
	h.Continue(&key, b1, 5000)
	if key.NewBytes != -1 {
		t.Fatalf("first prompt: NewBytes %d", key.NewBytes)
	}
	h.Continue(&key, b2, 5000)
	if want := 5000 - 4*ChunkChars; key.NewBytes != want {
		t.Fatalf("next prompt: NewBytes %d, want %d", key.NewBytes, want)
	}
	key.NewBytes = -1
	h.Continue(&key, b2, 100) // a body shorter than what is shared: at least one token
	if key.NewBytes != 4 {
		t.Fatalf("NewBytes %d, want 4", key.NewBytes)
	}
}

// Replicas' request paths call History at once.
func TestHistoryConcurrent(t *testing.T) {
	h := NewHistory(8)
	blocks := make([][]uint64, 4)
	for i := range blocks {
		blocks[i] = completionBlocks(t, fmt.Sprint(i)+strings.Repeat("w", (i+2)*ChunkChars))
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				h.Extend(uint64((g*500+i)%16), blocks[i%4])
			}
		})
	}
	wg.Wait()
	if h.Len() > 8 {
		t.Fatalf("%d keys, more than 8", h.Len())
	}
}
