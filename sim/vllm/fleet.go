package vllm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ServeAll runs one simulated server on each listener, server i seeded
// with cfg.Seed+i and its metrics on a registry of its own, until ctx ends
// or one of them fails; it closes the listeners and returns when every
// server has stopped. log receives one line a server; nil: none.
func ServeAll(ctx context.Context, cfg Config, lns []net.Listener, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, len(lns))
	for i, ln := range lns {
		one := cfg
		one.Seed = cfg.Seed + uint64(i)
		reg := prometheus.NewRegistry()
		s, err := New(one, reg, reg)
		if err != nil {
			stop()
			wg.Wait()
			for _, l := range lns[i:] {
				_ = l.Close()
			}
			return err
		}
		srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() { s.Run(ctx) })
		wg.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("%s: %w", ln.Addr(), err)
			}
		})
		context.AfterFunc(ctx, func() { _ = srv.Close() })
		log.Info("simulated vLLM server listening", "addr", "http://"+ln.Addr().String(), "model", one.Model,
			"profile", one.Engine.Profile.Name, "kv_blocks", one.Engine.Blocks())
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	stop()
	wg.Wait()
	return err
}
