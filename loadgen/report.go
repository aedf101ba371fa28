package loadgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is a run's summary; its JSON form is what --json writes and
// --compare reads.
type Report struct {
	URLs        []string `json:"urls"`
	Model       string   `json:"model"`
	Stream      bool     `json:"stream"`
	Concurrency int      `json:"concurrency,omitempty"`
	Rate        float64  `json:"rate,omitempty"`
	Label       string   `json:"label,omitempty"`
	Workload    string   `json:"workload,omitempty"`

	Sessions  int            `json:"sessions"`
	Requests  int            `json:"requests"`
	OK        int            `json:"ok"`
	Errors    map[string]int `json:"errors"`
	Verified  int            `json:"verified"`  // responses whose X-Request-Id echo was checked
	Failovers int            `json:"failovers"` // refused connections moved to the next URL
	NewConns  int            `json:"new_conns"` // requests sent on a connection opened for them
	Duration  float64        `json:"duration_s"`

	TTFT Dist `json:"ttft_ms"`
	ITL  Dist `json:"itl_ms"`
	E2E  Dist `json:"e2e_ms"`

	OutputTokens    int     `json:"output_tokens"`
	OutputTokensSec float64 `json:"output_tokens_per_s"`
	RequestsSec     float64 `json:"requests_per_s"`
	// PromptTokens and CachedTokens are summed from the responses' usage
	// (prompt_tokens_details.cached_tokens, where the server reports it).
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	CachedShare  float64 `json:"cached_share"`
	// LaterTurns counts the successful turns after a conversation's first;
	// Stayed those that reached the endpoint its first turn reached.
	LaterTurns int     `json:"later_turns"`
	Stayed     int     `json:"stayed"`
	StayShare  float64 `json:"stay_share"`
	// Endpoints counts successful requests by the endpoint that served them.
	Endpoints map[string]int `json:"endpoints"`
	// Engine is what the engines' own metrics counted during the run.
	Engine *EngineCounts `json:"engine,omitempty"`
	// FirstErrors holds a few error messages, one per kind.
	FirstErrors map[string]string `json:"first_errors,omitempty"`

	// Samples are the requests one by one, by session and turn; they stay
	// out of the report's JSON (see [Report.WriteSamples]).
	Samples []Sample `json:"-"`
}

// Dist is a latency distribution in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

func dist(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	// Nearest rank, as prefixring eval's quantiles: the ceil(p·n)-th
	// smallest.
	q := func(p float64) float64 {
		return ms(ds[min(max(int(math.Ceil(p*float64(len(ds))))-1, 0), len(ds)-1)])
	}
	return Dist{N: len(ds), Mean: ms(sum) / float64(len(ds)), P50: q(0.50), P90: q(0.90), P95: q(0.95), P99: q(0.99), Max: ms(ds[len(ds)-1])}
}

