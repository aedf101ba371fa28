package vllm

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve runs s on a real loopback socket and returns its base URL.
func serve(t testing.TB, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler()}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String()
}

func TestStreamOverLoopbackAndAbruptClose(t *testing.T) {
	s, _ := start(t, DefaultConfig())
	url := serve(t, s)
	body := `{"prompt":"hello","max_tokens":8,"stream":true}`
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	resp.Body.Close()
	if n < 2 || sc.Err() != nil {
		t.Fatalf("%d events, err %v", n, sc.Err())
	}

	if err := s.SetFaults(Faults{CloseRate: 1, CloseAfterTokens: 3}); err != nil {
		t.Fatal(err)
	}
	resp, err = http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || strings.Contains(string(got), "[DONE]") {
		t.Fatalf("stream ended cleanly (%v): %q", err, got)
	}
	if strings.Count(string(got), "the") != 1 || !strings.Contains(string(got), "for") {
		t.Fatalf("want 3 tokens before the close, got %q", got)
	}
	// The engine drops the aborted request at its next step, on its own
	// goroutine: wait for that, not for a second (a busy machine can
	// deschedule it for longer).
	for deadline := time.Now().Add(time.Minute); s.Busy(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the closed request is still in the engine")
		}
	}
}
