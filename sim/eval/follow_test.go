package eval

import "testing"

// The follow variants run through the replicas model like chwbl and
// report how many turns followed; chwbl reports none.
func TestFollowVariantsRun(t *testing.T) {
	res, err := Run(Config{Grids: []Grid{DemoGrid([]string{"chwbl", ChwblFollow, ChwblFollowShared})}, Seed: 1, KVBlocks: DemoKVBlocks})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Requests != 768 || r.Errors != 0 || r.Agreement == nil {
			t.Fatalf("%s: %d requests, %d errors, agreement %v; want 768, 0, measured", r.Policy, r.Requests, r.Errors, r.Agreement)
		}
		switch {
		case r.Policy == "chwbl" && r.FollowRate != nil:
			t.Errorf("chwbl reports a follow rate %v", *r.FollowRate)
		case r.Policy != "chwbl" && (r.FollowRate == nil || *r.FollowRate <= 0 || *r.FollowRate > r.SpillRate):
			t.Errorf("%s: follow rate %v, spill rate %.3f; want one in (0, spill]", r.Policy, r.FollowRate, r.SpillRate)
		}
	}
}
