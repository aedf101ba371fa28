package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/internal/e2etest"
)

// --policy round-robin sends one prompt to every endpoint in turn; the
// default (chwbl) keeps it on one.
func TestPolicyFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	f := newFleet(t, 3)
	for _, tc := range []struct {
		args []string
		want int // distinct endpoints for 6 sequential requests of one prompt
	}{
		{nil, 1},
		{[]string{"--policy", "round-robin"}, 3},
		{[]string{"--policy", "chash"}, 1},
		{[]string{"--policy", "dualmap"}, 1},
		{[]string{"--policy", "chwbl-local"}, 1},
		{[]string{"--policy", "session"}, 3}, // no session header: least-load, in turn while idle
	} {
		r := startRouter(t, append([]string{"--endpoints", f.urls()}, tc.args...)...)
		seen := map[string]bool{}
		for range 6 {
			resp, body := post(t, r.URL, chat("same"))
			if resp.StatusCode != 200 {
				t.Fatalf("%v: %d %s", tc.args, resp.StatusCode, body)
			}
			seen[resp.Header.Get("X-Prefixring-Endpoint")] = true
		}
		if len(seen) != tc.want {
			t.Errorf("%v: one prompt went to %d endpoints %v, want %d", tc.args, len(seen), seen, tc.want)
		}
	}
	out, err := exec.Command(e2etest.Binary(t), "serve", "--policy", "nope", "--endpoints", f.urls()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `unknown policy "nope"`) {
		t.Fatalf("--policy nope: %v\n%s", err, out)
	}
}

// prefixring load, through the router, against simulated engines: every
// request answered and checked, the report written, and --compare reads it.
func TestLoadThroughTheRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	bin := e2etest.Binary(t)
	sims := startSims(t, 2)
	r := startRouter(t, "--endpoints", strings.Join(sims, ","))
	dir := t.TempDir()
	report, samples := filepath.Join(dir, "r.json"), filepath.Join(dir, "s.jsonl")
	out, err := exec.Command(bin, "load", "--url", r.URL, "--workload", "multi-turn", "--requests", "24",
		"--concurrency", "4", "--think-scale", "0", "--max-tokens", "4", "--stream", "--label", "chwbl",
		"--engine-metrics", strings.Join(sims, ","), "--json", report, "--samples", samples).CombinedOutput()
	if err != nil {
		t.Fatalf("load: %v\n%s", err, out)
	}
	var rep struct {
		Requests   int `json:"requests"`
		OK         int `json:"ok"`
		Verified   int `json:"verified"`
		LaterTurns int `json:"later_turns"`
		Stayed     int `json:"stayed"`
		Engine     struct {
			Source string `json:"source"`
		} `json:"engine"`
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 24 || rep.OK != 24 || rep.Verified != 24 || rep.Engine.Source != "vllm" {
		t.Fatalf("report %+v\n%s", rep, out)
	}
	// chwbl keeps a conversation on its engine while the bound allows.
	if rep.LaterTurns == 0 || rep.Stayed*2 < rep.LaterTurns {
		t.Errorf("%d of %d later turns stayed with their conversation's engine\n%s", rep.Stayed, rep.LaterTurns, out)
	}
	// --samples: one line a request, naming the engine the router chose
	// (its X-Prefixring-Endpoint, host:port).
	sb, err := os.ReadFile(samples)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sb)), "\n")
	if len(lines) != 24 {
		t.Fatalf("%d sample lines, want 24:\n%s", len(lines), sb)
	}
	for _, l := range lines {
		var s struct {
			Endpoint string `json:"endpoint"`
			Decision string `json:"decision"`
			TTFT     int64  `json:"ttft_ns"`
		}
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(sims, "http://"+s.Endpoint) || s.TTFT <= 0 || (s.Decision != "home" && s.Decision != "spill") {
			t.Errorf("sample %s: endpoint not one of %v, no TTFT, or no decision", l, sims)
		}
	}
	cmp, err := exec.Command(bin, "load", "--compare", report, report).CombinedOutput()
	if err != nil || !strings.Contains(string(cmp), "24 / 24") {
		t.Fatalf("--compare: %v\n%s", err, cmp)
	}
}

// startSims starts n `prefixring sim` processes and returns their roots.
func startSims(t *testing.T, n int) []string {
	var urls []string
	for i := range n {
		urls = append(urls, e2etest.Sim(t, fmt.Sprintf("sim-%d", i), "--log-level", "info").URL)
	}
	return urls
}

// prefixring load exits 1 when any request failed, so a script (make
// e2e-real, a CI job) can tell a run with errors from a clean one.
func TestLoadExitsOneWhenARequestFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`)
	}))
	defer srv.Close()
	app := &cli.App{
		Commands:       []*cli.Command{loadCommand()},
		Writer:         io.Discard,
		ExitErrHandler: func(*cli.Context, error) {}, // keep the test process alive
	}
	err := app.Run([]string{"prefixring", "load", "--url", srv.URL, "--model", "m", "--requests", "2",
		"--concurrency", "1", "--think-scale", "0", "--max-tokens", "4", "--progress=false"})
	var exit cli.ExitCoder
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("load with every request answered 500: %v, want exit code 1", err)
	}
}
