package main

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/internal/e2etest"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/eval"
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

// --endpoint-urls names the simulated engines as serve names the real
// ones (canonical URLs), sets the engine count, and moves the placement
// with the names: the ring hashes them. A list serve would refuse, or one
// that names an engine twice, is refused.
func TestEvalEndpointURLs(t *testing.T) {
	// order returns, request by request, the index in urls of the engine
	// that chwbl chose in a run on those engines.
	order := func(urls ...string) []int {
		t.Helper()
		dir := t.TempDir()
		out, err := exec.Command(e2etest.Binary(t), "eval", "--out", filepath.Join(dir, "report"), "--records", dir,
			"--workload", "multi-turn", "--policies", "chwbl", "--routers", "1", "--rate-scale", "1", "--requests", "120",
			"--endpoint-urls", strings.Join(urls, ",")).CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "multi-turn_*_e3_*.jsonl"))
		if len(files) != 1 {
			t.Fatalf("records %v, want one run on 3 engines\n%s", files, out)
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		var idx []int
		for line := range strings.Lines(string(b)) {
			var rec struct{ Endpoint string }
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(urls, func(u string) bool { return "http://"+u == rec.Endpoint })
			if i < 0 {
				t.Fatalf("a request went to %q, not one of %q", rec.Endpoint, urls)
			}
			idx = append(idx, i)
		}
		return idx
	}
	a := order("10.0.0.7:8000", "10.0.0.8:8000", "10.0.0.9:8000")
	if len(a) != 120 {
		t.Fatalf("%d records, want 120", len(a))
	}
	if b := order("10.0.0.7:8000", "10.0.0.8:8000", "10.0.0.9:8000"); !slices.Equal(a, b) {
		t.Error("the same names placed the same requests differently")
	}
	if b := order("10.0.1.7:8000", "10.0.1.8:8000", "10.0.1.9:8000"); slices.Equal(a, b) {
		t.Error("other names placed every request on the same engine index: the names are not what the ring hashes")
	}
	dir := t.TempDir()
	for _, bad := range []string{"10.0.0.7:8000,10.0.0.7:8000", "ftp://10.0.0.7", "10.0.0.7:8000,http://10.0.0.7:8000/v1"} {
		out, err := exec.Command(e2etest.Binary(t), "eval", "--out", dir, "--workload", "multi-turn", "--policies", "chwbl",
			"--endpoint-urls", bad).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "10.0.0.7") {
			t.Errorf("--endpoint-urls %s: %v\n%s", bad, err, out)
		}
	}
}

// runEvalFlags parses eval's flags from args and returns evalConfig's
// answer.
func runEvalFlags(t *testing.T, args ...string) (cfg eval.Config, warnings []string, err error) {
	t.Helper()
	app := &cli.App{Flags: evalCommand().Flags, Action: func(c *cli.Context) error {
		cfg, warnings, err = evalConfig(c)
		return nil
	}}
	if rerr := app.Run(append([]string{"prefixring"}, args...)); rerr != nil {
		t.Fatal(rerr)
	}
	return cfg, warnings, err
}

// --full and --traces shape the default study; beside an axis flag, which
// replaces it with one grid, each is warned about (until stop 42 both were
// silently dropped). --seeds is no axis: the study runs over them.
func TestEvalFlagsSayWhatCannotAct(t *testing.T) {
	traces := t.TempDir()
	for _, args := range [][]string{{"--full"}, {"--traces=" + traces}, {"--full", "--traces=" + traces}, nil} {
		for _, study := range [][]string{nil, {"--seeds=1,2"}} {
			if _, w, err := runEvalFlags(t, append(study, args...)...); err != nil || len(w) != 0 {
				t.Errorf("%v %v (the default study): warnings %v, err %v", study, args, w, err)
			}
		}
		for _, axis := range []string{"--workload=multi-turn", "--policies=chwbl", "--gossip-loss=0.1"} {
			_, w, err := runEvalFlags(t, append([]string{axis}, args...)...)
			if err != nil {
				t.Errorf("%s %v: %v", axis, args, err)
			}
			for _, f := range args {
				name := strings.SplitN(f, "=", 2)[0]
				if !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, name+" has no effect") }) {
					t.Errorf("%s %v: warnings %v, want one naming %s", axis, args, w, name)
				}
			}
		}
	}
}

// TestEvalRequestsSignalTakesItsFloor: the floor is in the signal's
// unit, so --signal requests alone takes serve's floor of 4 requests, not
// tokens' 16384 (a bound that never fires); beside another signal it is
// warned about; a --min-bound given is kept.
func TestEvalRequestsSignalTakesItsFloor(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		floor []int64
		warn  bool
	}{
		{[]string{"--signal=requests"}, []int64{ring.DefaultMinRequests}, false},
		{[]string{"--signal=requests", "--min-bound=8"}, []int64{8}, false},
		{[]string{"--signal=tokens"}, []int64{16384}, false},
		{[]string{"--signal=tokens,requests"}, []int64{16384}, true},
		{[]string{"--signal=tokens,requests", "--min-bound=4"}, []int64{4}, false},
	} {
		cfg, w, err := runEvalFlags(t, tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		warned := slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "--signal requests") })
		if got := cfg.Grids[0].MinBounds; !slices.Equal(got, tc.floor) || warned != tc.warn {
			t.Errorf("%v: floor %v, warned %v (%v); want %v, %v", tc.args, got, warned, w, tc.floor, tc.warn)
		}
	}
}

// TestEvalSlowEnginesFlag: --slow-engines 0:10,3:4 slows those engines
// in every run of the study; a list that is not engine:factor, a factor
// below 1 and an engine outside a grid's fleet are refused by name.
func TestEvalSlowEnginesFlag(t *testing.T) {
	cfg, _, err := runEvalFlags(t, "--workload=multi-turn", "--endpoints=4", "--slow-engines=0:10,3:4")
	if want := map[int]float64{0: 10, 3: 4}; err != nil || !maps.Equal(cfg.SlowEngines, want) {
		t.Fatalf("slow engines %v (%v), want %v", cfg.SlowEngines, err, want)
	}
	for _, c := range []struct{ args []string }{
		{[]string{"--slow-engines=0"}},
		{[]string{"--slow-engines=0:0.5"}},
		{[]string{"--slow-engines=0:10,0:3"}},
		{[]string{"--workload=multi-turn", "--endpoints=4", "--slow-engines=4:10"}},
		{[]string{"--slow-engines=5:10"}}, // the default study's demo grid runs 4 engines
	} {
		if _, _, err := runEvalFlags(t, c.args...); err == nil || !strings.Contains(err.Error(), "slow engine") {
			t.Errorf("%v: %v, want an error about the slow engines", c.args, err)
		}
	}
}
