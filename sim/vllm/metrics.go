package vllm

import (
	"slices"
	"strconv"

	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are vLLM V1's Prometheus metrics, by the names, types, labels and
// buckets of vllm/v1/metrics/loggers.py (PrometheusStatLogger) as documented
// at https://docs.vllm.ai/en/stable/usage/metrics/. Every series carries
// model_name and engine (the data-parallel engine index, "0" here).
// Counters are named with their _total suffix, which Python's client adds.
type metrics struct {
	running, waiting, kvUsage              prometheus.Gauge
	cacheQueries, cacheHits, preempted     prometheus.Counter
	promptTokens, generationTokens         prometheus.Counter
	success                                prometheus.Counter
	iterationTokens                        prometheus.Observer
	ttft, itl, e2e, queue, prefill         prometheus.Observer
	decode, inference                      prometheus.Observer
	promptHist, generationHist, kvComputed prometheus.Observer
	lag                                    prometheus.Observer
}

var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// tokenBuckets is vLLM's build_1_2_5_buckets(max_model_len).
func tokenBuckets(max int) []float64 {
	var out []float64
	for e := 1; ; e *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*e > max {
				return out
			}
			out = append(out, float64(m*e))
		}
	}
}

func newMetrics(reg prometheus.Registerer, model string, maxModelLen, maxBatched int) *metrics {
	f := promauto.With(reg)
	labels := prometheus.Labels{"model_name": model, "engine": "0"}
	gauge := func(name, help string) prometheus.Gauge {
		return f.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"model_name", "engine"}).With(labels)
	}
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"model_name", "engine"}).With(labels)
	}
	hist := func(name, help string, b []float64) prometheus.Observer {
		return f.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b}, []string{"model_name", "engine"}).With(labels)
	}
	success := f.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of successfully processed requests."},
		[]string{"model_name", "engine", "finished_reason"})
	tok := tokenBuckets(maxModelLen)
	return &metrics{
		running:          gauge("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting:          gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		kvUsage:          gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		cacheQueries:     counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		cacheHits:        counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		preempted:        counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine."),
		promptTokens:     counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		generationTokens: counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
		success:          success.With(prometheus.Labels{"model_name": model, "engine": "0", "finished_reason": "length"}),
		iterationTokens:  hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", tokenBuckets(maxBatched)),
		ttft:             hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		itl:              hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets),
		e2e:              hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestBuckets),
		queue:            hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestBuckets),
		prefill:          hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestBuckets),
		decode:           hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestBuckets),
		inference:        hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", requestBuckets),
		promptHist:       hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok),
		generationHist:   hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tok),
		kvComputed:       hist("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tok),
		lag: f.NewHistogram(prometheus.HistogramOpts{
			Name: "prefixring_sim_step_lag_seconds", Help: "How late the simulated engine's steps end on the wall clock.",
			Buckets: []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1},
		}),
	}
}

// cacheConfigInfo exports the engine's cache configuration as vLLM does
// (vllm/v1/metrics/loggers.py, log_metrics_info("cache_config", ...)): a
// gauge set to 1 whose labels are CacheConfig's fields as strings, plus
// engine. num_gpu_blocks × block_size is the KV capacity in tokens that a
// router bounds K by (upstream.ParseKVCapacity).
func cacheConfigInfo(reg prometheus.Registerer, e engine.Config) {
	labels := prometheus.Labels{
		"block_size": strconv.Itoa(e.BlockSize), "num_gpu_blocks": strconv.Itoa(e.Blocks()),
		"num_cpu_blocks": "None", "cache_dtype": "auto", "enable_prefix_caching": "True",
		"gpu_memory_utilization": "0.9", "engine": "0",
	}
	names := make([]string, 0, len(labels))
	for k := range labels {
		names = append(names, k)
	}
	slices.Sort(names)
	promauto.With(reg).NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig"}, names).
		With(labels).Set(1)
}

// gauges sets the scheduler gauges from the engine.
func (m *metrics) gauges(e *engine.Engine) {
	m.running.Set(float64(e.Running()))
	m.waiting.Set(float64(e.Waiting()))
	m.kvUsage.Set(e.KVUsage())
}

// step records what a step did.
func (m *metrics) step(res *engine.StepResult) {
	m.cacheQueries.Add(float64(res.CacheQueries))
	m.cacheHits.Add(float64(res.CacheHits))
	m.preempted.Add(float64(res.Preemptions))
	m.promptTokens.Add(float64(res.PromptTokens))
	m.generationTokens.Add(float64(res.GenerationTokens))
	m.iterationTokens.Observe(float64(res.Batch.PrefillTokens + res.Batch.DecodeSeqs))
	for _, r := range res.Finished {
		m.success.Inc()
		m.e2e.Observe(r.E2E().Seconds())
		m.queue.Observe(r.QueueDelay().Seconds())
		m.prefill.Observe((r.FirstToken - r.Scheduled).Seconds())
		m.decode.Observe((r.Finished - r.FirstToken).Seconds())
		m.inference.Observe((r.Finished - r.Scheduled).Seconds())
		m.promptHist.Observe(float64(r.Prompt.Len))
		m.generationHist.Observe(float64(r.Output))
		m.kvComputed.Observe(float64(r.Prompt.Len - r.CachedTokens))
	}
}
