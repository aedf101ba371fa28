package eval

import (
	"strings"
	"testing"

	"github.com/prefixring/prefixring/sim/workload"
)

// The study weighs a completion as the router does: each replica
// remembers the prompts it saw by key (prefix.History), so a turn that
// reaches a replica which saw an earlier turn of its conversation weighs
// what that turn's prompt did not cover, and any other weighs its whole
// prompt. A chat's weight does not depend on it.
func TestStudyWeighsCompletionsByTheReplicasHistory(t *testing.T) {
	ck, err := newCallKey(DefaultKey, 3)
	if err != nil {
		t.Fatal(err)
	}
	s := workload.Session{API: workload.Completions, System: strings.Repeat("You answer briefly. ", 60)}
	var answers []string
	for i := range 6 {
		s.Turns = append(s.Turns, workload.Turn{User: strings.Repeat("question ", 20+i), MaxTokens: 32})
		answers = append(answers, strings.Repeat("answer ", 30))
	}
	for k := range s.Turns {
		c := s.Call(k, answers)
		req := ck.request(&c, 0) // turn k reaches replica k mod 3
		switch {
		case !req.Keyed || req.NewKnown:
			t.Fatalf("turn %d: %+v", k, req)
		case k < 3 && req.NewTokens != 0:
			t.Errorf("turn %d, the replica's first of the conversation: new tokens %d, want 0 (all)", k, req.NewTokens)
		case k >= 3:
			// The replica saw turn k-3: what it added since is new.
			prev := s.Call(k-3, answers)
			added := int64(len(c.Prompt)-len(prev.Prompt)) / 4
			if req.NewTokens < added || req.NewTokens > added+100 {
				t.Errorf("turn %d: new tokens %d of %d, want about %d", k, req.NewTokens, req.Tokens, added)
			}
		}
	}
	chat := workload.Session{API: workload.Chat, System: s.System, Turns: s.Turns}
	for k := range chat.Turns {
		c := chat.Call(k, answers)
		if req := ck.request(&c, 0); !req.NewKnown || (k == 0) != (req.NewTokens == 0) {
			t.Errorf("chat turn %d: %+v", k, req)
		}
	}
}
