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

// Proc is a running `prefixring serve` or `prefixring sim`.
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
	simRe     = regexp.MustCompile(`msg="simulated vLLM server listening" addr=(\S+)`)
)

// Serve starts `prefixring serve --listen 127.0.0.1:0 --admin-listen
// 127.0.0.1:0 args...` and waits until it listens. The test's cleanup
// kills it.
func Serve(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	p, got := start(t, name, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...), adminRe, servingRe)
	p.Admin, p.URL = "http://"+got[0], "http://"+got[1]
	return p
}

// Sim starts `prefixring sim --listen 127.0.0.1:0 args...` (one simulated
// vLLM server) and waits until it listens; URL is its root.
func Sim(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	p, got := start(t, name, append([]string{"sim", "--listen", "127.0.0.1:0"}, args...), simRe)
	p.URL = got[0]
	return p
}

// start runs the binary with argv and waits for the first match of each
// of res on its stderr, in order; it returns the matches' first groups.
func start(t testing.TB, name string, argv []string, res ...*regexp.Regexp) (*Proc, []string) {
	t.Helper()
	cmd := exec.Command(Binary(t), argv...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Name: name, Cmd: cmd, done: make(chan error, 1)}
	found := make(chan string, len(res))
	go func() {
		sc := bufio.NewScanner(stderr)
		next := 0
		for sc.Scan() {
			if next < len(res) {
				if m := res[next].FindStringSubmatch(sc.Text()); m != nil {
					found <- m[1]
					next++
				}
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
	got := make([]string, 0, len(res))
	deadline := time.After(60 * time.Second)
	for len(got) < len(res) {
		select {
		case m := <-found:
			got = append(got, m)
		case err := <-p.done:
			t.Fatalf("%s exited: %v", name, err)
		case <-deadline:
			t.Fatalf("%s did not start", name)
		}
	}
	return p, got
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
