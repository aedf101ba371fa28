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
