package gossip

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestSettingsMismatchIsRefusedAndReported: two replicas whose settings
// differ (one counts tokens, the other requests) do not sum each other's
// counts or take each other's votes, and each reports the mismatch, with
// both summaries. Each used to sum the other's counts in its own unit,
// and nothing noticed.
func TestSettingsMismatchIsRefusedAndReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 51)
		settings := map[string]string{"r0": "load-signal=tokens min-bound=16384", "r1": "load-signal=requests min-bound=4",
			"r2": "load-signal=tokens min-bound=16384"}
		c.tweak = func(cfg *Config) { cfg.Settings = settings[cfg.NodeName] }
		defer c.stopAll()
		c.startAgreed(1)
		c.mustStart("r1", "10.0.0.2:7946")
		c.mustStart("r2", "10.0.0.3:7946")
		for _, r := range c.sorted() {
			for c.members(r) != 3 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		c.reps["r0"].hold(t, 1)
		c.reps["r1"].hold(t, 2)
		c.reps["r1"].hold(t, 3)
		c.reps["r2"].hold(t, 4)
		time.Sleep(3 * time.Second) // many publications and a push/pull
		for name, want := range map[string]int64{"r0": 2, "r1": 2, "r2": 2} {
			if got := c.reps[name].node.Loads().Total(); got != want {
				t.Errorf("%s reads a total of %d, want %d (its own and its matching peers' only)", name, got, want)
			}
		}
		for _, w := range []struct{ at, peer string }{{"r0", "r1"}, {"r1", "r0"}, {"r1", "r2"}, {"r2", "r1"}} {
			if v, ok := peerGauge(t, c.reps[w.at].reg, "prefixring_gossip_settings_mismatch", w.peer); !ok || v != 1 {
				t.Errorf("%s: settings mismatch with %s exported as %v (found %v), want 1", w.at, w.peer, v, ok)
			}
		}
		if _, ok := peerGauge(t, c.reps["r0"].reg, "prefixring_gossip_settings_mismatch", "r2"); ok {
			t.Error("r0 reports a mismatch with r2, whose settings match")
		}
		st := c.reps["r0"].node.Status()
		if st.Settings != settings["r0"] || len(st.SettingsMismatch) != 1 || st.SettingsMismatch[0].Peer != "r1" ||
			st.SettingsMismatch[0].Settings != settings["r1"] {
			t.Errorf("r0's /debug/cluster: settings %q, mismatches %+v", st.Settings, st.SettingsMismatch)
		}
		if got := c.reps["r0"].node.SettingsMismatch(); len(got) != 1 || !strings.Contains(got[0].Settings, "requests") {
			t.Errorf("r0's mismatches %+v", got)
		}
	})
}

// TestSettingsMetaFitsAndComparesWhole: a summary longer than memberlist's
// metadata is cut for display only; the digest covers all of it, so two
// summaries that differ past the cut still differ. An older build's
// metadata (the version byte alone) reads as unknown settings.
func TestSettingsMetaFitsAndComparesWhole(t *testing.T) {
	long := strings.Repeat("x=1 ", 200)
	a, b := encodeMeta(long+"y=1", 512), encodeMeta(long+"y=2", 512)
	if len(a) > 512 || len(b) > 512 {
		t.Fatalf("metadata of %d and %d bytes", len(a), len(b))
	}
	pa, pb := decodeMeta(a), decodeMeta(b)
	if !pa.known || pa.digest == pb.digest || pa.summary != pb.summary || !strings.HasPrefix(long, pa.summary) {
		t.Fatalf("decoded %+v and %+v", pa, pb)
	}
	if ps := decodeMeta([]byte{wireVersion}); ps.known {
		t.Fatalf("an older build's metadata reads %+v", ps)
	}
	if got := encodeMeta("", 512); len(got) != 1 {
		t.Fatalf("no settings: metadata %v", got)
	}
}
