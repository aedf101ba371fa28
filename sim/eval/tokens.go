package eval

import (
	"math/rand/v2"

	"github.com/prefixring/prefixring/sim/workload"
)

// tokenRatios are the router's token estimate (body bytes / 4) over Llama
// 3's BPE count, per sample, by text kind: scripts/tokenratio's output
// (llama3-tokenizer-js 1.2.0; docs/study.md, "Tokens").
var tokenRatios = map[string][]float64{
	"prose": {0.797, 0.877, 0.923, 0.931, 0.938, 0.988, 1.173, 1.224, 1.288},
	"code":  {0.794, 0.812, 0.883, 0.887, 0.89, 0.903, 0.903, 0.906, 0.909, 0.924, 0.926, 0.938, 0.94, 0.947, 0.952, 0.978, 1.002, 1.018},
	"json":  {0.569, 0.963, 1.047},
	"zh":    {0.908, 0.92, 0.954},
	"ru":    {1.371, 1.434, 1.654},
}

// textMix is a workload's text kinds and their shares.
type textMix []struct {
	kind  string
	share float64
}

var (
	chatText  = textMix{{"prose", 0.7}, {"code", 0.1}, {"zh", 0.1}, {"ru", 0.1}}
	agentText = textMix{{"json", 0.5}, {"code", 0.5}}
	mixedText = textMix{{"prose", 0.5}, {"code", 0.2}, {"json", 0.1}, {"zh", 0.1}, {"ru", 0.1}}
)

// draw picks a kind by share, then one of its measured ratios.
func (m textMix) draw(r *rand.Rand) float64 {
	x := r.Float64()
	for _, k := range m {
		if x -= k.share; x < 0 || k == m[len(m)-1] {
			rs := tokenRatios[k.kind]
			return rs[r.IntN(len(rs))]
		}
	}
	return 1
}

// scaleTokens gives each session the ratio of its text: one draw per
// shared-prompt group (its sessions share a system prompt or tool set, so
// the engine must tokenize that text alike for them to share its cache),
// and one per session outside any group; seeded.
func scaleTokens(ss []workload.Session, m textMix, seed uint64) {
	if m == nil {
		return
	}
	r := rand.New(rand.NewPCG(seed, 0x70c3))
	groups := map[int]float64{}
	for i := range ss {
		g := ss[i].Group
		if g < 0 {
			ss[i].TokenScale = m.draw(r)
			continue
		}
		if _, ok := groups[g]; !ok {
			groups[g] = m.draw(r)
		}
		ss[i].TokenScale = groups[g]
	}
}
