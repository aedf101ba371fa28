package loadgen

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// progress draws a bar on cfg.Progress every 200 ms until the returned
// function is called, which draws it a last time and ends the line.
func (r *runner) progress() (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				r.draw()
			case <-done:
				r.draw()
				fmt.Fprintln(r.cfg.Progress)
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (r *runner) draw() {
	const width = 30
	sent, failed := int(r.sent.Load()), r.failed.Load()
	filled := 0
	if r.total > 0 {
		filled = min(width, sent*width/r.total)
	}
	fmt.Fprintf(r.cfg.Progress, "\r[%s%s] %d/%d requests, %d failed, %.0f s ",
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), sent, r.total, failed, time.Since(r.t0).Seconds())
}

// IsTerminal reports whether f is a terminal (a character device): where
// a progress bar belongs.
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
