package vllm

import (
	"net/http/httptest"
	"testing"

	"github.com/prefixring/prefixring/upstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestMetricNamesMatchVLLM pins names, types and labels to vLLM's V1
// metrics. Sources: https://docs.vllm.ai/en/stable/usage/metrics/ and
// vllm/v1/metrics/loggers.py (PrometheusStatLogger, labelnames
// ["model_name", "engine"]); docs/design/metrics.md in the vLLM repo lists
// vllm:inter_token_latency_seconds, which replaced
// vllm:time_per_output_token_seconds, and vllm:kv_cache_usage_perc, which
// replaced vllm:gpu_cache_usage_perc. Python's client appends _total to
// counter names on exposition; the names below are as scraped.
func TestMetricNamesMatchVLLM(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(DefaultConfig(), reg, reg); err != nil {
		t.Fatal(err)
	}
	want := map[string]dto.MetricType{
		"vllm:num_requests_running":               dto.MetricType_GAUGE,
		"vllm:num_requests_waiting":               dto.MetricType_GAUGE,
		"vllm:kv_cache_usage_perc":                dto.MetricType_GAUGE,
		"vllm:prefix_cache_queries_total":         dto.MetricType_COUNTER,
		"vllm:prefix_cache_hits_total":            dto.MetricType_COUNTER,
		"vllm:prompt_tokens_total":                dto.MetricType_COUNTER,
		"vllm:generation_tokens_total":            dto.MetricType_COUNTER,
		"vllm:num_preemptions_total":              dto.MetricType_COUNTER,
		"vllm:request_success_total":              dto.MetricType_COUNTER,
		"vllm:iteration_tokens_total":             dto.MetricType_HISTOGRAM,
		"vllm:time_to_first_token_seconds":        dto.MetricType_HISTOGRAM,
		"vllm:inter_token_latency_seconds":        dto.MetricType_HISTOGRAM,
		"vllm:e2e_request_latency_seconds":        dto.MetricType_HISTOGRAM,
		"vllm:request_queue_time_seconds":         dto.MetricType_HISTOGRAM,
		"vllm:request_prefill_time_seconds":       dto.MetricType_HISTOGRAM,
		"vllm:request_decode_time_seconds":        dto.MetricType_HISTOGRAM,
		"vllm:request_inference_time_seconds":     dto.MetricType_HISTOGRAM,
		"vllm:request_prompt_tokens":              dto.MetricType_HISTOGRAM,
		"vllm:request_generation_tokens":          dto.MetricType_HISTOGRAM,
		"vllm:request_prefill_kv_computed_tokens": dto.MetricType_HISTOGRAM,
		"vllm:cache_config_info":                  dto.MetricType_GAUGE,
		"prefixring_sim_step_lag_seconds":         dto.MetricType_HISTOGRAM, // ours, not vLLM's
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		typ, ok := want[mf.GetName()]
		if !ok {
			t.Errorf("unexpected metric %s", mf.GetName())
			continue
		}
		seen[mf.GetName()] = true
		if mf.GetType() != typ {
			t.Errorf("%s is a %v, want %v", mf.GetName(), mf.GetType(), typ)
		}
		if mf.GetName() == "prefixring_sim_step_lag_seconds" || mf.GetName() == "vllm:cache_config_info" {
			continue // no model_name: vLLM's info gauges carry the config's fields and engine
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["model_name"] != "meta-llama/Llama-3.1-8B-Instruct" || labels["engine"] != "0" {
			t.Errorf("%s labels %v", mf.GetName(), labels)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("missing %s", name)
		}
	}
}

// TestCacheConfigInfo: like vLLM (vllm/v1/metrics/loggers.py,
// log_metrics_info("cache_config", ...)), the server exports its cache
// configuration as labels of a gauge set to 1: num_gpu_blocks × block_size
// is the engine's KV capacity in tokens, which a router reads once.
func TestCacheConfigInfo(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Engine.NumBlocks = 1000
	reg := prometheus.NewRegistry()
	if _, err := New(cfg, reg, reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "vllm:cache_config_info" {
			continue
		}
		if len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Fatalf("cache_config_info: %v, want one series of value 1", mf.GetMetric())
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["num_gpu_blocks"] != "1000" || labels["block_size"] != "16" || labels["engine"] != "0" ||
			labels["enable_prefix_caching"] != "True" {
			t.Fatalf("labels %v, want num_gpu_blocks 1000, block_size 16, engine 0, enable_prefix_caching True", labels)
		}
		return
	}
	t.Fatal("no vllm:cache_config_info")
}

// The exposition a router scrapes gives the engine's capacity in tokens.
func TestCacheConfigInfoScrapes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Engine.NumBlocks = 1000
	reg := prometheus.NewRegistry()
	if _, err := New(cfg, reg, reg); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if got, err := upstream.ParseKVCapacity(rec.Body); err != nil || got != 16000 {
		t.Fatalf("capacity %d, %v; want 1000 blocks × 16 = 16000", got, err)
	}
}
