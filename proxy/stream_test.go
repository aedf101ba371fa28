package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/chat/completions", strings.NewReader(streamChat))
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

// streamChat is a streamed chat request.
const streamChat = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// endingStream is an upstream that streams four words, flushing each, then
// writes "data: [DONE]" without a flush, so net/http sends it with the
// chunked body's end in one write, as an engine's last write often
// arrives.
func endingStream(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	for _, word := range []string{"The", " capital", " is", " Paris"} {
		fmt.Fprintf(w, chunk, word)
		w.(http.Flusher).Flush()
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

// flushLog is a ResponseWriter that logs what the router does to it:
// "w" for a write, "f" for a flush.
type flushLog struct {
	http.ResponseWriter
	ops []byte
	buf strings.Builder
}

func (l *flushLog) Write(p []byte) (int, error)      { l.ops = append(l.ops, 'w'); return l.buf.Write(p) }
func (l *flushLog) Flush()                           { l.ops = append(l.ops, 'f') }
func (l *flushLog) SetWriteDeadline(time.Time) error { return nil }

// TestStreamHoldsTheFlushAfterItsLastEvent: the router flushes every event
// of a stream as it comes, except the last, whose read met the upstream
// body's end: net/http sends that one with the response's end, in one
// write. A client that stops reading at "data: [DONE]" and closes the body,
// as many SSE clients do, then has the end too, and its Transport keeps the
// connection; flushed alone, the end came in a second write, often after
// the client had closed, and its connection was closed with it.
func TestStreamHoldsTheFlushAfterItsLastEvent(t *testing.T) {
	f := newFixture(t, 1)
	f.ups[0].setHandler(endingStream)
	log := &flushLog{ResponseWriter: httptest.NewRecorder()}
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		strings.NewReader(streamChat))
	f.router.ServeHTTP(log, req)
	if !strings.HasSuffix(log.buf.String(), fmt.Sprintf(chunk, " Paris")+"data: [DONE]\n\n") {
		t.Fatalf("stream %q", log.buf.String())
	}
	ops := string(log.ops)
	// The router's read may take several events at once, the last ones
	// with the body's end, and ReverseProxy's first flush (of the head) may
	// come from a timer before or after the first write: "w", "fw",
	// "fwfw"... are all right; a flush after the last write is not.
	if !strings.HasSuffix(ops, "w") || strings.Count(ops, "wf") != strings.Count(ops, "w")-1 {
		t.Fatalf("writes and flushes %q: want each write but the last flushed, the last not", ops)
	}
}

// TestStreamClientStoppingAtDoneKeepsItsConnection: end to end, a client
// that reads up to "data: [DONE]" and closes the body finds its pooled
// connection on each next request.
func TestStreamClientStoppingAtDoneKeepsItsConnection(t *testing.T) {
	f := newFixture(t, 1)
	f.ups[0].setHandler(endingStream)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	const requests = 20
	reused := 0
	for i := range requests {
		trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) {
			if c.Reused {
				reused++
			}
		}}
		ctx := httptrace.WithClientTrace(context.Background(), trace)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/chat/completions",
			strings.NewReader(streamChat))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		events := 0
		for sc.Scan() && sc.Text() != "data: [DONE]" {
			if strings.HasPrefix(sc.Text(), "data: ") {
				events++
			}
		}
		resp.Body.Close() // at [DONE], without reading on
		if events != 4 {
			t.Fatalf("request %d: %d events before [DONE], want 4", i, events)
		}
	}
	if reused != requests-1 {
		t.Fatalf("%d of %d requests found a pooled connection, want %d", reused, requests, requests-1)
	}
}

// TestTrailersSurviveTheHeldFlush: holding the flush after a body's last
// write leaves ReverseProxy's flush for trailers alone, so a short
// response with trailers stays chunked and its trailers reach the client.
func TestTrailersSurviveTheHeldFlush(t *testing.T) {
	f := newFixture(t, 1)
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, `{"ok":true}`)
		w.Header().Set("X-Checksum", "abc")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	})
	resp := f.post(t, "/v1/chat/completions", chatBody("s", "u"))
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != `{"ok":true}` {
		t.Fatalf("body %q, %v", b, err)
	}
	if resp.ContentLength != -1 {
		t.Fatalf("Content-Length %d: the response was not chunked, so it cannot carry trailers", resp.ContentLength)
	}
	if got := resp.Trailer.Get("X-Checksum"); got != "abc" {
		t.Fatalf("announced trailer X-Checksum %q, want abc", got)
	}
	if got := resp.Trailer.Get("X-Late"); got != "late" {
		t.Fatalf("unannounced trailer X-Late %q, want late", got)
	}
}

