package proxy_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/proxy"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkRouter measures the proxy path in-process, for 2 KB and 64 KB
// chat requests rotating over 64 bodies with distinct prompts, against an
// httptest upstream on 127.0.0.1 that reads the body and answers a fixed
// completion. The router is wired as cmd/prefixring/serve.go wires it
// (balancer, keyer, metrics, health observer, public handler and server). Sub-benchmarks:
//
//   - key: prefix.Keyer.Key alone, the affinity-key part of the handler.
//   - direct: a client's POST straight to the upstream (the baseline).
//   - handler: the router's ServeHTTP into an httptest.ResponseRecorder,
//     which includes its own upstream round trip but no client hop.
//   - loopback: a client's POST through the router on a loopback listener;
//     loopback minus direct is what the router adds to one request.
//   - loopback-parallel: the same with GOMAXPROCS*4 concurrent clients,
//     a throughput figure comparable to scripts/bench-proxy.sh.
//
// Measured on the 2-core dev machine with other work running (load average
// 1.1-1.7; go test -run '^$' -bench Router -benchtime 2s -benchmem ./proxy/,
// Go 1.26, net/http's Transport upstream):
//
//	                              ns/op     B/op  allocs
//	chat-2KB/key                    980        0       0
//	chat-2KB/direct              58,608    6,875      82
//	chat-2KB/handler             71,015   17,366     139
//	chat-2KB/loopback           117,873   17,834     204
//	chat-2KB/loopback-parallel   80,664   17,844     202
//	chat-64KB/key                 3,312        0       0
//	chat-64KB/direct            107,911   39,719      84
//	chat-64KB/handler           122,712   48,136     140
//	chat-64KB/loopback          212,965   81,649     205
//	chat-64KB/loopback-parallel 128,727   81,620     205
//
// Absolute figures move with the machine's load; compare rows of one run.
// In this harness client, router and upstream share the 2 cores, so the
// router's own cost is diluted; scripts/bench-proxy.sh pins the router to
// one core and reads its CPU per request (docs/bench-proxy.md).
func BenchmarkRouter(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, completion)
	}))
	defer upstream.Close()
	handler, keyer := newBenchRouter(b, upstream.URL, nil)
	router := servePublic(b, handler)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	defer client.CloseIdleConnections()

	for _, size := range []int{2 << 10, 64 << 10} {
		bodies := chatBodies(64, size)
		b.Run(fmt.Sprintf("chat-%dKB", size>>10), func(b *testing.B) {
			b.Run("key", func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size))
				i := 0
				for b.Loop() {
					if _, _, err := keyer.Key(prefix.RouteChat, bodies[i%len(bodies)]); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run("direct", func(b *testing.B) { benchPost(b, client, upstream.URL, bodies) })
			b.Run("handler", func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size))
				i := 0
				for b.Loop() {
					req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(bodies[i%len(bodies)]))
					req.Header.Set("Content-Type", "application/json")
					rec := httptest.NewRecorder()
					handler.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("status %d: %s", rec.Code, rec.Body)
					}
					i++
				}
			})
			b.Run("loopback", func(b *testing.B) { benchPost(b, client, router, bodies) })
			b.Run("loopback-parallel", func(b *testing.B) { benchParallel(b, client, router, bodies) })
		})
	}
}

