package eval

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"html"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WriteReport writes results.json, report.md and index.html (SVG charts
// drawn by gonum/plot) into dir, creating it.
func WriteReport(dir string, results []Result, command string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(Markdown(results, command)), 0o644); err != nil {
		return err
	}
	charts, err := Charts(results)
	if err != nil {
		return err
	}
	var h strings.Builder
	h.WriteString("<!doctype html><meta charset=utf-8><title>prefixring eval</title>\n<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}svg{max-width:100%;height:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style>\n")
	h.WriteString("<h1>prefixring eval</h1>\n<p><code>" + html.EscapeString(command) + "</code></p>\n")
	for _, c := range charts {
		h.WriteString("<h2>" + html.EscapeString(c.Title) + "</h2>\n" + c.SVG + "\n")
	}
	h.WriteString("<h2>All runs</h2>\n" + htmlTable(results))
	return os.WriteFile(filepath.Join(dir, "index.html"), []byte(h.String()), 0o644)
}

// Chart is one titled SVG.
type Chart struct{ Title, SVG string }

// axisKey groups results that differ only in one axis and the policy.
func otherAxes(r Result, except string) string {
	parts := map[string]string{
		"workload": r.Workload, "endpoints": fmt.Sprint(r.Endpoints), "routers": fmt.Sprint(r.Routers),
		"rate": fmt.Sprint(r.RateScale), "c": fmt.Sprint(r.LoadFactor), "gossip": fmt.Sprint(r.GossipIntervalMS),
	}
	delete(parts, except)
	keys := make([]string, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var s []string
	for _, k := range keys {
		s = append(s, k+"="+parts[k])
	}
	return strings.Join(s, " ")
}

func policies(results []Result) []string {
	var ps []string
	for _, r := range results {
		if !slices.Contains(ps, r.Policy) {
			ps = append(ps, r.Policy)
		}
	}
	return ps
}

// Charts draws the study's charts that the sweep has the axes for.
func Charts(results []Result) ([]Chart, error) {
	var out []Chart
	if len(results) == 0 {
		return nil, nil
	}
	// TTFT CDF per policy, at the most router replicas and the highest load
	// of the first workload.
	maxR, maxS := 0, 0.0
	for _, r := range results {
		maxR, maxS = max(maxR, r.Routers), max(maxS, r.RateScale)
	}
	ref := results[0]
	cdf := plot.New()
	cdf.X.Label.Text, cdf.Y.Label.Text = "TTFT (ms, log)", "share of requests"
	cdf.X.Scale, cdf.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
	cdf.Legend.Top, cdf.Legend.Left = false, false // bottom right: the curves rise from the left
	for i, p := range policies(results) {
		for _, r := range results {
			if r.Policy != p || r.Routers != maxR || r.RateScale != maxS || r.Workload != ref.Workload ||
				r.LoadFactor != ref.LoadFactor || r.GossipIntervalMS != ref.GossipIntervalMS || len(r.TTFTsMS) == 0 {
				continue
			}
			pts := make(plotter.XYs, 0, 200)
			for k := 0; k < 200; k++ {
				q := float64(k+1) / 200
				pts = append(pts, plotter.XY{X: max(quantile(r.TTFTsMS, q), 0.1), Y: q})
			}
			if err := addLine(cdf, p, i, pts); err != nil {
				return nil, err
			}
			break
		}
	}
	svg, err := render(cdf)
	if err != nil {
		return nil, err
	}
	out = append(out, Chart{fmt.Sprintf("TTFT CDF per policy (%s, %d routers, rate ×%g)", ref.Workload, maxR, maxS), svg})

	for _, ax := range []struct {
		name, title, ylabel string
		x                   func(Result) float64
		y                   func(Result) float64
	}{
		{"c", "hit rate against load factor c", "hit rate", func(r Result) float64 { return r.LoadFactor }, func(r Result) float64 { return r.HitRate }},
		{"routers", "hit rate against router replicas", "hit rate", func(r Result) float64 { return float64(r.Routers) }, func(r Result) float64 { return r.HitRate }},
		{"rate", "mean TTFT against load (rate scale)", "mean TTFT (ms)", func(r Result) float64 { return r.RateScale }, func(r Result) float64 { return r.TTFTMeanMS }},
		{"gossip", "TTFT p99 against gossip interval", "TTFT p99 (ms)", func(r Result) float64 { return r.GossipIntervalMS }, func(r Result) float64 { return r.TTFTP99MS }},
	} {
		c, ok, err := sweepChart(results, ax.name, ax.ylabel, ax.x, ax.y)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, Chart{ax.title + c.Title, c.SVG})
		}
	}
	return out, nil
}

