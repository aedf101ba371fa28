// Package e2eproc runs the prefixring binary as a separate process, on
// 127.0.0.1 only: for the demo, the real-process chaos runs and (through
// package e2etest, which adds what needs package testing) the end-to-end
// tests. It does not import testing, so the binary that links it does not
// either.
package e2eproc

import (
	"bufio"
	"fmt"
	"os/exec"
	"regexp"
	"syscall"
	"time"
)

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

// LaunchServe runs `bin serve` on 127.0.0.1 ports of its own choosing, as
// e2etest.Serve does, outside tests (the demo). Stop it with [Proc.Stop].
func LaunchServe(bin, name string, logf func(string), args ...string) (*Proc, error) {
	p, got, err := Launch(bin, name, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...), logf, adminRe, servingRe)
	if err == nil {
		p.Admin, p.URL = "http://"+got[0], "http://"+got[1]
	}
	return p, err
}

// LaunchSim runs `bin sim` on a 127.0.0.1 port of its own choosing, as
// e2etest.Sim does, outside tests.
func LaunchSim(bin, name string, logf func(string), args ...string) (*Proc, error) {
	p, got, err := Launch(bin, name, append([]string{"sim", "--listen", "127.0.0.1:0"}, args...), logf, simRe)
	if err == nil {
		p.URL = got[0]
	}
	return p, err
}

// Launch runs bin with argv and waits up to a minute for the first match
// of each of res on its stderr, in order; it returns the matches' first
// groups. Every stderr line goes to logf, when set. On an error the
// process, if it started, is killed and returned, for its Exit.
func Launch(bin, name string, argv []string, logf func(string), res ...*regexp.Regexp) (*Proc, []string, error) {
	cmd := exec.Command(bin, argv...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
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
			if logf != nil {
				logf(sc.Text())
			}
		}
		p.done <- cmd.Wait()
	}()
	got := make([]string, 0, len(res))
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for len(got) < len(res) {
		select {
		case m := <-found:
			got = append(got, m)
		case err := <-p.done:
			p.done <- err
			return p, nil, fmt.Errorf("%s exited: %v", name, err)
		case <-deadline.C:
			_ = cmd.Process.Kill()
			return p, nil, fmt.Errorf("%s did not start within a minute", name)
		}
	}
	return p, got, nil
}

// Stop asks the process to end (SIGTERM) and kills it after grace.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if exited, _ := p.Exit(grace); !exited {
		_ = p.Cmd.Process.Kill()
		p.Exit(time.Minute)
	}
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
