package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestContentLengthWithTransferEncodingClosesTheConnection: a request with
// both Content-Length and Transfer-Encoding is answered (net/http reads it
// by Transfer-Encoding and drops Content-Length), and then the connection
// is closed, as RFC 9112 §6.1 requires: a proxy in front that delimited it
// by Content-Length would read the rest of the stream differently
// (request smuggling). A well-formed request keeps its connection. Before
// the fix net/http kept the connection open for the next request.
func TestContentLengthWithTransferEncodingClosesTheConnection(t *testing.T) {
	f := newFixture(t, 1)
	body := `{"model":"m","prompt":"x"}`
	for _, tc := range []struct {
		name, head string
		closes     bool
	}{
		{"both", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", true},
		{"both, other order and case", "transfer-encoding: chunked\r\ncontent-length: 5\r\n", true},
		{"chunked only", "Transfer-Encoding: chunked\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", f.srv.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			// A first request on the connection, so the ambiguous one is
			// not the connection's first.
			fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", tc.head, len(body), body)
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if resp.Close != tc.closes {
				t.Fatalf("Connection: close %v, want %v", resp.Close, tc.closes)
			}
			if tc.closes {
				if _, err := br.ReadByte(); err != io.EOF {
					t.Fatalf("connection still open after the answer: read %v", err)
				}
				return
			}
			fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			if resp, err = http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
				t.Fatalf("the next request on the connection: %v", err)
			}
		})
	}
}

// TestHeadScan: the scan finds both fields whatever the case and however
// the head is split across reads, ignores them in the request line, in
// values and in the body, and stops at the head's end.
func TestHeadScan(t *testing.T) {
	for head, want := range map[string]bool{
		"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n":             true,
		"\r\nPOST / HTTP/1.1\r\nTRANSFER-ENCODING: chunked\r\ncontent-length: 5\r\n\r\n":         true,
		"POST / HTTP/1.1\nContent-Length: 5\nTransfer-Encoding: chunked\n\n":                     true,
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nContent-Length: 5\r\n":             false,
		"POST /content-length: HTTP/1.1\r\nX: content-length: 1\r\nTransfer-Encoding: x\r\n\r\n": false,
		"POST / HTTP/1.1\r\nContent-Lengthy: 5\r\nTransfer-Encoding: chunked\r\n\r\n":            false,
	} {
		for _, piece := range []int{1, 3, len(head)} {
			var s headScan
			for i := 0; i < len(head); i += piece {
				s.feed([]byte(head[i:min(i+piece, len(head))]))
			}
			if s.ambiguous() != want || !s.finished {
				t.Errorf("%q in pieces of %d: ambiguous %v, finished %v; want %v", head, piece, s.ambiguous(), s.finished, want)
			}
		}
	}
}

// TestAmbiguousRequestClosesEvenAfterA1xx: the Connection: close that
// answers a request with both Content-Length and Transfer-Encoding holds
// when the upstream sends an informational answer (103 Early Hints) before
// its final one. Before the fix ReverseProxy, which clears the response
// header map after passing a 1xx on, dropped it with the 1xx's headers:
// the final answer kept the connection open.
func TestAmbiguousRequestClosesEvenAfterA1xx(t *testing.T) {
	f := newFixture(t, 1)
	f.ups[0].setHandler(earlyHints)
	body := `{"model":"m","prompt":"x"}`
	c, err := net.Dial("tcp", f.srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	br := bufio.NewReader(c)
	var resp *http.Response
	hints := 0
	for {
		if resp, err = http.ReadResponse(br, nil); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode >= 200 {
			break
		}
		hints++
	}
	io.Copy(io.Discard, resp.Body)
	if hints != 1 || resp.StatusCode != 200 {
		t.Fatalf("%d informational answers, then %d: the test proves nothing", hints, resp.StatusCode)
	}
	if !resp.Close {
		t.Fatal("no Connection: close after the 1xx")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("connection still open after the answer: read %v", err)
	}
}

// TestNoInformationalAnswerToHTTP10: an upstream's 1xx (103 Early Hints)
// is not passed on to an HTTP/1.0 client, which knows no 1xx and would
// take it for the final answer (RFC 9110 §15.2: a server MUST NOT send
// one); the final answer is. An HTTP/1.1 client still gets the 1xx.
// Before the fix the HTTP/1.0 client read "103 Early Hints" with the real
// answer as its body.
func TestNoInformationalAnswerToHTTP10(t *testing.T) {
	f := newFixture(t, 1)
	f.ups[0].setHandler(earlyHints)
	body := `{"model":"m","prompt":"x"}`
	for proto, want := range map[string]int{"HTTP/1.0": 200, "HTTP/1.1": 103} {
		resp, _, err := rawExchange(t, f.srv.addr,
			fmt.Sprintf("POST /v1/completions %s\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", proto, len(body), body), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		if resp.StatusCode != want {
			t.Errorf("%s client: first answer %d, want %d", proto, resp.StatusCode, want)
		}
	}
}

// earlyHints answers 103 Early Hints, then 200 with an empty JSON object.
func earlyHints(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Link", "</style.css>; rel=preload")
	w.WriteHeader(http.StatusEarlyHints)
	w.Header().Del("Link")
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{}`)
}
