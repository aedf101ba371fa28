package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/prefixring/prefixring/sim/fleet"
)

// recordsName is the file a run's per-request records go to: its
// point's axes, less those its policy does not read (a run stands for
// every point that differs from it only there, as in Run), so no two
// runs of a study share one and every result finds its run's.
func recordsName(r Result) string {
	wl := strings.Map(func(c rune) rune {
		if c == '/' || c == ':' || c == ' ' {
			return '_'
		}
		return c
	}, r.Workload)
	parts := []string{wl, r.Policy, fmt.Sprintf("e%d_r%d_x%g", r.Endpoints, r.Routers, r.RateScale)}
	rd := readsOf(r.Policy)
	if rd.bound {
		parts = append(parts, fmt.Sprintf("c%g_f%d_%s", r.LoadFactor, r.MinBound, r.Signal))
	}
	if rd.gossip {
		parts = append(parts, fmt.Sprintf("%s_g%g_l%g", r.View, r.GossipIntervalMS, r.GossipLoss))
	}
	if rd.key {
		parts = append(parts, r.Key)
	}
	parts = append(parts, fmt.Sprintf("kv%d_cc%d_s%d", r.KVBlocks, r.Concurrency, r.Seed))
	if r.SlowEngines != "" { // 0:10,3:4 -> slow0x10-3x4
		parts = append(parts, "slow"+strings.NewReplacer(":", "x", ",", "-").Replace(r.SlowEngines))
	}
	return strings.Join(parts, "_") + ".jsonl"
}

// writeRecords writes recs, one JSON object a line, to r's file in dir
// (as loadgen.Report.WriteSamples writes a load run's samples).
func writeRecords(dir string, r Result, recs []fleet.Record) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, rec := range recs {
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, recordsName(r)), b.Bytes(), 0o644)
}
