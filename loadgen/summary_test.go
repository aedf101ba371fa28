package loadgen

import (
	"strings"
	"testing"
	"time"
)

// A report's figures count the requests that succeeded: a failed one
// counts in Requests, Errors and Failed and nowhere else. A later turn
// stayed when it reached the endpoint its conversation's first turn
// reached; the shares divide by the answered turns.
func TestSummarizeCountsAnsweredRequests(t *testing.T) {
	ms := func(x int) time.Duration { return time.Duration(x) * time.Millisecond }
	ok := func(session, turn int, endpoint string, ttft, itl time.Duration, prompt, cached int) Sample {
		return Sample{Session: session, Turn: turn, Endpoint: endpoint, TTFT: ttft, E2E: ms(100), ITL: itl, PromptTokens: prompt, CachedTokens: cached, OutputTokens: 5}
	}
	samples := []Sample{
		ok(0, 0, "a", ms(10), ms(2), 100, 0), ok(0, 1, "a", ms(20), ms(4), 200, 100), ok(0, 2, "b", ms(30), 0, 300, 0), // one later turn stayed, one moved
		ok(1, 0, "b", ms(40), ms(6), 100, 100), ok(1, 1, "b", ms(50), ms(8), 200, 100), // stayed
		{Session: 1, Turn: 2, Endpoint: "b", Err: ErrConnect, Detail: "refused"}, // failed, on its first turn's endpoint
		{Session: 2, Turn: 0, Err: ErrConnect, Detail: "refused"},
	}
	rep := summarize(&Config{}, samples, 2*time.Second)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"requests", float64(rep.Requests), 7}, {"ok", float64(rep.OK), 5}, {"failed", float64(rep.Failed()), 2},
		{"TTFT n", float64(rep.TTFT.N), 5}, {"TTFT mean", rep.TTFT.Mean, 30}, {"TTFT max", rep.TTFT.Max, 50},
		{"ITL n", float64(rep.ITL.N), 4}, {"ITL mean", rep.ITL.Mean, 5},
		{"later turns", float64(rep.LaterTurns), 3}, {"stayed", float64(rep.Stayed), 2}, {"stay share", rep.StayShare, 2.0 / 3},
		{"cached share", rep.CachedShare, 300.0 / 900}, {"output tokens per s", rep.OutputTokensSec, 12.5}, {"requests per s", rep.RequestsSec, 2.5},
		{"endpoint a", float64(rep.Endpoints["a"]), 2}, {"endpoint b", float64(rep.Endpoints["b"]), 3},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if rep.Errors[ErrConnect] != 2 || len(rep.Errors) != 1 {
		t.Errorf("errors %v, want 2 of kind %s", rep.Errors, ErrConnect)
	}
}

// The table the demo prints puts each figure in its row: the published
// ratios are read from it.
func TestPrintCompareRows(t *testing.T) {
	a := &Report{Label: "round-robin", Requests: 768, OK: 768, TTFT: Dist{Mean: 78, P50: 37, P95: 300, P99: 405}}
	b := &Report{Label: "chwbl", Requests: 768, OK: 767, TTFT: Dist{Mean: 47, P50: 20, P95: 250, P99: 303}}
	var out strings.Builder
	PrintCompare(&out, a, b)
	for row, want := range map[string]string{"requests ok / sent": "768 / 768 767 / 768", "TTFT p50 / p99 ms": "37 / 405 20 / 303", "TTFT mean ms": "78 47"} {
		found := false
		for _, line := range strings.Split(out.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, row+" "); ok {
				found = strings.Join(strings.Fields(rest), " ") == want
			}
		}
		if !found {
			t.Errorf("row %q does not read %q:\n%s", row, want, out.String())
		}
	}
}
