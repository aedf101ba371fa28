package engine

import (
	"fmt"
	"time"
)

// Profile describes a model on a GPU: enough to derive the KV cache capacity
// and the time of one engine step from a roofline (compute-bound when FLOPs
// dominate, memory-bound when bytes do).
type Profile struct {
	Name string

	Params        float64 // model parameters
	Layers        int     // transformer layers
	HiddenSize    int     // query heads x head dim: attention FLOPs per key
	KVHeads       int     // key/value heads (GQA)
	HeadDim       int     // per-head dimension
	BytesPerParam float64 // weight precision
	BytesPerKV    float64 // KV cache element precision

	PeakFLOPS    float64 // dense tensor-core FLOP/s
	MFU          float64 // fraction of PeakFLOPS reached in prefill
	MemBandwidth float64 // HBM bytes/s
	MBU          float64 // fraction of MemBandwidth reached in decode
	// PrefillKVBU is the fraction of MemBandwidth at which a prefill chunk
	// reads the KV of the context before it (cached prefix or earlier
	// chunks). Attention of a few new tokens over a long context reads it
	// far below peak; zero means MBU.
	PrefillKVBU  float64
	StepOverhead time.Duration // scheduler, sampling, launch per step

	GPUMemory         float64 // bytes of device memory
	MemoryUtilization float64 // vLLM --gpu-memory-utilization
	ActivationReserve float64 // bytes for activations, CUDA graphs, workspace
}

// Llama31_8B_H100 is Llama-3.1-8B-Instruct in bf16 on one H100 SXM 80GB.
func Llama31_8B_H100() Profile {
	return Profile{
		Name: "llama-3.1-8b-h100",
		// Architecture: meta-llama/Llama-3.1-8B config.json (32 layers,
		// hidden 4096, 32 heads, 8 KV heads, head dim 128) and the model card
		// (8.03 B parameters).
		Params: 8.03e9, Layers: 32, HiddenSize: 4096, KVHeads: 8, HeadDim: 128,
		BytesPerParam: 2, BytesPerKV: 2, // bf16 weights and KV cache
		// NVIDIA H100 SXM datasheet: 989 TFLOP/s dense BF16, 3.35 TB/s
		// HBM3. Memory: the 79.19 GiB that CUDA reports for an "H100 80GB
		// HBM3" (nvidia-smi: 81,559 MiB), the total vLLM multiplies by
		// gpu_memory_utilization; the datasheet's decimal 80 GB is 6% less.
		PeakFLOPS: 989e12, MemBandwidth: 3.35e12, GPUMemory: 79.19 * (1 << 30),
		// Calibrated against step times of Llama-3.1-8B's shape measured on
		// one H100 80GB HBM3 (shared/calibration/h100-llama-3.1-8b.jsonl,
		// the CUDA-graph "prefill_floor" and "decode" rows; the comparison
		// is TestProfileMatchesCalibration, docs/engine.md):
		//  - MFU 0.6: cold prefills of 512-8,192 tokens take 15-246 ms, which
		//    a roofline at 0.6 of peak matches within 4% (the earlier
		//    estimate, 0.5, was 15-25% slow);
		//  - MBU 0.72: decode at batch 1-256 over 1-2 k tokens of context
		//    takes 6.9-20.9 ms, 5-10% above a roofline at 0.8;
		//  - PrefillKVBU 0.093: a short suffix over a long cached prefix
		//    (16 new over 8,176 cached: 10.5 ms; 128 over 32,768: 20.3 ms)
		//    costs the weights' read plus ~0.42 us per cached token, i.e. the
		//    cached KV read at ~9% of HBM bandwidth; the plain roofline said
		//    6.9 and 9.1 ms, overstating a cache hit's gain by 1.5-2.2x.
		MFU: 0.6, MBU: 0.72, PrefillKVBU: 0.093,
		// 0.5 ms per step for the scheduler and sampling, which the
		// measured floors (CUDA graphs, no scheduler) do not include: an
		// estimate.
		StepOverhead: 500 * time.Microsecond,
		// vLLM's default --gpu-memory-utilization is 0.9 (EngineArgs); ~4 GB
		// for activations and CUDA graphs is an estimate. That leaves ~56 GB,
		// ~431 k tokens or 26,925 blocks of 16 tokens.
		MemoryUtilization: 0.9, ActivationReserve: 4e9,
	}
}

