package gossip

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a slog handler that keeps what reaches it.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) take() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.records
	r.records = nil
	return out
}

// suppressed sums the suppressed counts the records report.
func suppressed(recs []slog.Record) int64 {
	var n int64
	for _, rec := range recs {
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "suppressed_since_last" || a.Key == "suppressed" {
				n += a.Value.Int64()
			}
			return true
		})
	}
	return n
}

func randomWord(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return string(b)
}

// TestMemberlistLogCannotBeFlooded: 4,000 packets with random memberlist
// labels (letters only, so no digit marks them as variable) reach the log
// as a handful of lines per window, and the lines held back are counted in
// the next line of their class.
func TestMemberlistLogCannotBeFlooded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		w := newMemberlistLogger(slog.New(rec), nil)
		rng := rand.New(rand.NewPCG(1, 2))
		const n = 4000
		for range n {
			w.Printf("[ERR] memberlist: discarding packet with unacceptable label %q: from=10.1.%d.%d:%d",
				randomWord(rng, 8), rng.IntN(256), rng.IntN(256), 1024+rng.IntN(60000))
		}
		first := rec.take()
		if len(first) > 3 {
			t.Fatalf("%d lines of %d reached the log in one window, want at most 3", len(first), n)
		}
		time.Sleep(logEvery + time.Second)
		w.Printf("[ERR] memberlist: discarding packet with unacceptable label %q: from=10.0.0.1:7946", "zzz")
		second := rec.take()
		if len(second) != 1 {
			t.Fatalf("after the window: %d lines, want 1", len(second))
		}
		if got := suppressed(first) + suppressed(second); got != n-int64(len(first)) {
			t.Errorf("suppressed counts reported: %d, want %d", got, n-len(first))
		}
	})
}

// TestMemberlistLogClassesAreBounded: lines whose every word varies (a
// peer that sends garbage crafted to look like many messages) cannot grow
// the limiter or the log beyond its cap of classes per window, and classes
// older than the window are forgotten.
func TestMemberlistLogClassesAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		lw := &logWriter{l: slog.New(rec), limits: newLimiter()}
		rng := rand.New(rand.NewPCG(3, 4))
		const n = 4000
		for range n {
			fmt.Fprintf(lw, "[WARN] memberlist: %s %s happened\n", randomWord(rng, 6), randomWord(rng, 5))
		}
		got := rec.take()
		if len(got) > maxLogClasses+1 {
			t.Fatalf("%d lines reached the log in one window, want at most %d", len(got), maxLogClasses+1)
		}
		if k := lw.limits.size(); k > maxLogClasses+1 {
			t.Fatalf("limiter holds %d classes, want at most %d", k, maxLogClasses+1)
		}
		time.Sleep(logEvery + time.Second)
		fmt.Fprintf(lw, "[WARN] memberlist: one more\n")
		got = append(got, rec.take()...)
		if k := lw.limits.size(); k > 2 {
			t.Errorf("limiter holds %d classes after the window, want the old ones pruned", k)
		}
		if s := suppressed(got); s+int64(len(got)) < n+1 {
			t.Errorf("%d lines logged and %d reported suppressed, want them to account for all %d", len(got), s, n+1)
		}
	})
}

func TestLogClass(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{`[ERR] memberlist: discarding packet with unacceptable label "abc": from=1.2.3.4:5`, "ERR discarding packet with unacceptable label"},
		{`[ERR] memberlist: Failed to receive: EOF from=1.2.3.4:5`, "ERR Failed to receive"},
		{`[WARN] memberlist: Got ping for unexpected node 'x' from=1.2.3.4:5`, "WARN Got ping for unexpected node"},
		{`[WARN] memberlist: Refuting a suspect message (from: b)`, "WARN Refuting a suspect message"},
		{"[ERR] memberlist: " + strings.Repeat("a", 300), "ERR " + strings.Repeat("a", maxClassLen)},
	} {
		if got := logClass(c.line); got != c.want {
			t.Errorf("logClass(%q) = %q, want %q", c.line, got, c.want)
		}
	}
}
