package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prefixring/prefixring/internal/memhttp"
)

// TestAnswersTellThePace: a streamed answer's first byte is its first
// token, and the balancer's pace hears when it came; an answer sent whole
// is timed as a whole answer. An engine answering ten times later than
// the others is then counted slow either way. An error answer tells
// nothing: it says nothing of how fast the engine answers. In a bubble,
// so the engines' delays are exact.
func TestAnswersTellThePace(t *testing.T) {
	for _, mode := range []string{"stream", "whole", "error"} {
		stream := mode == "stream"
		t.Run(mode, func(t *testing.T) {
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
						if mode == "error" {
							w.Header().Set("Content-Type", "application/json")
							w.WriteHeader(http.StatusBadRequest)
							io.WriteString(w, `{"error":{"message":"no","type":"BadRequestError","code":400}}`)
							return
						}
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
					if got := readAll(t, resp.Body); (resp.StatusCode == 200) != (mode != "error") {
						t.Fatalf("%d %s", resp.StatusCode, got)
					}
					resp.Body.Close()
				}
				slow := mustID(t, f.ups[2].URL)
				got := f.balancer.Pace().Factors()
				if mode == "error" {
					if len(got) != 0 {
						t.Fatalf("error answers made factors %v", got)
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

// TestUnansweredRequestsTellThePace: an engine that holds its answers (10
// s here, against the others' 10 ms) is found slow by the requests it has
// not answered, long before its first answer comes: the proxy tells each
// try's lease when it was sent. Completions, whose bound has P's floor,
// so that the slow engine's P alone does not spill its keys. In a bubble,
// so the delays are exact.
func TestUnansweredRequestsTellThePace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixtureWith(t, 4, fixtureOpts{mem: memhttp.NewNet()})
		for i, u := range f.ups {
			delay := 10 * time.Millisecond
			if i == 2 {
				delay = 10 * time.Second
			}
			u.setHandler(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				time.Sleep(delay)
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"id":"x"}`)
			})
		}
		var wg sync.WaitGroup
		codes := make(chan int, 200)
		for i := range 200 {
			body := fmt.Sprintf(`{"model":"m","prompt":"document %d"}`, i)
			wg.Go(func() {
				resp, err := f.srv.Client().Post(f.srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					codes <- 0
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes <- resp.StatusCode
			})
			time.Sleep(5 * time.Millisecond)
		}
		slow := mustID(t, f.ups[2].URL)
		got := f.balancer.Pace().Factors()
		wg.Wait()
		close(codes)
		for c := range codes {
			if c != http.StatusOK {
				t.Fatalf("a request got %d", c)
			}
		}
		if len(got) != 1 || got[slow] < 3 {
			t.Fatalf("after 1 s, before any of its answers: factors %v, want only %s, at least 3", got, slow)
		}
	})
}
