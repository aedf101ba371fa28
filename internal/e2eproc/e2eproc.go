// Package e2eproc runs the prefixring binary as a separate process, on
// 127.0.0.1 only: for the demo, the real-process chaos runs and (through
// package e2etest, which adds what needs package testing) the end-to-end
// tests. It does not import testing, so the binary that links it does not
// either.
package e2eproc

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
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

// clusterView is the part of /debug/cluster these helpers read.
type clusterView struct {
	Members []struct {
		Name string `json:"name"`
		Addr string `json:"addr"`
	} `json:"members"`
}

func getCluster(ctx context.Context, admin string) (clusterView, error) {
	var c clusterView
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/debug/cluster", nil)
	if err != nil {
		return c, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	return c, json.NewDecoder(resp.Body).Decode(&c)
}

// GossipAddr is the gossip address the replica called name, whose admin
// listener is admin, advertises: what the next replicas --join.
func GossipAddr(ctx context.Context, admin, name string) (string, error) {
	c, err := getCluster(ctx, admin)
	if err != nil {
		return "", err
	}
	for _, m := range c.Members {
		if m.Name == name {
			return m.Addr, nil
		}
	}
	return "", fmt.Errorf("%s is not among its own members", name)
}

// WaitMembers waits, up to 30 s or until ctx ends, until every replica in
// reps sees n gossip members.
func WaitMembers(ctx context.Context, reps []*Proc, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, r := range reps {
		for {
			c, err := getCluster(ctx, r.Admin)
			if err == nil && len(c.Members) == n {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s does not see %d gossip members", r.Name, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// LaunchReplicas runs n `bin serve` replicas in front of engines, named
// router-0..n-1, gossiping on 127.0.0.1 under a fresh random key, each
// after the first joining the first, with args added to each; it returns
// once every replica sees all n members. logf(name) receives a replica's
// log lines (nil: none). The replicas it started are returned even with an
// error: the caller stops them.
func LaunchReplicas(ctx context.Context, bin string, n int, engines []string, logf func(name string) func(string), args ...string) ([]*Proc, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	key := base64.StdEncoding.EncodeToString(raw)
	var procs []*Proc
	seed := ""
	for i := range n {
		name := fmt.Sprintf("router-%d", i)
		argv := append([]string{"--endpoints", strings.Join(engines, ","), "--node-name", name,
			"--gossip-key", key, "--gossip-bind", "127.0.0.1:0", "--drain-delay", "0s"}, args...)
		if seed != "" {
			argv = append(argv, "--join", seed)
		}
		var lf func(string)
		if logf != nil {
			lf = logf(name)
		}
		p, err := LaunchServe(bin, name, lf, argv...)
		if p != nil {
			procs = append(procs, p)
		}
		if err != nil {
			return procs, err
		}
		if seed == "" {
			if seed, err = GossipAddr(ctx, p.Admin, name); err != nil {
				return procs, err
			}
		}
	}
	return procs, WaitMembers(ctx, procs, n)
}

// LaunchEngines runs n `bin sim` engines named engine-0..n-1, engine i
// seeded i, with args added to each. logf(name) receives an engine's log
// lines (nil: none). The engines it started are returned even with an
// error: the caller stops them.
func LaunchEngines(bin string, n int, logf func(name string) func(string), args ...string) ([]*Proc, error) {
	var procs []*Proc
	for i := range n {
		name := fmt.Sprintf("engine-%d", i)
		var lf func(string)
		if logf != nil {
			lf = logf(name)
		}
		p, err := LaunchSim(bin, name, lf, append([]string{"--seed", strconv.Itoa(i)}, args...)...)
		if p != nil {
			procs = append(procs, p)
		}
		if err != nil {
			return procs, err
		}
	}
	return procs, nil
}
