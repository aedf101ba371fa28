package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// EngineCounts is what the engines' own Prometheus counters say about
// prompt tokens: how many were asked for and how many came from the
// prefix cache, summed over the engines.
type EngineCounts struct {
	// Source names the metric family read: "vllm" or "llamacpp".
	Source       string  `json:"source"`
	PromptTokens float64 `json:"prompt_tokens"`
	CachedTokens float64 `json:"cached_tokens"`
	CachedShare  float64 `json:"cached_share"`
}

// The counters read. vLLM counts queried and hit tokens
// (vllm:prefix_cache_queries_total, ..._hits_total; the gpu_ names are
// vLLM 0.8's); llama.cpp counts computed prompt tokens apart from cached
// ones (llamacpp:prompt_tokens_total excludes llamacpp:prompt_tokens_cached_total).
var (
	vllmQueries = []string{"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"}
	vllmHits    = []string{"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"}
)

const (
	llamaComputed = "llamacpp:prompt_tokens_total"
	llamaCached   = "llamacpp:prompt_tokens_cached_total"
)

type scrape struct {
	source         string
	prompt, cached float64
}

func (a scrape) minus(b scrape) *EngineCounts {
	c := &EngineCounts{Source: a.source, PromptTokens: a.prompt - b.prompt, CachedTokens: a.cached - b.cached}
	if c.PromptTokens > 0 {
		c.CachedShare = c.CachedTokens / c.PromptTokens
	}
	return c
}

// scrapeAll sums the prefix-cache counters of every URL.
func scrapeAll(ctx context.Context, urls []string) (scrape, error) {
	var sum scrape
	for _, u := range urls {
		s, err := scrapeOne(ctx, metricsURL(u))
		if err != nil {
			return sum, err
		}
		if sum.source != "" && s.source != sum.source {
			return sum, fmt.Errorf("loadgen: engine metrics: %s exports %s counters, an earlier URL %s ones", u, s.source, sum.source)
		}
		sum.source = s.source
		sum.prompt += s.prompt
		sum.cached += s.cached
	}
	return sum, nil
}

// metricsURL adds /metrics to a URL given as a server's root.
func metricsURL(s string) string {
	if u, err := url.Parse(s); err == nil && (u.Path == "" || u.Path == "/") {
		u.Path = "/metrics"
		return u.String()
	}
	return s
}

func scrapeOne(ctx context.Context, u string) (scrape, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return scrape{}, fmt.Errorf("loadgen: engine metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return scrape{}, fmt.Errorf("loadgen: engine metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return scrape{}, fmt.Errorf("loadgen: engine metrics: %s: status %d (llama-server needs --metrics)", u, resp.StatusCode)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return scrape{}, fmt.Errorf("loadgen: engine metrics: %s: %w", u, err)
	}
	for i := range vllmQueries {
		q, okq := SumMetric(fams, vllmQueries[i])
		h, okh := SumMetric(fams, vllmHits[i])
		if okq && okh {
			return scrape{source: "vllm", prompt: q, cached: h}, nil
		}
	}
	computed, okc := SumMetric(fams, llamaComputed)
	cached, okh := SumMetric(fams, llamaCached)
	if okc && okh {
		return scrape{source: "llamacpp", prompt: computed + cached, cached: cached}, nil
	}
	return scrape{}, fmt.Errorf("loadgen: engine metrics: %s has neither vLLM's prefix-cache counters (%s) nor llama.cpp's (%s, %s)",
		u, vllmHits[0], llamaComputed, llamaCached)
}

// SumMetric adds the values of every sample of the counter, gauge or
// untyped metric name in a parsed Prometheus exposition, whatever their
// labels; false when the exposition has no such metric.
func SumMetric(fams map[string]*dto.MetricFamily, name string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	var v float64
	for _, m := range f.GetMetric() {
		switch {
		case m.GetCounter() != nil:
			v += m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			v += m.GetUntyped().GetValue()
		case m.GetGauge() != nil:
			v += m.GetGauge().GetValue()
		}
	}
	return v, true
}