// servePublic serves h as the router's public listener (proxy.Server) on
// 127.0.0.1 and returns its base URL.
func servePublic(b *testing.B, h http.Handler) string {
	b.Helper()
	srv, err := proxy.NewServer(proxy.DefaultServerConfig(), h, nil)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// newBenchRouter wires the handler as serve.go does, in front of one
// upstream at url, and returns it with its keyer.
func newBenchRouter(b *testing.B, url string, transport http.RoundTripper) (http.Handler, *prefix.Keyer) {
	b.Helper()
	log := slog.New(slog.DiscardHandler)
	bal, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	keyer, err := prefix.New(prefix.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics := proxy.NewMetrics(reg, bal.Status)
	endpoints, err := upstream.NewSet(upstream.DefaultHealthConfig(), upstream.Options{Log: log})
	if err != nil {
		b.Fatal(err)
	}
	if err := endpoints.SetSource("static", []string{url}); err != nil {
		b.Fatal(err)
	}
	if err := bal.SetEndpoints(endpoints.Snapshot().IDs()); err != nil {
		b.Fatal(err)
	}
	router, err := proxy.NewRouter(proxy.DefaultConfig(), proxy.Deps{
		Picker: bal, Keys: keyer, Targets: endpoints, Observer: endpoints, Metrics: metrics, Log: log,
		Transport: transport,
	})
	if err != nil {
		b.Fatal(err)
	}
	return proxy.Public(router, proxy.Ops{Gatherer: reg, Status: bal.Status}), keyer
}

func benchParallel(b *testing.B, client *http.Client, base string, bodies [][]byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(bodies[0])))
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if err := post(client, base, bodies[i%len(bodies)]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchPost(b *testing.B, client *http.Client, base string, bodies [][]byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(bodies[0])))
	i := 0
	for b.Loop() {
		if err := post(client, base, bodies[i%len(bodies)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func post(client *http.Client, base string, body []byte) error {
	resp, err := client.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// completion is the upstream's answer: a short non-streamed completion.
const completion = `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,` +
	`"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant",` +
	`"content":"OK."},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":512,"completion_tokens":2,"total_tokens":514}}`

// chatBodies returns n chat requests of exactly size bytes whose user
// messages differ in their first words (the same shape as
// scripts/benchproxy/chat.lua sends).
func chatBodies(n, size int) [][]byte {
	words := []string{"prefix ", "cache ", "token ", "ring ", "router ", "prompt ", "endpoint ", "load "}
	out := make([][]byte, n)
	for i := range out {
		head := fmt.Sprintf(`{"model":"bench-model","max_tokens":16,"messages":[`+
			`{"role":"system","content":"You are a concise assistant. Answer in one sentence."},`+
			`{"role":"user","content":"Conversation %02d of the benchmark: summarise the following notes. `, i+1)
		const tail = `"}]}`
		var sb strings.Builder
		sb.WriteString(head)
		for w := i + 1; sb.Len()+len(tail) < size; w++ {
			word := words[w%len(words)]
			if rest := size - len(tail) - sb.Len(); len(word) > rest {
				word = strings.Repeat("x", rest)
			}
			sb.WriteString(word)
		}
		sb.WriteString(tail)
		out[i] = []byte(sb.String())
	}
	return out
}

// BenchmarkStream measures one streamed completion of 128 events through
// the router on loopback (each event flushed by the upstream, and by the
// router: what a token costs the proxy), against the same stream read
// straight from the upstream. stream minus direct is the router's part.
func BenchmarkStream(b *testing.B) {
	const events = 128
	event := []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,` +
		`"model":"bench-model","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n")
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for range events {
			_, _ = w.Write(event)
			f.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer upstream.Close()
	handler, _ := newBenchRouter(b, upstream.URL, nil)
	router := servePublic(b, handler)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	defer client.CloseIdleConnections()
	bodies := chatBodies(64, 2<<10)
	for i := range bodies {
		bodies[i] = bytes.Replace(bodies[i], []byte(`"max_tokens":16,`), []byte(`"stream":true,"max_tokens":16,`), 1)
	}
	b.Run("direct", func(b *testing.B) { withCPU(b, func() { benchPost(b, client, upstream.URL, bodies) }) })
	b.Run("router", func(b *testing.B) { withCPU(b, func() { benchPost(b, client, router, bodies) }) })
}

// withCPU runs f and reports the process's CPU time (user and system, of
// client, router and upstream together) per operation as cpu-ns/op: a
// streamed request's wall time is mostly waiting, its CPU time is the cost.
func withCPU(b *testing.B, f func()) {
	before := processCPU(b)
	f()
	b.ReportMetric(float64(processCPU(b)-before)/float64(b.N), "cpu-ns/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
