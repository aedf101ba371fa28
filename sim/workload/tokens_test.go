package workload

import (
	"slices"
	"testing"
)

func TestSharedPrefixGroupsSharePrompts(t *testing.T) {
	w := SharedPrefixTokens{Groups: 4, Skew: 1, SystemTokens: 64, UserTokens: 8, OutputTokens: 4, Rate: 10, Requests: 200, Seed: 1}
	reqs, groups, err := w.Generate()
	if err != nil {
		t.Fatal(err)
	}
	first := map[int][]uint32{}
	count := map[int]int{}
	for i, r := range reqs {
		g := groups[i]
		count[g]++
		if p, ok := first[g]; ok && !slices.Equal(p, r.Tokens[:64]) {
			t.Fatalf("group %d system prompts differ", g)
		}
		first[g] = r.Tokens[:64]
		if i > 0 && r.Arrival < reqs[i-1].Arrival {
			t.Fatal("arrivals out of order")
		}
	}
	if slices.Equal(first[0], first[1]) || count[0] <= count[3] {
		t.Fatalf("groups not distinct or not skewed: %v", count)
	}
	again, _, _ := w.Generate()
	if again[7].Arrival != reqs[7].Arrival || !slices.Equal(again[7].Tokens, reqs[7].Tokens) {
		t.Fatal("not reproducible")
	}
}
