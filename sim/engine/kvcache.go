package engine

// kvCache is a paged KV cache with automatic prefix caching, after vLLM v1's
// BlockPool: blocks are reference-counted; a block whose hash is known (a full
// prompt block) is findable by that hash; a block nobody references sits in
// the free queue, least recently used at the head, and keeps its hash (and so
// its cached content) until it is taken for new data. Blocks referenced by a
// running request are pinned: they are never in the free queue.
type kvCache struct {
	blocks []kvBlock
	cached map[BlockHash]int32 // hash -> block holding it
	head   int32               // free queue: head is evicted first
	tail   int32
	free   int
}

type kvBlock struct {
	hash       BlockHash
	hashed     bool
	ref        int32
	prev, next int32 // free-queue links, -1 at the ends
	queued     bool
}

func newKVCache(n int) *kvCache {
	c := &kvCache{blocks: make([]kvBlock, n), cached: make(map[BlockHash]int32), head: -1, tail: -1}
	for i := range c.blocks {
		c.blocks[i].prev, c.blocks[i].next = -1, -1
		c.pushTail(int32(i))
	}
	return c
}

func (c *kvCache) pushTail(id int32) {
	b := &c.blocks[id]
	b.prev, b.next, b.queued = c.tail, -1, true
	if c.tail >= 0 {
		c.blocks[c.tail].next = id
	} else {
		c.head = id
	}
	c.tail = id
	c.free++
}

func (c *kvCache) unlink(id int32) {
	b := &c.blocks[id]
	if b.prev >= 0 {
		c.blocks[b.prev].next = b.next
	} else {
		c.head = b.next
	}
	if b.next >= 0 {
		c.blocks[b.next].prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next, b.queued = -1, -1, false
	c.free--
}

// longestHit returns the blocks holding the longest cached chain of hashes,
// at most maxBlocks of them. Because each hash covers its whole prefix, the
// first miss ends the chain.
func (c *kvCache) longestHit(hashes []BlockHash, maxBlocks int, dst []int32) []int32 {
	for _, h := range hashes[:min(len(hashes), maxBlocks)] {
		id, ok := c.cached[h]
		if !ok {
			break
		}
		dst = append(dst, id)
	}
	return dst
}

// canTake reports whether hits can be pinned and n new blocks taken.
func (c *kvCache) canTake(hits []int32, n int) bool {
	evictable := 0
	for _, id := range hits {
		if c.blocks[id].ref == 0 {
			evictable++
		}
	}
	return n+evictable <= c.free
}

// pin references a cached block, taking it off the free queue.
func (c *kvCache) pin(id int32) {
	b := &c.blocks[id]
	if b.ref == 0 && b.queued {
		c.unlink(id)
	}
	b.ref++
}

// take hands out the least recently used free block, evicting its cached
// content. The caller has checked that one is free.
func (c *kvCache) take() int32 {
	id := c.head
	c.unlink(id)
	b := &c.blocks[id]
	if b.hashed {
		if c.cached[b.hash] == id {
			delete(c.cached, b.hash)
		}
		b.hashed = false
	}
	b.ref = 1
	return id
}

// commit records that block id now holds the full block with hash h. If
// another block already holds h (two requests filled the same block, as
// when one admitted during the other's chunked prefill overtakes it) the
// first one stays the cached copy, as in vLLM.
func (c *kvCache) commit(id int32, h BlockHash) {
	if _, dup := c.cached[h]; dup {
		return
	}
	c.blocks[id].hash, c.blocks[id].hashed = h, true
	c.cached[h] = id
}

// release drops one reference to each block, last block first, so that a
// request's tail blocks, the least likely to be shared, are evicted first.
func (c *kvCache) release(ids []int32) {
	for i := len(ids) - 1; i >= 0; i-- {
		b := &c.blocks[ids[i]]
		b.ref--
		if b.ref == 0 {
			c.pushTail(ids[i])
		}
	}
}

// usage is the fraction of blocks in use, as vLLM's kv_cache_usage_perc:
// 1 - free/total, where cached but unreferenced blocks count as free.
func (c *kvCache) usage() float64 {
	return 1 - float64(c.free)/float64(len(c.blocks))
}
