package vllm

import (
	"testing"

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
		if mf.GetName() == "prefixring_sim_step_lag_seconds" {
			continue
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
