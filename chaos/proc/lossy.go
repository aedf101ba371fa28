package proc

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prefixring/prefixring/chaos"
)

// PickView is one replica's /debug/pick answer: where each key goes now,
// and its home, by the key in decimal.
type PickView struct {
	Picks map[string]string `json:"picks"`
	Homes map[string]string `json:"homes"`
}

// Agreement is the share of keys every view picks the same endpoint for.
func Agreement(keys []uint64, views []PickView) float64 {
	agreed := 0
	for _, key := range keys {
		k := fmt.Sprint(key)
		if !slices.ContainsFunc(views, func(v PickView) bool { return v.Picks[k] != views[0].Picks[k] }) {
			agreed++
		}
	}
	return float64(agreed) / float64(max(len(keys), 1))
}

// AwayShare is the share of keys some view picks away from that view's
// home for it: the keys the bound decides. A key every replica sends home
// is agreed whatever the replicas' loads, so agreement measured where this
// is 0 could not have failed.
func AwayShare(keys []uint64, views []PickView) float64 {
	away := 0
	for _, key := range keys {
		k := fmt.Sprint(key)
		if slices.ContainsFunc(views, func(v PickView) bool { return v.Picks[k] != v.Homes[k] }) {
			away++
		}
	}
	return float64(away) / float64(max(len(keys), 1))
}

// lossyGoal is the agreement the issue asks of the aligned view under 20%
// gossip loss (and 50 ms delay where the kernel has netem).
const lossyGoal = 0.9

// lossySetup runs the replicas at the textbook bound (no floor: at the
// default 16384 tokens this load never leaves home, and every replica
// agrees trivially) with gossip view view.
func lossySetup(view string) func(*Config) {
	return func(cfg *Config) {
		cfg.ReplicaArgs = append(slices.Clone(cfg.ReplicaArgs), "--min-bound", "0", "--gossip-view", view)
	}
}

// lossy measures agreement under load, with clean gossip links and then
// with 20% of gossip packets lost (and delayed 50±25 ms where netem
// exists), and the share of probe keys the bound sends away from home in
// each; with goal, agreement under loss below lossyGoal is a problem.
func lossy(goal bool) func(context.Context, *Cluster, *Row) error {
	return func(ctx context.Context, c *Cluster, r *Row) error {
		measure := func() (agree, away []float64, outs []chaos.Outcome) {
			wait := load(c, 15*time.Second, 24, 50*time.Millisecond, 0)
			stop := chaos.Sample(time.Second, func() {
				if views, err := c.Picks(probeKeys); err == nil {
					agree, away = append(agree, Agreement(probeKeys, views)), append(away, AwayShare(probeKeys, views))
				}
			})
			outs = wait()
			stop()
			return
		}
		clean, cleanAway, cleanOuts := measure()
		applied, err := c.Degrade(20, 50*time.Millisecond, 25*time.Millisecond)
		if err != nil {
			return err
		}
		r.Figures["degraded_with"] = applied
		degraded, lossyAway, outs := measure()
		basic(r, append(cleanOuts, outs...), 0)
		settle(ctx, c, r)
		c.Heal()
		r.Figures["agreement_mean_clean"], r.Figures["agreement_mean_lossy"] = chaos.Mean(clean), chaos.Mean(degraded)
		r.Figures["away_share_clean"], r.Figures["away_share_lossy"] = chaos.Mean(cleanAway), chaos.Mean(lossyAway)
		expect(r, chaos.Mean(cleanAway) > 0 && chaos.Mean(lossyAway) > 0,
			"no probe key picked away from home (clean %.2f, lossy %.2f): agreement could not fail", chaos.Mean(cleanAway), chaos.Mean(lossyAway))
		expect(r, !goal || chaos.Mean(degraded) >= lossyGoal, "agreement under loss %.2f, want >= %.2f", chaos.Mean(degraded), lossyGoal)
		return nil
	}
}
