package eval

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"html"
	"image/color"
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

// series is one line of a chart.
type series struct {
	name string
	pts  plotter.XYs
}

// lineChart draws series on one plot; a line named prefixring's policy is
// drawn bold red.
func lineChart(title, xlabel, ylabel string, ss []series, logX, logY bool) (Chart, error) {
	p := plot.New()
	p.X.Label.Text, p.Y.Label.Text = xlabel, ylabel
	if logX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
	}
	if logY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.ThumbnailWidth = vg.Points(20)
	for i, sr := range ss {
		if len(sr.pts) == 0 {
			continue
		}
		slices.SortFunc(sr.pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		if err := addLine(p, sr.name, i, sr.pts); err != nil {
			return Chart{}, err
		}
	}
	svg, err := render(p)
	return Chart{Title: title, SVG: svg}, err
}

// positive keeps a value drawable on a log axis.
func positive(x float64) float64 { return max(x, 0.1) }

// Charts draws the study's charts from the grids it finds.
func Charts(results []Result) ([]Chart, error) {
	all := set(results)
	if len(all) > 0 { // one seed and one fleet: the first run's
		seed, kv := all[0].Seed, all[0].KVBlocks
		all = all.where(func(r Result) bool { return r.Seed == seed && r.KVBlocks == kv && r.Concurrency == 0 })
	}
	pol := all.grid(GridPolicies)
	if len(pol) == 0 {
		pol = all.grid(GridCustom)
	}
	var out []Chart
	add := func(c Chart, err error) error {
		if err == nil {
			out = append(out, c)
		}
		return err
	}
	r3 := pol.where(func(r Result) bool {
		return r.Routers == slices.Max(values(pol, func(r Result) int { return r.Routers })) || r.Routers == 3
	})
	for _, w := range values(r3, func(r Result) string { return r.Workload }) {
		ws := r3.where(func(r Result) bool { return r.Workload == w })
		rates := values(ws, func(r Result) float64 { return r.RateScale })
		rate := rates[0]
		for _, x := range rates { // the highest load below overload
			if x < overloadRate && x > rate {
				rate = x
			}
		}
		// TTFT CDF per policy.
		var cdf []series
		for _, r := range ws.where(func(r Result) bool { return r.RateScale == rate }) {
			if len(r.TTFTsMS) == 0 {
				continue
			}
			pts := make(plotter.XYs, 0, 200)
			for k := range 200 {
				q := float64(k+1) / 200
				pts = append(pts, plotter.XY{X: positive(quantile(r.TTFTsMS, q)), Y: q})
			}
			cdf = append(cdf, series{r.Policy, pts})
		}
		if err := add(lineChart(fmt.Sprintf("TTFT CDF per policy: %s, ×%g, %d routers", short(w), rate, ws[0].Routers), "TTFT (ms, log)", "share of requests", cdf, true, false)); err != nil {
			return nil, err
		}
		// Mean TTFT against load.
		var load []series
		for _, p := range values(ws, func(r Result) string { return r.Policy }) {
			var pts plotter.XYs
			for _, r := range ws.where(func(r Result) bool { return r.Policy == p }) {
				pts = append(pts, plotter.XY{X: r.RateScale, Y: positive(r.TTFTMeanMS)})
			}
			load = append(load, series{p, pts})
		}
		if len(rates) > 1 {
			if err := add(lineChart("Mean TTFT against load: "+short(w), "rate scale", "mean TTFT (ms, log)", load, false, true)); err != nil {
				return nil, err
			}
		}
	}
	// Hit rate against router replicas, at the lowest load of the replicas grid.
	rep := append(append(set{}, all.grid(GridReplicas)...), pol...)
	for _, w := range values(all.grid(GridReplicas), func(r Result) string { return r.Workload }) {
		rate := all.grid(GridReplicas)[0].RateScale
		ws := rep.where(func(r Result) bool { return r.Workload == w && r.RateScale == rate })
		var ss []series
		for _, p := range values(all.grid(GridReplicas), func(r Result) string { return r.Policy }) {
			var pts plotter.XYs
			seen := map[int]bool{}
			for _, r := range ws.where(func(r Result) bool { return r.Policy == p }) {
				if !seen[r.Routers] && r.Key == DefaultKey && r.View == string(defaults().Views[0]) {
					seen[r.Routers] = true
					pts = append(pts, plotter.XY{X: float64(r.Routers), Y: r.HitRate})
				}
			}
			ss = append(ss, series{p, pts})
		}
		if err := add(lineChart(fmt.Sprintf("Hit rate against router replicas: %s, ×%g", short(w), rate), "router replicas", "hit rate", ss, false, false)); err != nil {
			return nil, err
		}
	}
	// Hit rate against c.
	if bound := all.grid(GridBound).where(func(r Result) bool { return r.MinBound == defaults().MinBounds[0] }); len(values(bound, func(r Result) float64 { return r.LoadFactor })) > 1 {
		var ss []series
		for _, w := range values(bound, func(r Result) string { return r.Workload }) {
			for _, rate := range values(bound, func(r Result) float64 { return r.RateScale }) {
				var pts plotter.XYs
				for _, r := range bound.where(func(r Result) bool { return r.Workload == w && r.RateScale == rate }) {
					pts = append(pts, plotter.XY{X: r.LoadFactor, Y: r.HitRate})
				}
				ss = append(ss, series{fmt.Sprintf("%s ×%g", short(w), rate), pts})
			}
		}
		if err := add(lineChart("prefixring's hit rate against the load factor c", "c", "hit rate", ss, false, false)); err != nil {
			return nil, err
		}
	}
	// TTFT p99 against the gossip interval.
	if st := all.grid(GridStaleness); len(st) > 0 {
		var ss []series
		for _, w := range values(st, func(r Result) string { return r.Workload }) {
			for _, v := range values(st, func(r Result) string { return r.View }) {
				var pts plotter.XYs
				for _, r := range st.where(func(r Result) bool { return r.Workload == w && r.View == v }) {
					pts = append(pts, plotter.XY{X: r.GossipIntervalMS, Y: positive(r.TTFTP99MS)})
				}
				ss = append(ss, series{fmt.Sprintf("%s, %s", short(w), v), pts})
			}
		}
		if err := add(lineChart("prefixring's TTFT p99 against the gossip interval", "gossip interval (ms, log)", "TTFT p99 (ms, log)", ss, true, true)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func addLine(p *plot.Plot, name string, i int, pts plotter.XYs) error {
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	c := plotutil.Color(i)
	if name == prefixring {
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

var tableCols = []string{"seed", "grid", "policy", "workload", "fleet", "load", "endpoints", "routers", "rate_scale", "load_factor", "min_bound", "signal", "gossip_view",
	"gossip_interval_ms", "gossip_loss", "key", "hit_rate", "ideal_hit_rate", "ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "ttft_floor_p50_ms", "e2e_p99_ms",
	"output_tokens_per_s", "queue_depth_mean", "imbalance", "spill_rate", "bound_fired", "false_spill_rate", "agreement", "same_engine_turns"}

func row(r Result) []string {
	f := func(x float64) string { return fmt.Sprintf("%.3g", x) }
	return []string{fmt.Sprint(r.Seed), r.Grid, r.Policy, short(r.Workload), fleetOf(r), loadName(r), fmt.Sprint(r.Endpoints), fmt.Sprint(r.Routers), f(r.RateScale), f(r.LoadFactor), fmt.Sprint(r.MinBound),
		r.Signal, r.View, f(r.GossipIntervalMS), f(r.GossipLoss), r.Key, fmt.Sprintf("%.3f", r.HitRate), fmt.Sprintf("%.3f", r.IdealHitRate), ms0(r.TTFTMeanMS),
		ms0(r.TTFTP50MS), ms0(r.TTFTP99MS), ms0(r.TTFTFloorP50MS), ms0(r.E2EP99MS), fmt.Sprintf("%.0f", r.OutputTokensPerS), fmt.Sprintf("%.2f", r.QueueDepthMean),
		fmt.Sprintf("%.2f", r.Imbalance), fmt.Sprintf("%.3f", r.SpillRate), fptr(r.BoundFired, 3), fptr(r.FalseSpillRate, 3), fptr(r.Agreement, 3), fptr(r.SameEngineTurns, 2)}
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
