package engine

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// calibrationRow is one measured step of shared/calibration (copied to
// testdata/): Llama-3.1-8B's shape on one H100, run as a CUDA graph.
type calibrationRow struct {
	Kind   string  `json:"kind"`
	New    int     `json:"new"`
	Cached int     `json:"cached"`
	B, C   int     `json:"-"`
	MS     float64 `json:"ms"`
}

// loadCalibration reads the rows a serving engine approaches: the
// CUDA-graph prefill floors and the decode steps (not the eager
// transformers prefills, which pay ~25 ms of launches an engine hides).
func loadCalibration(t *testing.T) []calibrationRow {
	t.Helper()
	f, err := os.Open("testdata/h100-llama-3.1-8b.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []calibrationRow
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			calibrationRow
			B int `json:"B"`
			C int `json:"C"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind == "prefill_floor" || r.Kind == "decode" {
			r.calibrationRow.B, r.calibrationRow.C = r.B, r.C
			rows = append(rows, r.calibrationRow)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 14 {
		t.Fatalf("%d calibration rows, want 8 prefill floors and 6 decodes", len(rows))
	}
	return rows
}

// batch is the step the engine's scheduler would build for the row.
func (r calibrationRow) batch() Batch {
	if r.Kind == "decode" {
		return Batch{DecodeSeqs: r.B, DecodeContext: int64(r.B * r.C)}
	}
	n, c := int64(r.New), int64(r.Cached)
	return Batch{PrefillTokens: r.New, PrefillPairs: n*c + n*(n+1)/2, PrefillContext: c}
}

func (r calibrationRow) String() string {
	if r.Kind == "decode" {
		return fmt.Sprintf("decode B=%d C=%d", r.B, r.C)
	}
	return fmt.Sprintf("prefill %d new over %d cached", r.New, r.Cached)
}

// worstRatio is the largest predicted/measured or measured/predicted over
// the rows. The profile's step overhead (scheduler, sampling) is left out:
// the floors do not include it.
func worstRatio(p Profile, rows []calibrationRow, log func(string, ...any)) float64 {
	worst := 1.0
	for _, r := range rows {
		pred := float64(p.StepTime(r.batch())-p.StepOverhead) / float64(time.Millisecond)
		ratio := pred / r.MS
		log("%-34s measured %7.1f ms  predicted %7.1f ms  %.2f", r, r.MS, pred, ratio)
		worst = max(worst, ratio, 1/ratio)
	}
	return worst
}

// The profile predicts every measured step within 10%, short suffixes over
// long cached prefixes included; the uncalibrated roofline (MFU 0.5, MBU
// 0.8, cached KV read at full speed) missed those by 1.5-2.2x.
func TestProfileMatchesCalibration(t *testing.T) {
	rows := loadCalibration(t)
	if w := worstRatio(Llama31_8B_H100(), rows, t.Logf); w > 1.10 {
		t.Errorf("worst predicted/measured ratio %.2f, want within 1.10", w)
	}
	old := Llama31_8B_H100()
	old.MFU, old.MBU, old.PrefillKVBU = 0.5, 0.8, 0
	t.Log("uncalibrated:")
	if w := worstRatio(old, rows, t.Logf); w < 2 {
		t.Errorf("the uncalibrated profile's worst ratio is %.2f; the check would not catch it", w)
	}
}

// A cache hit on a long prompt gains what the hardware gives: cold/warm of
// an 8,192-token prompt (8,176 cached) is 23x measured at the floor.
func TestCacheHitGainMatchesMeasurement(t *testing.T) {
	p := Llama31_8B_H100()
	cold := p.StepTime(calibrationRow{New: 8192}.batch()) - p.StepOverhead
	warm := p.StepTime(calibrationRow{New: 16, Cached: 8176}.batch()) - p.StepOverhead
	const measured = 246.076 / 10.464
	if gain := float64(cold) / float64(warm); gain < measured/1.15 || gain > measured*1.15 {
		t.Errorf("cold/warm %v/%v = %.1fx, measured %.1fx", cold, warm, gain, measured)
	}
	if !strings.Contains(p.Name, "h100") {
		t.Errorf("profile %q", p.Name)
	}
}