// sweepChart draws y against one axis, a line per policy, for the first
// group of results that varies that axis.
func sweepChart(results []Result, axis, ylabel string, x, y func(Result) float64) (Chart, bool, error) {
	groups := map[string][]Result{}
	var order []string
	for _, r := range results {
		k := otherAxes(r, axis)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	for _, k := range order {
		g := groups[k]
		xs := map[float64]bool{}
		for _, r := range g {
			xs[x(r)] = true
		}
		if len(xs) < 2 {
			continue
		}
		p := plot.New()
		p.X.Label.Text, p.Y.Label.Text = axis, ylabel
		p.Legend.Left, p.Legend.YOffs = true, vg.Points(60) // left, between the lines
		for i, pol := range policies(g) {
			var pts plotter.XYs
			for _, r := range g {
				if r.Policy == pol && !math.IsNaN(y(r)) {
					pts = append(pts, plotter.XY{X: x(r), Y: y(r)})
				}
			}
			slices.SortFunc(pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
			if err := addLine(p, pol, i, pts); err != nil {
				return Chart{}, false, err
			}
		}
		svg, err := render(p)
		return Chart{" (" + k + ")", svg}, true, err
	}
	return Chart{}, false, nil
}

func addLine(p *plot.Plot, name string, i int, pts plotter.XYs) error {
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	c := plotutil.Color(i)
	if name == "chwbl" {
		c = color.RGBA{R: 200, A: 255}
		l.Width = vg.Points(2.5)
	}
	l.Color, s.Color = c, c
	l.Dashes = plotutil.Dashes(i)
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

func render(p *plot.Plot) (string, error) {
	w, err := p.WriterTo(7*vg.Inch, 4*vg.Inch, "svg")
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		return "", err
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:] // drop the XML prolog inside HTML
	}
	return s, nil
}

var tableCols = []string{"policy", "workload", "endpoints", "routers", "rate_scale", "load_factor", "gossip_interval_ms",
	"hit_rate", "ideal_hit_rate", "ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms", "output_tokens_per_s",
	"queue_depth_mean", "imbalance", "spill_rate", "agreement"}

func row(r Result) []string {
	f := func(x float64) string { return fmt.Sprintf("%.3g", x) }
	agree := "—"
	if r.Agreement != nil {
		agree = fmt.Sprintf("%.3f", *r.Agreement)
	}
	return []string{r.Policy, r.Workload, fmt.Sprint(r.Endpoints), fmt.Sprint(r.Routers), f(r.RateScale), f(r.LoadFactor),
		f(r.GossipIntervalMS), fmt.Sprintf("%.3f", r.HitRate), fmt.Sprintf("%.3f", r.IdealHitRate), fmt.Sprintf("%.0f", r.TTFTMeanMS),
		fmt.Sprintf("%.0f", r.TTFTP50MS), fmt.Sprintf("%.0f", r.TTFTP99MS), fmt.Sprintf("%.0f", r.E2EP99MS),
		fmt.Sprintf("%.0f", r.OutputTokensPerS), fmt.Sprintf("%.2f", r.QueueDepthMean), fmt.Sprintf("%.2f", r.Imbalance),
		fmt.Sprintf("%.3f", r.SpillRate), agree}
}

func htmlTable(results []Result) string {
	var b strings.Builder
	b.WriteString("<table><tr>")
	for _, c := range tableCols {
		b.WriteString("<th>" + c + "</th>")
	}
	b.WriteString("</tr>\n")
	for _, r := range results {
		b.WriteString("<tr>")
		for _, c := range row(r) {
			b.WriteString("<td>" + html.EscapeString(c) + "</td>")
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n")
	return b.String()
}
