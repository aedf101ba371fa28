package upstream

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrNoKVCapacity: the metrics text has no usable vllm:cache_config_info.
var ErrNoKVCapacity = errors.New("upstream: no vllm:cache_config_info with num_gpu_blocks and block_size")

// ParseKVCapacity reads an engine's Prometheus text exposition (vLLM's
// /metrics) and returns its KV cache capacity in tokens: the labels
// num_gpu_blocks × block_size of the vllm:cache_config_info gauge, which
// vLLM sets to 1 once at start. The ring bounds an endpoint's K by it
// (ring.Endpoint.KVCapacity). With several engines behind one server (data
// parallel, one series per engine label) it returns the smallest.
func ParseKVCapacity(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var best int64
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "vllm:cache_config_info{")
		if !ok {
			continue
		}
		labels, err := parseLabels(line)
		if err != nil {
			return 0, fmt.Errorf("upstream: vllm:cache_config_info: %w", err)
		}
		blocks, err1 := strconv.ParseInt(labels["num_gpu_blocks"], 10, 64)
		size, err2 := strconv.ParseInt(labels["block_size"], 10, 64)
		if err1 != nil || err2 != nil || blocks <= 0 || size <= 0 || blocks > (1<<62)/size {
			continue // "None" before the engine profiled its memory
		}
		if c := blocks * size; best == 0 || c < best {
			best = c
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("upstream: reading metrics: %w", err)
	}
	if best == 0 {
		return 0, ErrNoKVCapacity
	}
	return best, nil
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
