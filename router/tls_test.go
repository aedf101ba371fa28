package router

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/prefixring/prefixring/internal/testcert"
)

// With TLS files, the replica routes over HTTPS, serves its admin routes
// over HTTPS with --admin-tls, and re-reads the certificate on a reload
// signal.
func TestRunServesTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := testcert.Write(t, dir, "one")
	ctx, cancel := context.WithCancel(context.Background())
	reload := make(chan os.Signal, 1)
	api, admin, _, done := startWith(t, ctx, func(c *Config) {
		c.TLS.CertFile, c.TLS.KeyFile, c.TLS.Admin = certFile, keyFile, true
		c.TLS.Interval = time.Hour // the signal, not the watch, reloads it here
	}, Options{Reload: reload})
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	api, admin = strings.Replace(api, "http://", "https://", 1), strings.Replace(admin, "http://", "https://", 1)
	client := func(pool *x509.CertPool) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	}
	get := func(c *http.Client, url string) (int, error) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	c := client(pool)
	resp, err := c.Post(api+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Prefixring-Endpoint") == "" {
		t.Fatalf("chat over https: %d, endpoint %q", resp.StatusCode, resp.Header.Get("X-Prefixring-Endpoint"))
	}
	if code, err := get(c, admin+"/metrics"); err != nil || code != 200 {
		t.Fatalf("admin /metrics over https: %d, %v", code, err)
	}
	_, _, pool2 := testcert.Write(t, dir, "two")
	reload <- syscall.SIGHUP
	c2 := client(pool2)
	waitFor(t, "the new certificate to be served", func() bool {
		c2.CloseIdleConnections()
		code, err := get(c2, api+"/healthz")
		return err == nil && code == 200
	})
	if _, err := get(client(pool), api+"/healthz"); err == nil {
		t.Fatal("a client trusting only the old certificate still connected after the reload")
	}
}

// OpenAI's Go client streams a chat completion through the TLS listener,
// each event as the engine flushes it.
func TestOpenAIClientStreamsOverTLS(t *testing.T) {
	words := []string{"Paris", " is", " the", " capital", "."}
	sent := make(chan struct{})
	var buffered atomic.Bool // the first word did not reach the client on its own
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i, word := range words {
			fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", word)
			w.(http.Flusher).Flush()
			if i == 0 { // the client has the first word before the engine goes on
				select {
				case <-sent:
				case <-time.After(10 * time.Second):
					buffered.Store(true)
				}
			}
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(eng.Close)
	certFile, keyFile, pool := testcert.Write(t, t.TempDir(), "router")
	ctx, cancel := context.WithCancel(context.Background())
	api, _, _, done := start(t, ctx, func(c *Config) {
		c.Sources.Static = []string{eng.URL}
		c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
	})
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	client := openai.NewClient(option.WithBaseURL(strings.Replace(api, "http://", "https://", 1)+"/v1/"),
		option.WithAPIKey("unused"), option.WithMaxRetries(0), option.WithHTTPClient(hc))
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the capital of France?")},
	})
	var text strings.Builder
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			if text.Len() == 0 {
				close(sent)
			}
			text.WriteString(c.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || text.String() != "Paris is the capital." || buffered.Load() {
		t.Fatalf("streamed %q, err %v, first word held back %v", text.String(), err, buffered.Load())
	}
}

// An https engine of a private CA that requires a client certificate:
// with --upstream-ca-file and the client pair the replica's probes and
// requests reach it; without the CA file, its certificate is not trusted
// and neither does.
func TestRunDialsHTTPSEndpoints(t *testing.T) {
	clientCert, clientKey, clients := testcert.Write(t, t.TempDir(), "router")
	engCert, engKey, _ := testcert.Write(t, t.TempDir(), "engine")
	pair, err := tls.LoadX509KeyPair(engCert, engKey)
	if err != nil {
		t.Fatal(err)
	}
	var probes atomic.Int64
	chatHandler := engine(t, "a").Config.Handler
	eng := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			probes.Add(1)
		}
		chatHandler.ServeHTTP(w, r)
	}))
	eng.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	eng.StartTLS()
	t.Cleanup(eng.Close)
	for _, trusted := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		api, _, _, done := start(t, ctx, func(c *Config) {
			c.Sources.Static = []string{eng.URL}
			c.Health.Interval = 20 * time.Millisecond
			c.UpstreamTLS = UpstreamTLSConfig{CertFile: clientCert, KeyFile: clientKey}
			if trusted {
				c.UpstreamTLS.CAFile = engCert
			}
		})
		before := probes.Load()
		code, ep := chat(t, api, "hello")
		if trusted {
			waitFor(t, "three probes of the https engine", func() bool { return probes.Load() >= before+3 })
			if code != 200 || ep == "" {
				t.Errorf("chat to the https engine: %d, endpoint %q", code, ep)
			}
		} else if code != http.StatusBadGateway || probes.Load() != before {
			t.Errorf("without the CA file: chat %d, %d probes answered; want 502 and none", code, probes.Load()-before)
		}
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	cfg := DefaultConfig()
	cfg.Sources.Static = []string{eng.URL}
	cfg.UpstreamTLS = UpstreamTLSConfig{CertFile: clientCert}
	if _, err := New(cfg, Options{}); err == nil {
		t.Fatal("a client certificate without its key was taken")
	}
}
