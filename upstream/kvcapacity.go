package upstream

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrNoKVCapacity: the metrics text has no usable vllm:cache_config_info
// or sglang:max_total_num_tokens.
var ErrNoKVCapacity = errors.New("upstream: no vllm:cache_config_info (num_gpu_blocks, block_size) or sglang:max_total_num_tokens")

// ParseKVCapacity reads an engine's Prometheus text exposition and returns
// its KV cache capacity in tokens: for vLLM the labels num_gpu_blocks ×
// block_size of the vllm:cache_config_info gauge, which vLLM sets to 1
// once at start; for SGLang (--enable-metrics) the value of the
// sglang:max_total_num_tokens gauge, "Maximum total number of tokens in the
// KV cache pool". The ring bounds an endpoint's K by it
// (ring.Endpoint.KVCapacity). With several engines or ranks behind one
// server (one series per engine, dp_rank or tp_rank label) it returns the
// smallest.
func ParseKVCapacity(r io.Reader) (int64, error) {
	c, _, err := parseKVMetrics(r)
	return c, err
}

// parseKVMetrics is [ParseKVCapacity] that also names the engine whose
// metric it read ("vllm" or "sglang"); vLLM's wins where both appear.
func parseKVMetrics(r io.Reader) (int64, string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var vllm, sglang int64
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "vllm:cache_config_info{"); ok {
			c, err := vllmCapacity(rest)
			if err != nil {
				return 0, "", err
			}
			vllm = smallest(vllm, c)
		} else if rest, ok := strings.CutPrefix(line, "sglang:max_total_num_tokens"); ok {
			sglang = smallest(sglang, sglangCapacity(rest))
		}
	}
	if err := sc.Err(); err != nil {
		return 0, "", fmt.Errorf("upstream: reading metrics: %w", err)
	}
	switch {
	case vllm > 0:
		return vllm, "vllm", nil
	case sglang > 0:
		return sglang, "sglang", nil
	}
	return 0, "", ErrNoKVCapacity
}

// smallest is the smaller of the known (positive) values a and c.
func smallest(a, c int64) int64 {
	if c > 0 && (a == 0 || c < a) {
		return c
	}
	return a
}

// vllmCapacity reads one cache_config_info series after its "{": 0 while
// num_gpu_blocks is "None" (before the engine profiled its memory).
func vllmCapacity(labels string) (int64, error) {
	l, err := parseLabels(labels)
	if err != nil {
		return 0, fmt.Errorf("upstream: vllm:cache_config_info: %w", err)
	}
	blocks, err1 := strconv.ParseInt(l["num_gpu_blocks"], 10, 64)
	size, err2 := strconv.ParseInt(l["block_size"], 10, 64)
	if err1 != nil || err2 != nil || blocks <= 0 || size <= 0 || blocks > (1<<62)/size {
		return 0, nil
	}
	return blocks * size, nil
}

// sglangCapacity reads one max_total_num_tokens series after its name:
// optional labels, then the value (a float, "1.048576e+06"); 0 if it is
// not a positive number (not set yet) or the name only began there.
func sglangCapacity(rest string) int64 {
	if strings.HasPrefix(rest, "{") {
		i := strings.LastIndex(rest, "}")
		if i < 0 {
			return 0
		}
		rest = rest[i+1:]
	} else if rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
		return 0 // another metric whose name starts alike
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || !(v >= 1) || v > 1<<62 {
		return 0
	}
	return int64(v)
}

// ParseLlamaCppProps reads llama-server's GET /props and returns its KV
// cache capacity in tokens: default_generation_settings.n_ctx (a slot's
// context) × total_slots (its parallel sequences). llama.cpp's /metrics
// has no capacity. With a split cache (-np N, the default before
// --kv-unified) this is the cache's size; with --kv-unified every slot may
// use the whole cache, so n_ctx already is the size and this counts it
// total_slots times: /props does not say which, so such a server needs
// --kv-capacity.
func ParseLlamaCppProps(r io.Reader) (int64, error) {
	var p struct {
		Settings struct {
			NCtx int64 `json:"n_ctx"`
		} `json:"default_generation_settings"`
		Slots int64 `json:"total_slots"`
	}
	if err := json.NewDecoder(r).Decode(&p); err != nil {
		return 0, fmt.Errorf("upstream: llama.cpp /props: %w", err)
	}
	slots := max(p.Slots, 1)
	if p.Settings.NCtx <= 0 || p.Settings.NCtx > (1<<62)/slots {
		return 0, errors.New("upstream: llama.cpp /props: no default_generation_settings.n_ctx")
	}
	return p.Settings.NCtx * slots, nil
}

// parseLabels parses `name="value",...}` up to the closing brace, with the
// exposition format's escapes (\\, \", \n).
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return out, nil
		}
		name, rest, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(rest, `"`) {
			return nil, errors.New("malformed labels")
		}
		var v strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				if rest[i] == 'n' {
					v.WriteByte('\n')
					continue
				}
			}
			v.WriteByte(rest[i])
		}
		if i >= len(rest) {
			return nil, errors.New("unterminated label value")
		}
		out[strings.TrimSpace(name)] = v.String()
		s = rest[i+1:]
	}
}
