package prefix

import (
	"sync"

	"github.com/prefixring/prefixring/internal/lru"
)

// A completion is sent as one growing prompt: a conversation's next turn
// repeats the last turn's prompt and answer and adds its new text. A
// chat's new text can be read from its messages (Key.NewBytes); a
// completion's cannot, so without a History the router weighs a
// completion whole at its home, though the home holds most of it. History
// remembers, per key, the chunks of the last prompt it saw under the key
// (Keyer.Blocks, whole chunks only), and a later prompt under the key that
// opens with them shares them. It is a replica's own: behind several
// replicas a key's last turn may have reached another, and then the
// prompt shares what an earlier turn reached this one.

// DefaultHistoryKeys is how many keys a router's History remembers:
// 65536 entries of a few tens of bytes, a few MiB.
const DefaultHistoryKeys = 65536

// History is a bounded memory of completion prompts by key, the least
// recently seen key forgotten first. Safe for concurrent use.
type History struct {
	mu   sync.Mutex
	keys *lru.Map[historyEntry]
}

type historyEntry struct {
	chunks int    // whole chunks remembered
	hash   uint64 // the chained hash of the first chunks
}

// NewHistory returns an empty History of at most keys keys (at least 1).
func NewHistory(keys int) *History { return &History{keys: lru.New[historyEntry](keys)} }

// Extend returns how much of a prompt under key is known to open with the
// key's last prompt, in units Keyer.Blocks hashes (the model's name, then
// the prompt), a multiple of ChunkChars; 0 when none. blocks are the
// prompt's chained hashes from Keyer.Blocks. It then remembers this
// prompt as the key's last: every block but the last, which may hash a
// partial chunk (so up to ChunkChars−1 units of the prompt are not
// counted as shared next time).
func (h *History) Extend(key uint64, blocks []uint64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	shared := 0
	if last, ok := h.keys.Peek(key); ok && last.chunks <= len(blocks) && blocks[last.chunks-1] == last.hash {
		shared = last.chunks * ChunkChars
	}
	if n := len(blocks) - 1; n >= 1 {
		h.keys.Put(key, historyEntry{chunks: n, hash: blocks[n-1]})
	} else {
		h.keys.Delete(key)
	}
	return shared
}

// Continue sets a completion key's NewBytes to the bytes of its body
// (bodyLen) beyond what Extend finds shared with the key's last prompt,
// at least 4 (one token): what the key's home has not cached, if the last
// turn went there. A key with no such prompt is left as it was.
func (h *History) Continue(key *Key, blocks []uint64, bodyLen int) {
	if shared := h.Extend(key.Hash, blocks); shared > 0 {
		key.NewBytes = max(bodyLen-shared, 4)
	}
}

// Len is the number of keys remembered.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.keys.Len()
}
