package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prefixring/prefixring/internal/e2etest"
)

// prefixring eval writes the report folder and says where its page is,
// and with --records each run's per-request records; a bad list value is
// refused by name.
func TestEvalCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	records := filepath.Join(t.TempDir(), "records", "deeper") // made when missing
	out, err := exec.Command(e2etest.Binary(t), "eval", "--out", dir, "--workload", "multi-turn", "--policies", "round-robin,chwbl", "--routers", "1",
		"--rate-scale", "1", "--load-factor", "1.25,2", "--requests", "200", "--records", records).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "4 runs") || !strings.Contains(string(out), filepath.Join(dir, "index.html")) {
		t.Fatalf("output: %s", out)
	}
	for _, f := range []string{"results.json", "report.md", "index.html"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(records, "multi-turn_*.jsonl")); len(files) != 3 {
		t.Fatalf("--records wrote %v, want a file for each of the 3 runs (round-robin does not read c)", files)
	}
	for _, bad := range [][]string{{"--routers", "x"}, {"--policies", "nope"}, {"--workload", "nope"}, {"--gossip-interval", "fast"},
		{"--signal", "bytes"}, {"--key", "first-3"}, {"--gossip-view", "local"}} {
		out, err := exec.Command(e2etest.Binary(t), append([]string{"eval", "--out", dir}, bad...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), strings.TrimPrefix(bad[0], "--")) && !strings.Contains(string(out), bad[1]) {
			t.Errorf("%v: %v\n%s", bad, err, out)
		}
	}
}
