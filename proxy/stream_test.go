package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const chunk = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"llama","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}` + "\n\n"

// dyingStream writes events, then drops the TCP connection: with a reset
// (rst) or a plain close.
func dyingStream(events string, rst bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, events)
		w.(http.Flusher).Flush()
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if rst {
			c.(*net.TCPConn).SetLinger(0)
		}
		c.Close()
	}
}

// TestStreamCutByUpstreamEndsWithErrorEvent: an upstream that dies after
// two events (reset or close, at an event boundary or in the middle of
// one) leaves the client with those events, then an OpenAI-style error
// event, then a cleanly ended response; the cut is counted per endpoint
// and observed as the endpoint's failure. Before the fix the client saw
// an aborted transfer (unexpected EOF, notes/proxy.md).
func TestStreamCutByUpstreamEndsWithErrorEvent(t *testing.T) {
	two := fmt.Sprintf(chunk, "Paris") + fmt.Sprintf(chunk, " is")
	for _, tc := range []struct {
		name, events, wantBefore string
		rst                      bool
	}{
		{"reset at a boundary", two, two, true},
		{"close at a boundary", two, two, false},
		{"reset mid-event", two + `data: {"id":"chatcm`, two + `data: {"id":"chatcm` + "\n\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 1)
			f.ups[0].setHandler(dyingStream(tc.events, tc.rst))
			resp := f.post(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("the client saw a broken transfer: %v after %q", err, b)
			}
			want := tc.wantBefore + `data: {"error":{"message":"The inference endpoint failed while streaming; the response is incomplete.","type":"upstream_error","param":null,"code":"stream_interrupted"}}` + "\n\n"
			if string(b) != want {
				t.Fatalf("stream:\n%q\nwant\n%q", b, want)
			}
			id := mustID(t, f.ups[0].URL)
			if n := testutil.ToFloat64(f.router.metrics.cuts.WithLabelValues(id)); n != 1 {
				t.Fatalf("prefixring_stream_errors_total %v, want 1", n)
			}
			if n := f.observed.failuresOf(id); n != 1 {
				t.Fatalf("%d failures observed, want 1", n)
			}
		})
	}
}

// TestClientLeavingIsNotAStreamCut: a client hanging up mid-stream is not
// the upstream's failure.
func TestClientLeavingIsNotAStreamCut(t *testing.T) {
	f := newFixture(t, 1)
	started := make(chan struct{})
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, chunk, "Paris")
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	resp.Body.Close()
	waitIdle(t, f)
	id := mustID(t, f.ups[0].URL)
	if n := testutil.ToFloat64(f.router.metrics.cuts.WithLabelValues(id)); n != 0 || f.observed.failuresOf(id) != 0 {
		t.Fatalf("a client leaving counted as a cut (%v) or a failure (%d)", n, f.observed.failuresOf(id))
	}
}

// TestOpenAIClientSeesTheStreamCut: the official Go client reading a
// stream its upstream cut surfaces the router's error, after the chunks
// that came through, rather than a silent truncation.
func TestOpenAIClientSeesTheStreamCut(t *testing.T) {
	f := newFixture(t, 1)
	f.ups[0].setHandler(dyingStream(fmt.Sprintf(chunk, "Paris")+fmt.Sprintf(chunk, " is"), true))
	client := openai.NewClient(option.WithBaseURL(f.srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:    "llama",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the capital of France?")},
	})
	var text strings.Builder
	for stream.Next() {
		text.WriteString(stream.Current().Choices[0].Delta.Content)
	}
	err := stream.Err()
	if text.String() != "Paris is" || err == nil || !strings.Contains(err.Error(), "stream_interrupted") {
		t.Fatalf("got %q, err %v", text.String(), err)
	}
}

func TestMediaType(t *testing.T) {
	for ct, want := range map[string]string{
		"text/event-stream":                   "text/event-stream",
		"Text/Event-Stream; charset=utf-8":    "text/event-stream",
		" application/json ;charset=utf-8":    "application/json",
		"":                                    "",
		"application/problem+json; x=\"a;b\"": "application/problem+json",
	} {
		if got := mediaType(http.Header{"Content-Type": {ct}}); got != want {
			t.Errorf("%q: %q, want %q", ct, got, want)
		}
	}
	if !isJSON(http.Header{"Content-Type": {"application/problem+json"}}) || isJSON(http.Header{"Content-Type": {"text/html"}}) {
		t.Error("isJSON")
	}
}