// signalLog is a flushLog that reports each flush on a channel.
type signalLog struct {
	flushLog
	flushed chan struct{}
}

func (l *signalLog) Flush() {
	l.flushLog.Flush()
	l.flushed <- struct{}{}
}

// TestStreamAfterRetryFlushesEveryEvent: the held flush belongs to the body
// the client gets. A try that failed with a 503, whose body the router
// drained to its end before retrying, must not hold the flushes of the
// stream that the next endpoint sends: each event is flushed before the
// upstream sends the next.
func TestStreamAfterRetryFlushesEveryEvent(t *testing.T) {
	f := newFixture(t, 2)
	log := &signalLog{flushLog: flushLog{ResponseWriter: httptest.NewRecorder()}, flushed: make(chan struct{}, 16)}
	var calls atomic.Int32
	handler := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if calls.Add(1) == 1 {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for i, word := range []string{"The", " capital", " is"} {
			fmt.Fprintf(w, chunk, word)
			w.(http.Flusher).Flush()
			// The router's flushes: its header flush, then one for each event.
			for range map[bool]int{true: 2, false: 1}[i == 0] {
				select {
				case <-log.flushed:
				case <-time.After(10 * time.Second):
					t.Errorf("event %d not flushed to the client by the router", i)
					return
				}
			}
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}
	f.ups[0].setHandler(handler)
	f.ups[1].setHandler(handler)
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		strings.NewReader(streamChat))
	f.router.ServeHTTP(log, req)
	if calls.Load() != 2 {
		t.Fatalf("%d tries, want 2 (a 503, then the stream)", calls.Load())
	}
	if !strings.HasSuffix(log.buf.String(), "data: [DONE]\n\n") {
		t.Fatalf("stream %q", log.buf.String())
	}
}

// TestHeldFlushEndsWhenTheBodyCloses: the flush after the write of the
// body's last bytes is held, but not a flush after the body is closed
// (ReverseProxy's for trailers), and not a flush after an earlier write.
func TestHeldFlushEndsWhenTheBodyCloses(t *testing.T) {
	var atEnd bool
	log := &flushLog{ResponseWriter: httptest.NewRecorder()}
	w := newDeadlineWriter(log, time.Minute, &atEnd)
	body := &endBody{ReadCloser: io.NopCloser(strings.NewReader("data: a\n\ndata: [DONE]\n\n")), atEnd: &atEnd}
	buf := make([]byte, 9)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			w.Write(buf[:n])
			w.FlushError()
		}
		if err != nil {
			break
		}
	}
	body.Close()
	w.FlushError() // ReverseProxy's, for trailers
	// Reads of 9, 9, 6 bytes, then the end: every write flushed, then the
	// trailers' flush. strings.Reader returns io.EOF on its own read, so no
	// write here met the end: all three flushes go out.
	if got := string(log.ops); got != "wfwfwff" {
		t.Fatalf("writes and flushes %q, want wfwfwff", got)
	}

	// A reader whose last read returns its bytes with io.EOF, as net/http's
	// chunked reader does when the body's end is already buffered.
	atEnd, log.ops = false, nil
	body = &endBody{ReadCloser: io.NopCloser(&lastWithEOF{data: []byte("data: [DONE]\n\n")}), atEnd: &atEnd}
	last := make([]byte, 64)
	n, err := body.Read(last)
	if err != io.EOF || n == 0 {
		t.Fatalf("read %d, %v; want bytes with io.EOF", n, err)
	}
	w.Write(last[:n])
	w.FlushError() // held
	body.Close()
	w.FlushError() // ReverseProxy's, for trailers: goes out
	if got := string(log.ops); got != "wf" {
		t.Fatalf("writes and flushes %q, want wf: the flush after the last write held, the trailers' not", got)
	}

	// Without a flush between the last write and Close (a response with a
	// Content-Length and trailers, which ReverseProxy does not flush as it
	// copies), the trailers' flush still goes out.
	atEnd, log.ops = false, nil
	w = newDeadlineWriter(log, time.Minute, &atEnd)
	body = &endBody{ReadCloser: io.NopCloser(&lastWithEOF{data: []byte(`{"ok":true}`)}), atEnd: &atEnd}
	n, _ = body.Read(last)
	w.Write(last[:n])
	body.Close()
	w.FlushError()
	if got := string(log.ops); got != "wf" {
		t.Fatalf("writes and flushes %q, want wf: a flush after Close is never held", got)
	}
}

// lastWithEOF returns its data with io.EOF, in one read when p holds it.
type lastWithEOF struct{ data []byte }

func (r *lastWithEOF) Read(p []byte) (int, error) {
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, io.EOF
}
