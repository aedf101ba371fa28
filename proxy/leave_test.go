package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestEndpointLeavingMidRequestFinishesIt: an endpoint that leaves the set
// (a rolling update, a scale-down, a file edit) while it computes a
// non-streamed answer finishes that answer, and the client gets it: leaving
// is not failing. Before the fix the set ended the endpoint's alive context
// when it left, which abandoned the try still waiting for its headers and
// replayed it on the other endpoint (the work thrown away).
func TestEndpointLeavingMidRequestFinishesIt(t *testing.T) {
	f := newFixture(t, 2)
	started, finish := make(chan string, 1), make(chan struct{})
	hold := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		started <- r.Host
		<-finish // a long prefill: no header before the whole answer
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"cmpl-1","object":"chat.completion"}`)
	}
	for _, u := range f.ups {
		u.setHandler(hold)
	}
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("sys", "hello")))
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		done <- resp
	}()
	host := <-started
	var leaving, staying *fakeServer
	for _, u := range f.ups {
		if u.Listener.Addr().String() == host {
			leaving = u
		} else {
			staying = u
		}
	}
	f.setEndpoints(t, staying.URL) // it leaves discovery mid-request
	close(finish)
	resp := <-done
	if resp == nil {
		t.Fatal("no response")
	}
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 || leaving.served.Load() != 1 || staying.served.Load() != 0 {
		t.Fatalf("status %d %s; the leaving endpoint served %d, the staying one %d (want 200, 1, 0: no retry)",
			resp.StatusCode, body, leaving.served.Load(), staying.served.Load())
	}
	if n := f.observed.failuresOf(mustID(t, leaving.URL)); n != 0 {
		t.Fatalf("leaving counted as %d failures", n)
	}
}
