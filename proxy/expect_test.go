package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoPrompt answers with the request's prompt, so a test can tell whose
// answer a client got.
func echoPrompt(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Prompt string `json:"prompt"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &req)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"object":"text_completion","echo":%q}`, req.Prompt)
}

// TestExpectContinueNeverCrossesClients: a client sending Expect:
// 100-continue (curl does for bodies over 1 MiB) gets its own answer, and
// the next client on the same pooled upstream connection gets its own.
// Before the fix, client A got an empty 200 and client B got A's
// completion (notes/proxy.md). The router answers 100 Continue itself and
// never forwards Expect.
func TestExpectContinueNeverCrossesClients(t *testing.T) {
	f := newFixture(t, 1)
	var mu sync.Mutex
	var expects []string
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		expects = append(expects, r.Header.Values("Expect")...)
		mu.Unlock()
		echoPrompt(w, r)
	})
	for i := range 5 {
		a, b := fmt.Sprintf("client A turn %d", i), fmt.Sprintf("client B turn %d", i)
		// A waits for the 100 before sending its body: the router must
		// answer it, or A's request would stall for the second below.
		ca := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
		cb := &http.Client{Transport: &http.Transport{}}
		got100 := false
		trace := &httptrace.ClientTrace{Got100Continue: func() { got100 = true }}
		reqA, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"`+a+`"}`))
		reqA = reqA.WithContext(httptrace.WithClientTrace(reqA.Context(), trace))
		reqA.Header.Set("Expect", "100-continue")
		respA, err := ca.Do(reqA)
		if err != nil {
			t.Fatal(err)
		}
		gotA := readAll(t, respA.Body)
		respB, err := cb.Post(f.srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"`+b+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		gotB := readAll(t, respB.Body)
		if respA.StatusCode != 200 || !strings.Contains(gotA, a) || respB.StatusCode != 200 || !strings.Contains(gotB, b) {
			t.Fatalf("turn %d: client A (Expect: 100-continue) got %d %q; client B got %d %q", i, respA.StatusCode, gotA, respB.StatusCode, gotB)
		}
		if !got100 {
			t.Fatalf("turn %d: client A never got 100 Continue", i)
		}
		ca.CloseIdleConnections()
		cb.CloseIdleConnections()
	}
	if len(expects) > 0 {
		t.Fatalf("the upstream received Expect: %q", expects)
	}
}

// TestExpectContinueRefusedBeforeTheBody: a request the router refuses
// from its headers alone (unknown route, body over the limit) is answered
// without a 100 Continue, and the connection is closed rather than left
// with an unread body on it.
func TestExpectContinueRefusedBeforeTheBody(t *testing.T) {
	f := newFixture(t, 1, func(c *Config) { c.MaxBodyBytes = 100 })
	for path, status := range map[string]int{"/admin": 404, "/v1/completions": 413} {
		c, err := net.Dial("tcp", f.srv.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1000\r\n\r\n", path)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp.Body)
		if resp.StatusCode != status {
			t.Errorf("%s: status %d, want %d (no 100 first)", path, resp.StatusCode, status)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%s: connection left open with an unread body: %v", path, err)
		}
		c.Close()
	}
	if n := f.ups[0].served.Load(); n != 0 {
		t.Fatalf("upstream served %d refused requests", n)
	}
}
