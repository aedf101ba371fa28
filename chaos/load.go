package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prefixring/prefixring/internal/memhttp"
)

// Outcome is what one client request got.
type Outcome struct {
	ID       string
	Replica  int    // the replica that answered (or failed) it
	Status   int    // 0 when no response arrived
	Err      string // transport error, if any
	Endpoint string // X-Prefixring-Endpoint
	Decision string // X-Prefixring-Decision: home, spill or fallback
	Stream   bool
	// Belongs: the engine echoed this request's own X-Request-Id.
	Belongs bool
	// CutStream: a streamed response ended with the router's
	// stream_interrupted error event.
	CutStream bool
	// AtCrash: the request was in flight on a replica that crashed.
	AtCrash bool
	Key     string // the conversation's system prompt and id, for affinity
	Start   time.Time
	TTFB    time.Duration
	// Prompt and Cached are the engine's usage counts (non-streamed
	// answers): the hit rate as the engines saw it.
	Prompt, Cached int
}

// OK reports a complete, correctly addressed answer.
func (o Outcome) OK() bool { return o.Status == http.StatusOK && o.Belongs && !o.CutStream }

// Client sends requests to the replicas as a DNS round-robin client with
// several A records does: each request starts at the next replica, and a
// connection refused moves it on to the one after.
type Client struct {
	urls    []string // the replicas' API roots, in order
	crashes func(i int) int
	http    *http.Client
	next    atomic.Uint64
	seq     atomic.Uint64

	mu       sync.Mutex
	outcomes []Outcome
}

// NewClient returns a client of c.
func (c *Cluster) NewClient() *Client {
	tr := c.transport()
	tr.ResponseHeaderTimeout = 0 // the client waits for the router's answer, a 504 included
	urls := make([]string, c.cfg.Replicas)
	for i := range urls {
		urls[i] = "http://" + ReplicaAddr(i)
	}
	return NewClient(urls, tr, c.Crashes)
}

// NewClient returns a client of the replicas at urls over rt; crashes(i)
// counts replica i's crashes so far (nil: none are counted), so a request
// cut by a crash is told from a lost one.
func NewClient(urls []string, rt http.RoundTripper, crashes func(i int) int) *Client {
	if crashes == nil {
		crashes = func(int) int { return 0 }
	}
	return &Client{urls: urls, crashes: crashes, http: &http.Client{Transport: rt}}
}

// HitRate is the engines' cached share of prompt tokens over outs.
func HitRate(outs []Outcome) float64 {
	var p, c int
	for _, o := range outs {
		p, c = p+o.Prompt, c+o.Cached
	}
	if p == 0 {
		return 0
	}
	return float64(c) / float64(p)
}

// Close drops the client's idle connections.
func (cl *Client) Close() { cl.http.CloseIdleConnections() }

// Do sends one chat body and records the outcome.
func (cl *Client) Do(ctx context.Context, key string, body []byte, stream bool) Outcome {
	id := fmt.Sprintf("req-%d", cl.seq.Add(1))
	n := len(cl.urls)
	start := int(cl.next.Add(1)-1) % n
	o := Outcome{ID: id, Stream: stream, Key: key, Start: time.Now()}
	for k := range n {
		i := (start + k) % n
		crashes := cl.crashes(i)
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, cl.urls[i]+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		resp, err := cl.http.Do(req)
		o.Replica = i
		if err != nil {
			o.AtCrash = cl.crashes(i) > crashes
			// Refused: nobody listens there now. Reset or closed on a kept-
			// alive connection before any answer, while no crash happened
			// during the request: the connection belonged to a process that
			// died before it was sent (Go's Transport retries that itself
			// only for idempotent requests; OpenAI's SDKs retry connection
			// errors). Either way: the next replica. A request cut by a crash
			// while in flight is counted apart instead.
			stale := reused && !o.AtCrash && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))
			if memhttp.IsRefused(err) || stale {
				o.AtCrash = false
				continue
			}
			o.Err = err.Error()
			break
		}
		o.TTFB = time.Since(o.Start)
		o.Status, o.Endpoint, o.Decision = resp.StatusCode, resp.Header.Get("X-Prefixring-Endpoint"), resp.Header.Get("X-Prefixring-Decision")
		o.Belongs = resp.Header.Get("X-Request-Id") == id
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			o.Err = err.Error()
			o.AtCrash = cl.crashes(i) > crashes
		}
		o.CutStream = stream && bytes.Contains(b, []byte("stream_interrupted"))
		if !stream && o.Status == http.StatusOK {
			var u struct {
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
					Details      struct {
						CachedTokens int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			if json.Unmarshal(b, &u) == nil {
				o.Prompt, o.Cached = u.Usage.PromptTokens, u.Usage.Details.CachedTokens
			}
		}
		break
	}
	if o.Status == 0 && o.Err == "" {
		o.Err = "every replica refused the connection"
	}
	cl.mu.Lock()
	cl.outcomes = append(cl.outcomes, o)
	cl.mu.Unlock()
	return o
}

