package proxy

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prefixring/prefixring/internal/memhttp"
)

// TestStreamsTellThePace: a streamed answer's first byte is its first
// token, and the balancer's pace hears when it came; an engine answering
// ten times later than the others is then counted slow. An answer sent
// whole tells nothing (its first byte says how long the answer took). In
// a bubble, so the engines' delays are exact.
func TestStreamsTellThePace(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixtureWith(t, 4, fixtureOpts{mem: memhttp.NewNet()})
				for i, u := range f.ups {
					delay := 10 * time.Millisecond
					if i == 2 {
						delay = 100 * time.Millisecond
					}
					u.setHandler(func(w http.ResponseWriter, r *http.Request) {
						io.Copy(io.Discard, r.Body)
						time.Sleep(delay)
						if stream {
							w.Header().Set("Content-Type", "text/event-stream")
							io.WriteString(w, "data: {}\n\ndata: [DONE]\n\n")
							return
						}
						w.Header().Set("Content-Type", "application/json")
						io.WriteString(w, `{"id":"x"}`)
					})
				}
				for i := range 120 {
					body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"conversation %d"}]}`, stream, i)
					resp := f.post(t, "/v1/chat/completions", body)
					if got := readAll(t, resp.Body); resp.StatusCode != 200 {
						t.Fatalf("%d %s", resp.StatusCode, got)
					}
					resp.Body.Close()
				}
				slow := mustID(t, f.ups[2].URL)
				got := f.balancer.Pace().Factors()
				if !stream {
					if len(got) != 0 {
						t.Fatalf("answers sent whole made factors %v", got)
					}
					return
				}
				if len(got) != 1 || got[slow] < 5 {
					t.Fatalf("factors %v, want only %s, about 10", got, slow)
				}
			})
		})
	}
}
