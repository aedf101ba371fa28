package router

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prefixring/prefixring/workers"
)

// blockFirst is a log handler that holds up the first record whose message
// is msg until release closes: a way into the middle of the code that logs
// it.
type blockFirst struct {
	msg     string
	first   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *blockFirst) Enabled(context.Context, slog.Level) bool { return true }
func (h *blockFirst) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *blockFirst) WithGroup(string) slog.Handler            { return h }
func (h *blockFirst) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		if h.first.CompareAndSwap(false, true) {
			close(h.entered)
			<-h.release
		}
	}
	return nil
}

// A change of the workers set that lands while an earlier one is being
// applied to the endpoint set is not undone by it: the earlier change read
// the members before the later one, and applying them last routed without
// the later worker until the next change. The earlier apply is held up in
// the middle (after it read the members, in the endpoint set's warning
// about an OpenAI base URL) while a peer's add merges.
func TestWorkersChangesApplyInOrder(t *testing.T) {
	h := &blockFirst{msg: "endpoint given as an OpenAI base URL; using its server root",
		entered: make(chan struct{}), release: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.Sources.Static = []string{"http://127.0.0.1:1"}
	cfg.DrainDelay, cfg.DrainTimeout = 0, 5*time.Second
	r, err := New(cfg, Options{Listener: listen(t), AdminListener: listen(t), Seed: 1, Log: slog.New(h), Hostname: "r0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-r.Started():
	case err := <-done:
		t.Fatal(err)
	}
	ws := r.Workers()
	var wg sync.WaitGroup
	wg.Go(func() { ws.Add("http://10.0.0.1:8000/v1") })
	<-h.entered
	st := ws.Ops()[0].Stamp
	ws.Merge([]workers.Op{{URL: "http://10.0.0.2:8000", Stamp: st + 1, Origin: "r1"}})
	close(h.release)
	wg.Wait()
	if ids := r.Endpoints().Snapshot().IDs(); !slices.Contains(ids, "http://10.0.0.2:8000") {
		t.Fatalf("the endpoints are %v, without the worker merged while the first add was applied (members %v)", ids, ws.Members())
	}
}