func summarize(cfg *Config, samples []Sample, wall time.Duration) *Report {
	rep := &Report{URLs: cfg.URLs, Model: cfg.Model, Stream: cfg.Stream, Concurrency: cfg.Concurrency, Rate: cfg.Rate,
		Requests: len(samples), Errors: map[string]int{}, Endpoints: map[string]int{}, Duration: wall.Seconds()}
	sort.Slice(samples, func(i, j int) bool {
		if samples[i].Session != samples[j].Session {
			return samples[i].Session < samples[j].Session
		}
		return samples[i].Turn < samples[j].Turn
	})
	var ttft, itl, e2e []time.Duration
	home := map[int]string{}
	for _, s := range samples {
		if s.Verified {
			rep.Verified++
		}
		rep.Failovers += s.Failovers
		if s.NewConn {
			rep.NewConns++
		}
		if s.Err != "" {
			rep.Errors[s.Err]++
			if rep.FirstErrors == nil {
				rep.FirstErrors = map[string]string{}
			}
			if _, ok := rep.FirstErrors[s.Err]; !ok {
				rep.FirstErrors[s.Err] = s.Detail
			}
			continue
		}
		rep.OK++
		ttft, e2e = append(ttft, s.TTFT), append(e2e, s.E2E)
		if s.ITL > 0 {
			itl = append(itl, s.ITL)
		}
		rep.OutputTokens += s.OutputTokens
		rep.PromptTokens += s.PromptTokens
		rep.CachedTokens += s.CachedTokens
		rep.Endpoints[s.Endpoint]++
		if s.Turn == 0 {
			home[s.Session] = s.Endpoint
		} else if h, ok := home[s.Session]; ok {
			rep.LaterTurns++
			if h == s.Endpoint {
				rep.Stayed++
			}
		}
	}
	rep.TTFT, rep.ITL, rep.E2E = dist(ttft), dist(itl), dist(e2e)
	rep.Samples = samples
	if wall > 0 {
		rep.OutputTokensSec = float64(rep.OutputTokens) / wall.Seconds()
		rep.RequestsSec = float64(rep.OK) / wall.Seconds()
	}
	if rep.PromptTokens > 0 {
		rep.CachedShare = float64(rep.CachedTokens) / float64(rep.PromptTokens)
	}
	if rep.LaterTurns > 0 {
		rep.StayShare = float64(rep.Stayed) / float64(rep.LaterTurns)
	}
	return rep
}

// Failed is the number of requests that did not succeed.
func (r *Report) Failed() int { return r.Requests - r.OK }

// WriteJSON writes r to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteSamples writes r's requests to path, one JSON object a line, by
// session and turn: what a tail's requests were, where they went and when.
func (r *Report) WriteSamples(path string) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, s := range r.Samples {
		if err := enc.Encode(s); err != nil {
			return err
		}
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// ReadReport reads a report written by [Report.WriteJSON].
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: not a load report: %w", path, err)
	}
	return &r, nil
}

// Print writes r as a table.
func (r *Report) Print(w io.Writer) { PrintCompare(w, r) }

// PrintCompare writes reports side by side, one column each.
func PrintCompare(w io.Writer, reps ...*Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	row := func(name string, f func(*Report) string) {
		cells := []string{name}
		for _, r := range reps {
			cells = append(cells, f(r))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	row("", func(r *Report) string { return cmp(r.Label, strings.Join(r.URLs, ",")) })
	row("requests ok / sent", func(r *Report) string { return fmt.Sprintf("%d / %d", r.OK, r.Requests) })
	row("errors", func(r *Report) string { return errString(r.Errors) })
	row("TTFT p50 / p99 ms", func(r *Report) string { return fmt.Sprintf("%.0f / %.0f", r.TTFT.P50, r.TTFT.P99) })
	row("TTFT mean ms", func(r *Report) string { return fmt.Sprintf("%.0f", r.TTFT.Mean) })
	row("ITL p50 / p99 ms", func(r *Report) string {
		if r.ITL.N == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f / %.1f", r.ITL.P50, r.ITL.P99)
	})
	row("E2E p50 / p99 ms", func(r *Report) string { return fmt.Sprintf("%.0f / %.0f", r.E2E.P50, r.E2E.P99) })
	row("output tokens/s", func(r *Report) string { return fmt.Sprintf("%.0f", r.OutputTokensSec) })
	row("cached share (responses)", func(r *Report) string {
		if r.PromptTokens == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", r.CachedShare)
	})
	row("cached share (engine metrics)", func(r *Report) string {
		if r.Engine == nil || r.Engine.PromptTokens == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", r.Engine.CachedShare)
	})
	row("turns on their conversation's engine", func(r *Report) string {
		if r.LaterTurns == 0 {
			return "-"
		}
		return fmt.Sprintf("%d / %d", r.Stayed, r.LaterTurns)
	})
	row("responses checked (X-Request-Id)", func(r *Report) string { return fmt.Sprintf("%d", r.Verified) })
	row("wall s", func(r *Report) string { return fmt.Sprintf("%.1f", r.Duration) })
	_ = tw.Flush()
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func errString(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
