package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// poisonRecycled overwrites every buffer as it goes back to the pool, for
// the test's duration: a read of a returned buffer then sees 0xAA bytes
// (and races with the overwrite, which -race reports).
func poisonRecycled(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	fn := func(b []byte) {
		n.Add(1)
		poison(b)
	}
	recycled.Store(&fn)
	t.Cleanup(func() { recycled.Store(nil) })
	return &n
}

var poisonBytes = bytes.Repeat([]byte{0xAA}, 1<<maxClass)

func poison(b []byte) { copy(b, poisonBytes) }

func TestBodyBufferReturnsOnlyWhenEveryHolderIsDone(t *testing.T) {
	n := poisonRecycled(t)
	buf := append(getBuf(5000), strings.Repeat("x", 5000)...)
	x := newBody(buf)
	r1, r2 := x.reader(), x.reader()
	x.release() // the handler returns first: the Transport still reads
	if got := readAll(t, io.LimitReader(r1, 10)); got != "xxxxxxxxxx" {
		t.Fatalf("read %q", got)
	}
	r1.Close()
	r1.Close() // idempotent
	if n.Load() != 0 {
		t.Fatal("buffer recycled while a reader was open")
	}
	if got := readAll(t, r2); got != strings.Repeat("x", 5000) {
		t.Fatalf("second reader read %d bytes", len(got))
	}
	r2.Close()
	if n.Load() != 1 {
		t.Fatalf("buffer recycled %d times, want once", n.Load())
	}
	if _, err := r1.Read(make([]byte, 8)); err != errBodyClosed {
		t.Fatalf("read after close: %v", err)
	}
}

// TestBodyReadsRaceWithClose reads from many readers while they are
// closed from other goroutines, as the Transport's writer and the
// Transport's cleanup may: under -race, a read after the buffer went back
// to the pool races with the poisoning, and poisoned bytes fail the test.
func TestBodyReadsRaceWithClose(t *testing.T) {
	poisonRecycled(t)
	for round := range 200 {
		want := bytes.Repeat([]byte{'a' + byte(round%26)}, 4096+round*37)
		x := newBody(append(getBuf(len(want)), want...))
		var wg sync.WaitGroup
		for range 4 {
			r := x.reader()
			wg.Go(func() {
				p := make([]byte, 64)
				for {
					n, err := r.Read(p)
					if bytes.ContainsRune(p[:n], 0xAA) || !bytes.Equal(p[:n], want[:n]) {
						t.Errorf("round %d: read recycled bytes", round)
					}
					if err != nil {
						return
					}
				}
			})
			wg.Go(func() { r.Close() })
		}
		x.release()
		wg.Wait()
	}
	if n := liveBodies.Load(); n != 0 {
		t.Fatalf("%d bodies never released", n)
	}
}

// hostileBody is request id's body: its prompt is a pattern derived from
// id, so the upstream can check every byte it received.
func hostileBody(id, size int) string {
	head := fmt.Sprintf(`{"model":"m","prompt":"req-%d `, id)
	pat := fmt.Sprintf("%d-abcdefghij ", id)
	var sb strings.Builder
	sb.WriteString(head)
	for sb.Len() < size {
		sb.WriteString(pat)
	}
	sb.WriteString(`"}`)
	return sb.String()
}

func checkHostile(b []byte) (int, bool) {
	var id int
	if _, err := fmt.Sscanf(string(b[:min(len(b), 64)]), `{"model":"m","prompt":"req-%d `, &id); err != nil {
		return 0, false
	}
	return id, string(b) == hostileBody(id, len(b)-2)
}

// TestBodiesOfEverySizeArriveIntact: bodies with and without a declared
// length, across the buffer classes and past the largest pooled one, reach
// the upstream byte for byte; a chunked body over the limit gets 413.
func TestBodiesOfEverySizeArriveIntact(t *testing.T) {
	poisonRecycled(t)
	f := newFixture(t, 1, func(c *Config) { c.MaxBodyBytes = 5 << 20 })
	f.ups[0].setHandler(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if _, ok := checkHostile(b); !ok {
			w.WriteHeader(500)
			fmt.Fprintf(w, "corrupt body of %d bytes", len(b))
			return
		}
		fmt.Fprintf(w, `{"len":%d}`, len(b))
	})
	for i, size := range []int{10, 4095, 4096, 4097, 65535, 65537, 1 << 20, 4<<20 + 1} {
		body := hostileBody(i, size)
		for _, chunked := range []bool{false, true} {
			var r io.Reader = strings.NewReader(body)
			if chunked {
				r = io.MultiReader(r) // no length: sent chunked
			}
			resp, err := f.srv.Client().Post(f.srv.URL+"/v1/completions", "application/json", r)
			if err != nil {
				t.Fatal(err)
			}
			got := readAll(t, resp.Body)
			if resp.StatusCode != 200 || got != fmt.Sprintf(`{"len":%d}`, len(body)) {
				t.Fatalf("%d bytes (chunked %v): %d %s", len(body), chunked, resp.StatusCode, got)
			}
		}
	}
	resp, err := f.srv.Client().Post(f.srv.URL+"/v1/completions", "application/json", io.MultiReader(strings.NewReader(hostileBody(1, 5<<20+1))))
	if err != nil {
		t.Fatal(err)
	}
	assertAPIError(t, resp, 413, "invalid_request_error")
}

// TestDeclaredLengthIsNotAllocated: 8 connections each declaring a 32 MiB
// body and sending one byte. Before the fix the router allocated the
// declared length up front: the heap grew by 256 MiB (notes/proxy.md). Now
// the buffer grows with what arrives.
func TestDeclaredLengthIsNotAllocated(t *testing.T) {
	f := newFixture(t, 1)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 8 {
		c, err := net.Dial("tcp", f.srv.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{", 32<<20)
	}
	waitFor(t, "8 handlers reading their bodies", func() bool { return goroutinesIn("proxy.(*Router).readBody") == 8 })
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %d KiB", grew>>10)
	if grew > 16<<20 {
		t.Fatalf("8 bodies of 1 byte each, declared 32 MiB, grew the heap by %d MiB", grew>>20)
	}
}

func goroutinesIn(fn string) int {
	buf := make([]byte, 8<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), fn)
}
