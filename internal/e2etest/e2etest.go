// Package e2etest builds the prefixring binary, with the race detector,
// and runs its commands as processes that a test's cleanup stops.
package e2etest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prefixring/prefixring/internal/e2eproc"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds prefixring, with the race detector, once per test binary.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "prefixring-e2e")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "prefixring")
		out, err := exec.Command("go", "build", "-race", "-o", binPath, "github.com/prefixring/prefixring/cmd/prefixring").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Serve starts `prefixring serve --listen 127.0.0.1:0 --admin-listen
// 127.0.0.1:0 args...` and waits until it listens. The test's cleanup
// kills it.
func Serve(t testing.TB, name string, args ...string) *e2eproc.Proc {
	t.Helper()
	return forTest(t, name, e2eproc.LaunchServe)(args...)
}

// Sim starts `prefixring sim --listen 127.0.0.1:0 args...` (one simulated
// vLLM server) and waits until it listens; URL is its root.
func Sim(t testing.TB, name string, args ...string) *e2eproc.Proc {
	t.Helper()
	return forTest(t, name, e2eproc.LaunchSim)(args...)
}

func forTest(t testing.TB, name string, launch func(bin, name string, logf func(string), args ...string) (*e2eproc.Proc, error)) func(args ...string) *e2eproc.Proc {
	return func(args ...string) *e2eproc.Proc {
		t.Helper()
		var logf func(string)
		if testing.Verbose() {
			logf = func(line string) { t.Log(name, line) }
		}
		p, err := launch(Binary(t), name, logf, args...)
		if p != nil {
			t.Cleanup(func() {
				_ = p.Cmd.Process.Kill()
				p.Exit(time.Minute)
			})
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}
