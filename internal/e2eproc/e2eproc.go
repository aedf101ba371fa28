// Package e2eproc builds the prefixring binary and runs it as a separate
// process for end-to-end tests, on 127.0.0.1 only.
package e2eproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"
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

// Proc is a running `prefixring serve`.
type Proc struct {
	Name  string
	Cmd   *exec.Cmd
	URL   string // http://127.0.0.1:port of its API
	Admin string // http://127.0.0.1:port of its admin listener (/metrics, /debug/*)
	done  chan error
}

var (
	servingRe = regexp.MustCompile(`msg=serving listen=(\S+)`)
	adminRe   = regexp.MustCompile(`msg=admin listen=(\S+)`)
)

// Serve starts `prefixring serve --listen 127.0.0.1:0 --admin-listen
// 127.0.0.1:0 args...` and waits until it listens. The test's cleanup
// kills it.
func Serve(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(Binary(t), append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Name: name, Cmd: cmd, done: make(chan error, 1)}
	addr, admin := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingRe.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
			if m := adminRe.FindStringSubmatch(sc.Text()); m != nil {
				admin <- m[1]
			}
			if testing.Verbose() {
				t.Log(name, sc.Text())
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		p.Exit(time.Minute)
	})
	select {
	case a := <-addr:
		p.URL = "http://" + a
		p.Admin = "http://" + <-admin // logged before serving
	case err := <-p.done:
		t.Fatalf("%s exited: %v", name, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start", name)
	}
	return p
}

// Exit waits up to limit (0: not at all) for the process to exit and
// returns whether it did, and with what error. It can be called again.
func (p *Proc) Exit(limit time.Duration) (exited bool, err error) {
	select {
	case err := <-p.done:
		p.done <- err // for the next caller
		return true, err
	default:
	}
	if limit <= 0 {
		return false, nil
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	case <-timer.C:
		return false, nil
	}
}
