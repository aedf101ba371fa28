package main

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prefixring/prefixring/loadgen"
	"github.com/prometheus/common/expfmt"
)

func TestParseSystem(t *testing.T) {
	for in, want := range map[string]system{
		"prefixring-x3": {Name: "prefixring-x3", Kind: "prefixring", Replicas: 3},
		"haproxy-x1":    {Name: "haproxy-x1", Kind: "haproxy", Replicas: 1},
		"haproxy-rr-x1": {Name: "haproxy-rr-x1", Kind: "haproxy-rr", Replicas: 1},
	} {
		if got, err := parseSystem(in); err != nil || got != want {
			t.Errorf("parseSystem(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "haproxy", "nginx-x1", "prefixring-x0", "haproxy-x1 "} {
		if _, err := parseSystem(bad); err == nil {
			t.Errorf("parseSystem(%q) accepted", bad)
		}
	}
}

// The configs the script writes are what the doc quotes and what haproxy
// accepts (checked with haproxy -c where it is installed).
func TestHAProxyConfig(t *testing.T) {
	o := &options{hashBytes: 600, haproxyTimeoutS: 600}
	eps := []string{"http://127.0.0.1:8000", "http://127.0.0.1:8001"}
	chwbl := haproxyConfig(o, "haproxy", 8080, eps)
	for _, line := range []string{"bind 127.0.0.1:8080", "balance hash req.body,bytes(0,600)", "hash-type consistent",
		"hash-balance-factor 125", "option http-buffer-request", "option http-no-delay", "server e1 127.0.0.1:8001 check inter 5s"} {
		if !strings.Contains(chwbl, "\t"+line+"\n") {
			t.Errorf("CHWBL config lacks %q:\n%s", line, chwbl)
		}
	}
	rr := haproxyConfig(o, "haproxy-rr", 8080, eps)
	if !strings.Contains(rr, "\tbalance roundrobin\n") || strings.Contains(rr, "hash") {
		t.Errorf("round-robin config:\n%s", rr)
	}
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Log("haproxy not installed: configs not checked by haproxy -c")
		return
	}
	for name, cfg := range map[string]string{"chwbl": chwbl, "rr": rr} {
		p := filepath.Join(t.TempDir(), name+".cfg")
		if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "-c", "-q", "-f", p).CombinedOutput(); err != nil {
			t.Errorf("haproxy -c rejects the %s config: %v: %s", name, err, out)
		}
	}
}

func TestSummarizeVerdict(t *testing.T) {
	o := &options{workloads: []string{"trace"}}
	for _, s := range []string{"prefixring-x1", "haproxy-x1", "prefixring-x3", "haproxy-x3"} {
		ps, _ := parseSystem(s)
		o.systems = append(o.systems, ps)
	}
	run := func(sys string, mean, p95 float64) result {
		return result{Workload: "trace", System: sys, Requests: 10, OK: 9, TTFT: loadgen.Dist{Mean: mean, P95: p95}}
	}
	sum := summarize(o, []result{
		run("prefixring-x1", 10, 100), run("prefixring-x1", 30, 100), run("haproxy-x1", 20, 100), run("haproxy-x1", 20, 100),
		run("prefixring-x3", 10, 90), run("haproxy-x3", 20, 80),
	})
	p1, p3 := sum[0], sum[2]
	if p1.Runs != 2 || p1.Mean != (rng{Min: 10, Max: 30, Mean: 20}) || p1.Errors != 2 {
		t.Errorf("prefixring-x1 summary %+v", p1)
	}
	if v := p1.VsHAProxy; v == nil || v.Against != "haproxy-x1" || v.MeanRatio != 1 || v.P95Ratio != 1 || !v.Met {
		t.Errorf("prefixring-x1 verdict %+v: want equal ratios, met", v)
	}
	if v := p3.VsHAProxy; v == nil || v.Against != "haproxy-x3" || v.MeanRatio != 0.5 || v.P95Ratio != 90.0/80 || v.Met {
		t.Errorf("prefixring-x3 verdict %+v: want mean 0.5x, p95 1.125x, missed", v)
	}
	if sum[1].VsHAProxy != nil {
		t.Errorf("HAProxy got a verdict against itself")
	}

	// Failed requests have no TTFT: a router that failed its slowest
	// requests would look faster. More errors than HAProxy's is a miss
	// whatever the ratios.
	failing := run("prefixring-x1", 10, 50)
	failing.OK = 7
	sum = summarize(o, []result{failing, run("haproxy-x1", 20, 100)})
	if v := sum[0].VsHAProxy; v == nil || v.Met || v.Errors != 3 || v.TheirErrors != 1 {
		t.Errorf("3 errors against HAProxy's 1: verdict %+v, want missed", v)
	}
}

// The engines' TTFT comes from their histogram, summed over its series;
// a family the engine does not export counts as none.
func TestHistogramSumsSeries(t *testing.T) {
	text := `# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="a",le="0.1"} 2
vllm:time_to_first_token_seconds_bucket{model_name="a",le="+Inf"} 3
vllm:time_to_first_token_seconds_sum{model_name="a"} 0.25
vllm:time_to_first_token_seconds_count{model_name="a"} 3
vllm:time_to_first_token_seconds_bucket{model_name="b",le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{model_name="b",le="+Inf"} 1
vllm:time_to_first_token_seconds_sum{model_name="b"} 0.05
vllm:time_to_first_token_seconds_count{model_name="b"} 1
`
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if n, sum := histogram(fams, "vllm:time_to_first_token_seconds"); n != 4 || math.Abs(sum-0.30) > 1e-12 {
		t.Errorf("histogram = %v, %v; want 4, 0.30", n, sum)
	}
	if n, sum := histogram(fams, "prefixring_sim_step_lag_seconds"); n != 0 || sum != 0 {
		t.Errorf("missing family = %v, %v; want 0, 0", n, sum)
	}
}

// The Mooncake trace lives in shared/, beside the repository, not in it: on
// a fresh clone `make vs-haproxy` drops it with a note, and a trace asked
// for by -workloads that is not there stops the command before its first
// run (until stop 41 both died at the first trace run, after every system's
// multi-turn runs).
func TestCheckTrace(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.jsonl")
	wls, note, err := checkTrace([]string{"multi-turn", "trace"}, missing, false)
	if err != nil || !slices.Equal(wls, []string{"multi-turn"}) || !strings.Contains(note, missing) {
		t.Errorf("default workloads, trace missing: %v %q %v; want multi-turn alone and a note naming the file", wls, note, err)
	}
	if _, _, err := checkTrace([]string{"multi-turn", "trace"}, missing, true); err == nil || !strings.Contains(err.Error(), "-trace") {
		t.Errorf("-workloads trace, trace missing: %v, want an error naming -trace", err)
	}
	if _, _, err := checkTrace([]string{"trace"}, missing, false); err == nil {
		t.Error("the trace alone, missing: accepted")
	}
	present := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(present, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, asked := range []bool{false, true} {
		if wls, note, err := checkTrace([]string{"multi-turn", "trace"}, present, asked); err != nil || len(wls) != 2 || note != "" {
			t.Errorf("trace present (asked %v): %v %q %v", asked, wls, note, err)
		}
	}
	if wls, note, err := checkTrace([]string{"multi-turn"}, missing, true); err != nil || len(wls) != 1 || note != "" {
		t.Errorf("multi-turn alone: %v %q %v", wls, note, err)
	}
}