// Outcomes returns every outcome so far.
func (cl *Client) Outcomes() []Outcome {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return append([]Outcome(nil), cl.outcomes...)
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatBody is a conversation's turn: one of groups shared system prompts,
// then the turns so far.
func chatBody(group, conv, turn int, stream bool) []byte {
	msgs := []message{{Role: "system", Content: fmt.Sprintf("You are assistant %d of the chaos test. %s", group, strings.Repeat("Answer briefly and precisely. ", 40))}}
	for t := 0; t <= turn; t++ {
		msgs = append(msgs, message{Role: "user", Content: fmt.Sprintf("conversation %d, question %d: %s", conv, t, strings.Repeat("why? ", 20))})
		if t < turn {
			msgs = append(msgs, message{Role: "assistant", Content: "because"})
		}
	}
	b, _ := json.Marshal(map[string]any{"model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 8, "stream": stream, "messages": msgs})
	return b
}

// PreambleBody is a chat whose first user message opens with group g's
// document (600 characters, past the sketch's 256-character chunks), then
// conversation conv's question: once the replicas' sketches learn a
// document as a shared prefix, how such a body keys changes (its key, its
// group and its shared characters), so a check that the replicas key
// alike can fail on it, where ChatBody's short questions key alike
// whatever the tables hold.
func PreambleBody(g, conv int) []byte {
	doc := fmt.Sprintf("Document %d. ", g) + strings.Repeat(fmt.Sprintf("Clause %d applies. ", g), 36)
	b, _ := json.Marshal(map[string]any{"model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 8, "messages": []map[string]string{
		{"role": "system", "content": "You answer questions about documents."},
		{"role": "user", "content": fmt.Sprintf("%s\nQuestion %d: what does it say?", doc, conv)},
	}})
	return b
}

// Preamble sends PreambleBody requests until ctx ends: clients clients,
// each sending one after another over groups documents, think apart.
func (cl *Client) Preamble(ctx context.Context, clients, groups int, think time.Duration) {
	var conv atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				n := int(conv.Add(1))
				rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				cl.Do(rctx, fmt.Sprintf("doc%d/c%d", n%groups, n), PreambleBody(n%groups, n), false)
				cancel()
				select {
				case <-ctx.Done():
				case <-time.After(think):
				}
			}
		})
	}
	wg.Wait()
}

// ChatBody is the body Steady sends for a conversation's turn: the real-
// process scenarios ask the replicas how they key it.
func ChatBody(group, conv, turn int, stream bool) []byte { return chatBody(group, conv, turn, stream) }

// Steady runs conversations until ctx ends: concurrency clients, each
// playing conversations of turns turns over groups system prompts, with
// think time between turns; every streamEvery-th request is streamed (0:
// none).
func (cl *Client) Steady(ctx context.Context, concurrency, groups, turns, streamEvery int, think time.Duration) {
	var wg sync.WaitGroup
	var conv atomic.Int64
	var n atomic.Int64
	for range concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				c := int(conv.Add(1))
				for t := 0; t < turns && ctx.Err() == nil; t++ {
					stream := streamEvery > 0 && n.Add(1)%int64(streamEvery) == 0
					rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					cl.Do(rctx, fmt.Sprintf("g%d/c%d", c%groups, c), chatBody(c%groups, c, t, stream), stream)
					cancel()
					select {
					case <-ctx.Done():
					case <-time.After(think):
					}
				}
			}
		})
	}
	wg.Wait()
}

// Tally sums outcomes for the invariants.
type Tally struct {
	Requests, OK  int
	AtCrash       int // in flight on a replica that crashed: counted apart
	Mismatched    int // answered with another request's answer
	CutStreams    int // ended with the stream_interrupted event
	Failed        int // anything else that is not OK
	FailedByError map[string]int
}

// Count tallies outcomes.
func Count(outs []Outcome) Tally {
	t := Tally{FailedByError: map[string]int{}}
	for _, o := range outs {
		t.Requests++
		switch {
		case o.OK():
			t.OK++
		case o.AtCrash:
			t.AtCrash++
		case o.Status == http.StatusOK && !o.Belongs:
			t.Mismatched++
		case o.CutStream:
			t.CutStreams++
		default:
			t.Failed++
			kind := o.Err
			if kind == "" {
				kind = fmt.Sprintf("status %d", o.Status)
			}
			t.FailedByError[kind]++
		}
	}
	return t
}

func (t Tally) String() string {
	return fmt.Sprintf("%d requests: %d ok, %d in flight at a crash, %d cut streams, %d failed %v, %d mismatched",
		t.Requests, t.OK, t.AtCrash, t.CutStreams, t.Failed, t.FailedByError, t.Mismatched)
}

// Sample calls f every interval until the returned stop is called, and
// waits for the last call to finish.
func Sample(every time.Duration, f func()) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(every):
				f()
			}
		}
	}()
	return func() { close(done); <-finished }
}

// Stretches measures the spans during which a sampled condition (the
// replicas agree, say) did not hold.
type Stretches struct {
	since time.Time       // when the current span began; zero: none
	Spans []time.Duration // the spans ended so far
}

// Observe takes one sample at now.
func (s *Stretches) Observe(now time.Time, holds bool) {
	switch {
	case !holds && s.since.IsZero():
		s.since = now
	case holds && !s.since.IsZero():
		s.Spans = append(s.Spans, now.Sub(s.since))
		s.since = time.Time{}
	}
}

// Finish closes a span still open at now.
func (s *Stretches) Finish(now time.Time) { s.Observe(now, true) }

// Longest is the longest span (0: none).
func (s *Stretches) Longest() time.Duration {
	if len(s.Spans) == 0 {
		return 0
	}
	return slices.Max(s.Spans)
}

// Mean is the mean of xs (0 when empty).
func Mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}