// Profiles lists the named profiles.
func Profiles() map[string]Profile {
	p := Llama31_8B_H100()
	return map[string]Profile{p.Name: p}
}

// KVBytesPerToken is the KV cache footprint of one token: K and V for every
// layer and KV head (128 KiB for Llama-3.1-8B in bf16).
func (p Profile) KVBytesPerToken() float64 {
	return 2 * float64(p.Layers*p.KVHeads*p.HeadDim) * p.BytesPerKV
}

// KVBlocks is the number of KV blocks of blockSize tokens that fit in the
// memory left after weights and activations.
func (p Profile) KVBlocks(blockSize int) int {
	free := p.GPUMemory*p.MemoryUtilization - p.Params*p.BytesPerParam - p.ActivationReserve
	if free <= 0 {
		return 0
	}
	return int(free / (p.KVBytesPerToken() * float64(blockSize)))
}

// Validate reports a profile that cannot price a step.
func (p Profile) Validate() error {
	switch {
	case p.Params <= 0 || p.Layers <= 0 || p.HiddenSize <= 0 || p.KVHeads <= 0 || p.HeadDim <= 0:
		return fmt.Errorf("engine: profile %q: model shape must be positive", p.Name)
	case p.BytesPerParam <= 0 || p.BytesPerKV <= 0:
		return fmt.Errorf("engine: profile %q: precisions must be positive", p.Name)
	case p.PeakFLOPS <= 0 || p.MemBandwidth <= 0:
		return fmt.Errorf("engine: profile %q: FLOPS and bandwidth must be positive", p.Name)
	case p.MFU <= 0 || p.MFU > 1 || p.MBU <= 0 || p.MBU > 1 || p.PrefillKVBU < 0 || p.PrefillKVBU > 1:
		return fmt.Errorf("engine: profile %q: MFU, MBU and PrefillKVBU must be in (0,1]", p.Name)
	case p.StepOverhead < 0:
		return fmt.Errorf("engine: profile %q: negative step overhead", p.Name)
	}
	return nil
}

// Batch is what one step computes, as the cost model sees it.
type Batch struct {
	PrefillTokens  int   // prompt (or recomputed) tokens computed this step
	PrefillPairs   int64 // causal attention (query, key) pairs of those tokens
	PrefillContext int64 // earlier tokens whose KV the prefill chunks read
	DecodeSeqs     int   // sequences computing one token
	DecodeContext  int64 // KV tokens the decoding sequences attend over
}

// AddPrefill adds to b a chunk of n prompt tokens computed after the
// first computed ones of their sequence.
func (b *Batch) AddPrefill(computed, n int) {
	c := int64(computed)
	b.PrefillTokens += n
	b.PrefillPairs += int64(n)*c + int64(n)*int64(n+1)/2
	b.PrefillContext += c
}

// StepTime is the duration of a step: the overhead plus the larger of its
// compute time and its memory time (a roofline). Compute: 2 FLOPs per
// parameter per token, plus 4 x HiddenSize x Layers per attention pair.
// Memory: all weights once and the decoding sequences' KV at MBU, plus the
// KV that prefill chunks read over their context at PrefillKVBU.
func (p Profile) StepTime(b Batch) time.Duration {
	tokens := float64(b.PrefillTokens + b.DecodeSeqs)
	if tokens == 0 {
		return 0
	}
	pairs := float64(b.PrefillPairs + b.DecodeContext)
	flops := 2*p.Params*tokens + 4*float64(p.HiddenSize*p.Layers)*pairs
	kvbu := p.PrefillKVBU
	if kvbu == 0 {
		kvbu = p.MBU
	}
	mem := (p.Params*p.BytesPerParam+p.KVBytesPerToken()*float64(b.DecodeContext))/(p.MemBandwidth*p.MBU) +
		p.KVBytesPerToken()*float64(b.PrefillContext)/(p.MemBandwidth*kvbu)
	sec := max(flops/(p.PeakFLOPS*p.MFU), mem)
	return p.StepOverhead + time.Duration(sec*1e9)
}
