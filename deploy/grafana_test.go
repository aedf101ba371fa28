package deploy

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
)

const dashboardPath = "grafana/prefixring.json"

// dashboard is the part of Grafana's dashboard JSON the tests read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// metricNames lists every metric the dashboard's queries and variables
// read, with where each is read.
func (d dashboard) metricNames(t *testing.T) map[string][]string {
	t.Helper()
	names := map[string][]string{}
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			ns, err := metricNames(tg.Expr)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
			}
			for _, n := range ns {
				names[n] = append(names[n], "panel "+p.Title)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Errorf("variable %s: query %s", v.Name, v.Query)
			}
		}
		ns, err := variableMetricNames(q.Query)
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
		for _, n := range ns {
			names[n] = append(names[n], "variable "+v.Name)
		}
	}
	return names
}

// TestDashboardShape: panels Grafana can lay out and query, covering what
// an operator of prefixring and vLLM looks at.
func TestDashboardShape(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed to import and link it", d.UID, d.Title)
	}
	ids, refs := map[int]bool{}, 0
	for _, p := range d.allPanels() {
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d missing or taken", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if g := p.GridPos; g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside Grafana's 24 columns", p.Title, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not query the dashboard's datasource variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		seen := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" || seen[tg.RefID] {
				t.Errorf("panel %q: query %q with refId %q (empty or repeated)", p.Title, tg.Expr, tg.RefID)
			}
			seen[tg.RefID] = true
			refs++
		}
	}
	names := d.metricNames(t)
	for _, want := range []string{
		"prefixring_requests_total",                   // requests by decision, spill ratio
		"prefixring_inflight_requests",                // per-endpoint in-flight requests
		"prefixring_load",                             // per-endpoint load the bound reads
		"prefixring_upstream_ttfb_seconds_bucket",     // time to first byte
		"prefixring_gossip_members",                   // gossip member count
		"prefixring_gossip_peer_state_age_seconds",    // gossip state age
		"prefixring_ejections_total",                  // ejections
		"vllm:prefix_cache_hits_total",                // prefix cache hit rate
		"vllm:prefix_cache_queries_total",             //
		"vllm:num_requests_waiting",                   // queue depth
		"vllm:kv_cache_usage_perc",                    // KV usage
		"vllm:time_to_first_token_seconds_bucket",     //
		"prefixring_upstream_duration_seconds_bucket", //
	} {
		if _, ok := names[want]; !ok {
			t.Errorf("no panel reads %s", want)
		}
	}
	if !strings.Contains(strings.Join(exprs(d), "\n"), `decision="spill"`) {
		t.Error("no query selects decision=\"spill\" (the spill ratio)")
	}
	t.Logf("%d panels, %d queries, %d metric names", len(ids), refs, len(names))
}

func exprs(d dashboard) []string {
	var out []string
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	return out
}

// TestDashboardMetricsAreExported: every metric the dashboard reads is in
// a real scrape, the router's names from the routers' admin listeners and
// vLLM's from the simulated vLLM server that reproduces its names.
func TestDashboardMetricsAreExported(t *testing.T) {
	names := readDashboard(t).metricNames(t)
	s := scrapeStack(t)
	var missing []string
	for n, where := range names {
		var got map[string]bool
		switch {
		case strings.HasPrefix(n, "prefixring_"):
			got = s.router
		case strings.HasPrefix(n, "vllm:"):
			got = s.engine
		default:
			t.Errorf("%s (%s): neither the router's nor vLLM's", n, strings.Join(where, ", "))
			continue
		}
		if !got[n] {
			missing = append(missing, n+" ("+strings.Join(where, ", ")+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("not in the scrape: %s", m)
	}
	if len(names) == 0 || len(s.router) == 0 || len(s.engine) == 0 {
		t.Fatalf("%d names, %d router series names, %d engine series names", len(names), len(s.router), len(s.engine))
	}
}

// operatorTargetLabels are the labels the Prometheus Operator puts on
// every series of a ServiceMonitor's targets.
var operatorTargetLabels = []string{"namespace", "service", "pod", "container", "endpoint", "job", "instance"}

// TestServiceMonitorsKeepTheMetricsLabels: a label of the scraped series
// that the Operator also sets (the router's endpoint) is renamed
// exported_<label> unless the ServiceMonitor honours labels, and the
// dashboard's "by (endpoint)" would group by the scrape port instead.
func TestServiceMonitorsKeepTheMetricsLabels(t *testing.T) {
	s := scrapeStack(t)
	m := kustomize(t, examplePath)
	for _, sm := range m.monitors {
		labels := s.engineLabels
		if sm.Name == routerName {
			labels = s.routerLabels
		}
		var clash []string
		for _, l := range operatorTargetLabels {
			if labels[l] {
				clash = append(clash, l)
			}
		}
		for _, ep := range sm.Spec.Endpoints {
			if len(clash) > 0 && !ep.HonorLabels {
				t.Errorf("ServiceMonitor %s port %s: the series carry %v, which the Operator would overwrite; set honorLabels", sm.Name, ep.Port, clash)
			}
		}
	}
	if !s.routerLabels["endpoint"] {
		t.Error("the router's series carry no endpoint label: the check above checks nothing")
	}
}
