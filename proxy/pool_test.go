package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The pooled body buffers against the Transport: whoever holds a body
// last, the buffer goes back to the pool only then, and nothing reads it
// after.

// TestPooledBodiesUnderAwkwardUpstreams sends requests of many sizes (up
// to 1.5 MB, more than a loopback socket takes at once, so the Transport
// can still be writing when an early answer arrives) to upstreams that answer in every
// awkward way: 503 before reading the body (retried elsewhere), 200 before
// reading it, a hang-up halfway through it (retried), slow reads; a fifth
// of the clients cancel at once or mid-flight. Recycled buffers are
// poisoned. Every body an upstream read in full must be intact, and every
// buffer must go back to the pool in the end.
func TestPooledBodiesUnderAwkwardUpstreams(t *testing.T) {
	poisonRecycled(t)
	f := newFixture(t, 3)
	f.observed.inner = ignore{} // keep every endpoint in: this test is about buffers
	var corrupt, intact atomic.Int64
	var statuses sync.Map
	for k, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			var id int
			fmt.Sscanf(r.Header.Get("X-Test-ID"), "%d", &id)
			switch (id + k) % 5 {
			case 1:
				w.WriteHeader(503)
				return
			case 2:
				io.WriteString(w, `{"early":true}`)
				return
			case 3:
				io.CopyN(io.Discard, r.Body, r.ContentLength/2)
				if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
					c.Close()
				}
				return
			case 4:
				time.Sleep(time.Millisecond)
			}
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			if got, ok := checkHostile(b); !ok || got != id {
				corrupt.Add(1)
				t.Errorf("request %d: upstream %d received a corrupt body (%d bytes)", id, k, len(b))
			}
			intact.Add(1)
			io.WriteString(w, `{"ok":true}`)
		})
	}
	before := liveBodies.Load()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()
	sizes := []int{700, 5000, 70_000, 300_000, 1_500_000}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 20 {
				id := w*100 + i
				ctx, cancel := context.WithCancel(context.Background())
				if id%5 == 0 {
					time.AfterFunc(time.Duration(id%7)*300*time.Microsecond, cancel)
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/completions",
					strings.NewReader(hostileBody(id, sizes[(id/3)%len(sizes)])))
				req.Header.Set("X-Test-ID", fmt.Sprint(id))
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					n, _ := statuses.LoadOrStore(resp.StatusCode, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	waitIdle(t, f)
	waitFor(t, "every request body to go back to the pool", func() bool { return liveBodies.Load() == before })
	counts := map[any]int64{}
	statuses.Range(func(k, v any) bool { counts[k] = v.(*atomic.Int64).Load(); return true })
	t.Logf("client statuses %v; upstreams read %d bodies in full", counts, intact.Load())
	if corrupt.Load() != 0 || intact.Load() < 20 {
		t.Fatalf("%d corrupt, %d intact bodies received", corrupt.Load(), intact.Load())
	}
}

type ignore struct{}

func (ignore) ObserveSuccess(string)                  {}
func (ignore) ObserveFailure(string, error)           {}
func (ignore) ObserveServerError(string, uint64, int) {}

// TestClientLeavesWhileTheBodyIsStillSent: an upstream answers a stream's
// headers and first event at once, without reading the 1 MiB body (small
// socket buffers keep the Transport's write blocked); the client reads the
// event and hangs up. The handler returns while the Transport's writer may
// still read the body: the buffer must stay out of the pool until the
// writer closes its reader (with -race, a read of a poisoned buffer is a
// reported race). The test checks that this order, writer last, did
// happen, or it would prove nothing.
func TestClientLeavesWhileTheBodyIsStillSent(t *testing.T) {
	var lastByReader atomic.Int64
	var recycledN atomic.Int64
	fn := func(b []byte) {
		recycledN.Add(1)
		pcs := make([]uintptr, 16)
		frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
		for fr, more := frames.Next(); more; fr, more = frames.Next() {
			if strings.HasSuffix(fr.Function, "(*bodyReader).Close") {
				lastByReader.Add(1)
				break
			}
		}
		poison(b)
	}
	recycled.Store(&fn)
	t.Cleanup(func() { recycled.Store(nil) })

	f := newFixture(t, 0)
	dial := f.transport.DialContext
	f.transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err == nil {
			c.(*net.TCPConn).SetWriteBuffer(8 << 10)
		}
		return c, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.(*net.TCPConn).SetReadBuffer(8 << 10)
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
					"e\r\ndata: {\"i\":0}\n\n\r\n")
				io.Copy(io.Discard, io.LimitReader(c, 0)) // never reads the body
				time.Sleep(300 * time.Millisecond)
			}()
		}
	}()
	f.setEndpoints(t, "http://"+ln.Addr().String())
	before := liveBodies.Load()
	const rounds = 6
	for i := range rounds {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/completions", strings.NewReader(hostileBody(i, 1<<20)))
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("round %d: first line %q, %v", i, line, err)
		}
		cancel()
		resp.Body.Close()
	}
	waitIdle(t, f)
	waitFor(t, "every body to go back to the pool", func() bool { return liveBodies.Load() == before })
	// Which holder lets go last is a race here (usually the Transport in
	// a few rounds of six); TestTransportOutlivesTheHandler forces it.
	t.Logf("%d buffers went back on the Transport's close, after the handler's", lastByReader.Load())
}

// heldBody is a RoundTripper that answers at once and keeps the request
// body, as net/http's Transport may while its writer still sends it.
type heldBody struct{ bodies chan io.ReadCloser }

func (h heldBody) RoundTrip(r *http.Request) (*http.Response, error) {
	h.bodies <- r.Body
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader("{}")), ContentLength: 2, Request: r}, nil
}

// TestTransportOutlivesTheHandler: the Transport reads the body only after
// the handler has returned. The buffer must not be recycled until the
// Transport closes its reader, and what it reads must be intact.
func TestTransportOutlivesTheHandler(t *testing.T) {
	n := poisonRecycled(t)
	held := heldBody{bodies: make(chan io.ReadCloser, 1)}
	f := newFixtureWith(t, 1, fixtureOpts{transport: held})
	before := liveBodies.Load()
	body := hostileBody(3, 100_000)
	resp := f.post(t, "/v1/completions", body)
	if readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	r := <-held.bodies
	waitFor(t, "the handler to return", func() bool { return goroutinesIn("proxy.(*Router).ServeHTTP") == 0 })
	recycledBefore := n.Load()
	got := readAll(t, r)
	if got != body {
		t.Fatalf("read %d bytes after the handler returned; intact: %v", len(got), got == body)
	}
	if n.Load() != recycledBefore || liveBodies.Load() != before+1 {
		t.Fatal("the buffer went back to the pool before the Transport closed its reader")
	}
	r.Close()
	if n.Load() != recycledBefore+1 || liveBodies.Load() != before {
		t.Fatal("the buffer did not go back to the pool when the last reader closed")
	}
}
