package vllm

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkStreams2000 holds 2,000 concurrent streaming requests on one
// simulated server over loopback, client and server in this process, and
// reports how far the engine goroutine fell behind its own clock.
//
//	go test ./sim/vllm -run '^$' -bench Streams2000 -benchtime 1x
func BenchmarkStreams2000(b *testing.B) {
	const streams, maxTokens = 2000, 200
	cfg := DefaultConfig()
	cfg.Engine.MaxNumSeqs = 2048 // all 2,000 in one running batch
	for range b.N {
		s, _ := start(b, cfg)
		url := serve(b, s)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, DisableCompression: true}}
		var wg sync.WaitGroup
		var failed, events atomic.Int64
		var peak, open atomic.Int64
		t0 := time.Now()
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := fmt.Sprintf(`{"prompt":"request %d %s","max_tokens":%d,"stream":true}`, i, strings.Repeat("z", 400), maxTokens)
				resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					failed.Add(1)
					return
				}
				defer resp.Body.Close()
				n := open.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				sc := bufio.NewScanner(resp.Body)
				done := false
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "data: ") {
						events.Add(1)
						done = sc.Text() == "data: [DONE]"
					}
				}
				open.Add(-1)
				if !done {
					failed.Add(1)
				}
			}()
		}
		wg.Wait()
		wall := time.Since(t0)
		lag := s.Lag()
		b.ReportMetric(float64(failed.Load()), "failed")
		b.ReportMetric(float64(peak.Load()), "peak-open-streams")
		b.ReportMetric(float64(lag.Steps), "steps")
		b.ReportMetric(float64(lag.Mean().Microseconds()), "mean-lag-us")
		b.ReportMetric(float64(lag.Max.Microseconds()), "max-lag-us")
		b.ReportMetric(float64(lag.Late), "steps-late>1ms")
		b.ReportMetric(wall.Seconds(), "wall-s")
		b.ReportMetric(float64(events.Load())/float64(streams), "events/stream")
	}
}
