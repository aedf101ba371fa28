package policy

import (
	"container/list"
	"slices"
)

// prefixIndex is an approximate radix tree of what one router replica sent
// where, as the SGLang and vLLM routers' cache_aware policy keeps it: for
// every prompt block (the hash of a prompt through the end of one of its
// ring.Request.Blocks) the endpoints it was sent to, each endpoint's blocks
// in a recency list bounded to max of them. A path of chained block hashes
// stands for a path of the tree, and a block's presence for an endpoint
// for the endpoint's mark on that tree node. It sees only this replica's
// requests: with R replicas each has its own, as each SGLang gateway has
// its own tree. Not safe for concurrent use.
//
// Past max it evicts as SGLang's radix cache does: the least recently used
// leaf first, a parent becoming a leaf when its last child goes, so a
// shared head (a system prompt) outlives the conversations under it. No
// explicit tree is needed for that: insert moves a prompt's blocks to the
// front of the list root last, so a block is always ahead of every
// descendant (each touch of a block, its hash covering its whole prefix,
// touches its ancestors too and puts them ahead of it). The back of the
// list is then a leaf, and the least recently used one: evicting a block
// costs O(1), as touching one does.
type prefixIndex struct {
	max    int
	blocks map[uint64]map[string]*list.Element // block -> endpoint -> its LRU element
	lru    map[string]*list.List               // endpoint -> blocks, most recent first, ancestors first among equals
}

func newPrefixIndex(max int) *prefixIndex {
	return &prefixIndex{max: max, blocks: map[uint64]map[string]*list.Element{}, lru: map[string]*list.List{}}
}

// match returns how many leading blocks of blocks each endpoint of ids
// holds, in the order of ids.
func (x *prefixIndex) match(blocks []uint64, ids []string, dst []int) []int {
	dst = dst[:0]
	for _, id := range ids {
		n := 0
		for _, b := range blocks {
			if _, ok := x.blocks[b][id]; !ok {
				break
			}
			n++
		}
		dst = append(dst, n)
	}
	return dst
}

// size is the number of blocks held for id.
func (x *prefixIndex) size(id string) int {
	if l := x.lru[id]; l != nil {
		return l.Len()
	}
	return 0
}

// insert records that id was sent a prompt of blocks, and evicts id's
// least recently used leaves beyond max.
func (x *prefixIndex) insert(id string, blocks []uint64) {
	l := x.lru[id]
	if l == nil {
		l = list.New()
		x.lru[id] = l
	}
	// Deepest first, so the root ends at the front, ahead of its path.
	for _, b := range slices.Backward(blocks) {
		eps := x.blocks[b]
		if eps == nil {
			eps = map[string]*list.Element{}
			x.blocks[b] = eps
		}
		if e := eps[id]; e != nil {
			l.MoveToFront(e)
			continue
		}
		eps[id] = l.PushFront(b)
	}
	for l.Len() > x.max {
		e := l.Back()
		b := l.Remove(e).(uint64)
		if eps := x.blocks[b]; eps != nil {
			delete(eps, id)
			if len(eps) == 0 {
				delete(x.blocks, b)
			}
		}
	}
}
