package upstream

import (
	"errors"
	"strings"
	"testing"
)

// vLLM's exposition (labels from CacheConfig.metrics_info(), engine added).
const vllmCacheConfig = `# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="27125",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
vllm:num_requests_running{engine="0",model_name="m"} 3.0
`

func TestParseKVCapacity(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       int64
		err        bool
	}{
		{"vLLM", vllmCacheConfig, 27125 * 16, false},
		{"two engines: the smallest", `vllm:cache_config_info{block_size="32",engine="0",num_gpu_blocks="100"} 1
vllm:cache_config_info{block_size="32",engine="1",num_gpu_blocks="90"} 1`, 90 * 32, false},
		{"escaped label before", `vllm:cache_config_info{a="x\",y\\",block_size="16",num_gpu_blocks="10"} 1`, 160, false},
		{"not profiled yet", `vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1`, 0, true},
		{"absent", "vllm:num_requests_running 1\n", 0, true},
		{"malformed", `vllm:cache_config_info{block_size="16",num_gpu_blocks="10} 1`, 0, true},
	} {
		got, err := ParseKVCapacity(strings.NewReader(tc.text))
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s: %d, %v; want %d, error %v", tc.name, got, err, tc.want, tc.err)
		}
		if tc.name == "absent" && !errors.Is(err, ErrNoKVCapacity) {
			t.Errorf("absent: %v, want ErrNoKVCapacity", err)
		}
	}
}

// SGLang's exposition (python/sglang/srt/metrics/collector.py: a gauge,
// "Maximum total number of tokens in the KV cache pool", with the
// scheduler's labels; --enable-metrics).
const sglangMetrics = `# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.28
# HELP sglang:max_total_num_tokens Maximum total number of tokens in the KV cache pool.
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 1.048576e+06
`

func TestParseKVCapacitySGLang(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       int64
		engine     string
	}{
		{"SGLang", sglangMetrics, 1048576, "sglang"},
		{"no labels", "sglang:max_total_num_tokens 5000\n", 5000, "sglang"},
		{"two ranks: the smallest", "sglang:max_total_num_tokens{dp_rank=\"0\"} 6000\nsglang:max_total_num_tokens{dp_rank=\"1\"} 5000\n", 5000, "sglang"},
		{"not set yet", "sglang:max_total_num_tokens{tp_rank=\"0\"} 0\n", 0, ""},
		{"vLLM beside", vllmCacheConfig, 27125 * 16, "vllm"},
	} {
		got, engine, err := parseKVMetrics(strings.NewReader(tc.text))
		if got != tc.want || engine != tc.engine || (err != nil) != (tc.want == 0) {
			t.Errorf("%s: %d %q, %v; want %d %q", tc.name, got, engine, err, tc.want, tc.engine)
		}
	}
}

// llama-server's GET /props (tools/server: default_generation_settings.n_ctx
// is a slot's context, total_slots the parallel sequences).
func TestParseLlamaCppProps(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       int64
	}{
		{"4 slots", `{"default_generation_settings":{"n_ctx":8192,"params":{}},"total_slots":4,"model_path":"m.gguf"}`, 4 * 8192},
		{"no slots field", `{"default_generation_settings":{"n_ctx":4096}}`, 4096},
		{"no n_ctx", `{"total_slots":4}`, 0},
		{"not JSON", `<html>`, 0},
	} {
		got, err := ParseLlamaCppProps(strings.NewReader(tc.text))
		if got != tc.want || (err != nil) != (tc.want == 0) {
			t.Errorf("%s: %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}

func TestParseKVCapacities(t *testing.T) {
	k, err := ParseKVCapacities([]string{"http://10.0.0.7:8000/v1=396000", "gpu-b=200000", "1000"})
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := ParseEndpoint("10.0.0.7:8000")
	b, _, _ := ParseEndpoint("gpu-b=http://10.0.0.8:8000")
	c, _, _ := ParseEndpoint("http://10.0.0.9:8000")
	if k.For(a) != 396000 || k.For(b) != 200000 || k.For(c) != 1000 {
		t.Fatalf("capacities %d %d %d, want 396000 200000 1000", k.For(a), k.For(b), k.For(c))
	}
	if none, _ := ParseKVCapacities(nil); none.For(c) != 0 {
		t.Fatalf("no overrides: %d", none.For(c))
	}
	for _, bad := range [][]string{{"x=0"}, {"-5"}, {"a=1", "a=2"}, {"1", "2"}, {"ftp://x:1=5"}, {"gpu-a=12k"}, {""}} {
		if _, err := ParseKVCapacities(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
