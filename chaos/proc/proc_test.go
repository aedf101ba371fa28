package proc

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/prefixring/prefixring/chaos"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The table shows every row, its figures sorted, skipped scenarios and
// broken invariants plainly.
func TestTable(t *testing.T) {
	rows := []Row{
		{Scenario: "replica-kill", Tally: chaos.Tally{Requests: 10, OK: 9, AtCrash: 1}, Figures: map[string]any{"b": 2.5, "a": 1}},
		{Scenario: "partition", Skipped: "needs network namespaces"},
		{Scenario: "slow-engine", Tally: chaos.Tally{Requests: 5, OK: 4, Failed: 1}, Figures: map[string]any{}, Problems: []string{"p99 rose"}},
	}
	out := Table(rows)
	for _, want := range []string{"replica-kill", "a=1 b=2.50", "partition            skipped: needs network namespaces", "INVARIANT BROKEN: p99 rose"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !rows[2].Failed() || rows[0].Failed() {
		t.Error("Failed misreports")
	}
}

func TestRunRefusesUnknownScenarios(t *testing.T) {
	if _, err := Run(context.Background(), Config{}, []string{"nope"}, nil); err == nil || !strings.Contains(err.Error(), "replica-kill") {
		t.Fatalf("%v", err)
	}
	// A netns scenario without namespaces is skipped, not run.
	rows, err := Run(context.Background(), Config{}, []string{"partition"}, nil)
	if err != nil || len(rows) != 1 || rows[0].Skipped == "" {
		t.Fatalf("%v %+v", err, rows)
	}
}

// A cluster that fails to start returns the error and removes what it
// started (it panicked on a nil cluster, leaving the processes running).
func TestStartFailureCleansUp(t *testing.T) {
	c, err := Start(Config{Bin: "/nonexistent/prefixring", Replicas: 1, Engines: 1})
	if err == nil || c != nil {
		t.Fatalf("Start with no binary: %v, %v", c, err)
	}
}
