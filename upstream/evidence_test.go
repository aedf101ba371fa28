package upstream

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestRequestEvidenceIsReported: the set tells its arbiter, beside what it
// discovered and holds out, which endpoints it holds out for failed
// requests (not probes) and which answered its requests within
// ServedWindow: the cluster ejects on one replica's failed requests only
// when no other replica's requests succeed there (core.Tally).
func TestRequestEvidenceIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn := newFakeNet()
		arb := &recordingArbiter{}
		cfg := fastHealth()
		cfg.MaxEjectionPercent = 100
		s := newTestSet(t, cfg, fn, func(o *Options) { o.Arbiter = arb })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Run(ctx)
		const a, b, c = "http://a:1", "http://b:1", "http://c:1"
		_ = s.SetSource("static", []string{a, b, c})
		synctest.Wait()
		s.ObserveSuccess(a)
		for range 3 {
			s.ObserveFailure(b, errors.New("refused"))
		}
		fn.set("c:1", true)
		time.Sleep(3*cfg.Interval + time.Millisecond) // c fails three probes
		synctest.Wait()
		_, down := arb.get()
		failing, served := arb.evidence()
		if !slices.Equal(down, []string{b, c}) || !slices.Equal(failing, []string{b}) || !slices.Equal(served, []string{a}) {
			t.Fatalf("down %v failing %v served %v, want down [b c] failing [b] served [a]", down, failing, served)
		}
		time.Sleep(cfg.ServedWindow) // a answers nothing more
		synctest.Wait()
		if _, served := arb.evidence(); len(served) != 0 {
			t.Fatalf("served %v after a window without requests, want none", served)
		}
		s.ObserveSuccess(a)
		synctest.Wait()
		if _, served := arb.evidence(); !slices.Equal(served, []string{a}) {
			t.Fatalf("served %v after a new success, want [a]", served)
		}
		cancel()
	})
}
