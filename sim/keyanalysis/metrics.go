package main

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/cespare/xxhash/v2"
)

type metrics struct {
	keys      int     // distinct keys
	top       float64 // share of requests on the most used key
	stable    string  // multi-turn conversations whose turns all share one key
	collide   float64 // conversations whose first key another conversation also has
	hitPerKey float64 // block hit rate if every key had its own server, infinite cache
	hitCHWBL  float64 // block hit rate with E endpoints, bounded loads, infinite cache
}

// idealHit is the block hit rate of a single server with infinite cache.
func idealHit(reqs []*req) float64 {
	seen := map[uint64]bool{}
	hit, total := 0, 0
	for _, r := range reqs {
		for _, b := range r.blocks {
			total++
			if seen[b] {
				hit++
			}
			seen[b] = true
		}
	}
	return float64(hit) / float64(total)
}

func measure(reqs []*req, keys []uint64, endpoints int) metrics {
	var m metrics
	count := map[uint64]int{}
	for _, k := range keys {
		count[k]++
	}
	m.keys = len(count)
	for _, n := range count {
		m.top = max(m.top, float64(n)/float64(len(keys)))
	}

	convKeys := map[int]map[uint64]bool{}
	firstKey := map[int]uint64{}
	turns := map[int]int{}
	for i, r := range reqs {
		if convKeys[r.conv] == nil {
			convKeys[r.conv] = map[uint64]bool{}
			firstKey[r.conv] = keys[i]
		}
		convKeys[r.conv][keys[i]] = true
		turns[r.conv]++
	}
	multi, stable := 0, 0
	for c, n := range turns {
		if n > 1 {
			multi++
			if len(convKeys[c]) == 1 {
				stable++
			}
		}
	}
	m.stable = fmt.Sprintf("%d/%d", stable, multi)
	convsOfKey := map[uint64]int{}
	for _, k := range firstKey {
		convsOfKey[k]++
	}
	shared := 0
	for _, k := range firstKey {
		if convsOfKey[k] > 1 {
			shared++
		}
	}
	m.collide = float64(shared) / float64(len(firstKey))

	perKey := map[[2]uint64]bool{}
	hit, total := 0, 0
	for i, r := range reqs {
		for _, b := range r.blocks {
			total++
			if perKey[[2]uint64{keys[i], b}] {
				hit++
			}
			perKey[[2]uint64{keys[i], b}] = true
		}
	}
	m.hitPerKey = float64(hit) / float64(total)
	m.hitCHWBL = simulateCHWBL(reqs, keys, endpoints)
	return m
}

// simulateCHWBL places requests with consistent hashing with bounded loads
// (the walk of the ring package: first endpoint from the key's hash whose
// load is at most c*(total+1)/n, c = 1.25). Load is the number of the last
// 4n requests placed on an endpoint, a stand-in for in-flight requests.
// Every endpoint has an infinite prefix cache.
func simulateCHWBL(reqs []*req, keys []uint64, n int) float64 {
	type vnode struct {
		h  uint64
		ep int
	}
	var ring []vnode
	for ep := 0; ep < n; ep++ {
		for v := 0; v < 100; v++ {
			var b [16]byte
			binary.LittleEndian.PutUint64(b[:], uint64(ep))
			binary.LittleEndian.PutUint64(b[8:], uint64(v))
			ring = append(ring, vnode{xxhash.Sum64(b[:]), ep})
		}
	}
	sort.Slice(ring, func(i, j int) bool { return ring[i].h < ring[j].h })
	window := 4 * n
	load := make([]int, n)
	recent := make([]int, 0, window)
	limit := 1.25 * float64(window+1) / float64(n)
	cache := make([]map[uint64]bool, n)
	for i := range cache {
		cache[i] = map[uint64]bool{}
	}
	hit, total := 0, 0
	for i, r := range reqs {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], keys[i])
		h := xxhash.Sum64(b[:])
		at := sort.Search(len(ring), func(j int) bool { return ring[j].h >= h })
		ep := -1
		for j := 0; j < len(ring); j++ {
			c := ring[(at+j)%len(ring)].ep
			if float64(load[c]+1) <= limit {
				ep = c
				break
			}
		}
		if len(recent) == window {
			load[recent[0]]--
			recent = recent[1:]
		}
		recent = append(recent, ep)
		load[ep]++
		for _, blk := range r.blocks {
			total++
			if cache[ep][blk] {
				hit++
			}
			cache[ep][blk] = true
		}
	}
	return float64(hit) / float64(total)
}
