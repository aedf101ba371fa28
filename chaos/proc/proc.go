// Package proc runs the chaos scenarios on real processes: `prefixring
// serve` replicas and `prefixring sim` engines started from the built
// binary, stopped with real signals, and, as root, each replica in a network
// namespace of its own on a bridge, so tc netem can cut and degrade the
// gossip links between them. Everything it creates is removed by Close,
// also after a failure or an interrupt.
package proc

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prefixring/prefixring/internal/e2eproc"
)

// Config shapes a cluster of processes.
type Config struct {
	Bin               string // the prefixring binary
	Replicas, Engines int
	// Initial is how many of the engines (the first) the replicas start
	// with; the others are there to be added (0: all).
	Initial int
	// EngineArgs and ReplicaArgs are added to every `prefixring sim` and
	// `prefixring serve` command line (a flag given twice: the last wins).
	EngineArgs, ReplicaArgs []string
	// Netns puts each replica in a network namespace (needs root and
	// iproute2); without it everything runs on 127.0.0.1 and the gossip
	// scenarios that need tc are skipped.
	Netns bool
	// Log receives the processes' stderr lines (nil: dropped).
	Log func(string)
}

// Cluster is the running processes and what was created for them.
type Cluster struct {
	cfg     Config
	key     string
	mu      sync.Mutex
	undo    []func() // the cleanup stack
	engines []*e2eproc.Proc
	ports   []int // engine ports, kept across restarts
	engHost string
	reps    []*e2eproc.Proc
	hosts   []string // replica IPs
	rport   [][3]int // replica API, admin and gossip ports
	crashes []int
	client  *http.Client
	dir     string // the replicas' endpoints files
}

// Token is the bearer token every replica's workers API requires.
const Token = "chaos-admin-token"

const prefix = "prcx" // names of namespaces and links this package creates

var (
	servingRe = regexp.MustCompile(`msg=serving listen=(\S+)`)
	simRe     = regexp.MustCompile(`msg="simulated vLLM server listening" addr=(\S+)`)
)

func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// CanNetns reports whether this process can create namespaces: root, with
// the ip command.
func CanNetns() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("no ip command (iproute2)")
	}
	if _, err := exec.LookPath("tc"); err != nil {
		return errors.New("no tc command (iproute2)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("no nft command (nftables)")
	}
	return nil
}

// RemoveLeftovers deletes namespaces and links an interrupted earlier run
// left behind (by this package's name prefix).
func RemoveLeftovers() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			_ = run("ip", "netns", "del", f[0])
		}
	}
	_ = run("ip", "link", "del", prefix+"br")
}

func (c *Cluster) push(f func()) {
	c.mu.Lock()
	c.undo = append(c.undo, f)
	c.mu.Unlock()
}

// Close stops every process and removes every namespace, link and qdisc,
// in the reverse order of their creation.
func (c *Cluster) Close() {
	c.mu.Lock()
	undo := c.undo
	c.undo = nil
	c.mu.Unlock()
	for i := len(undo) - 1; i >= 0; i-- {
		undo[i]()
	}
}

// Start builds the network and starts the engines and the replicas.
func Start(cfg Config) (*Cluster, error) {
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i*7 + 3)
	}
	c := &Cluster{cfg: cfg, key: base64.StdEncoding.EncodeToString(key), engines: make([]*e2eproc.Proc, cfg.Engines),
		ports: make([]int, cfg.Engines), reps: make([]*e2eproc.Proc, cfg.Replicas), rport: make([][3]int, cfg.Replicas),
		crashes: make([]int, cfg.Replicas), client: &http.Client{Timeout: 10 * time.Second}}
	if err := c.start(); err != nil {
		c.Close() // what started before the failure
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start() (err error) {
	if c.dir, err = os.MkdirTemp("", prefix+"-"); err != nil {
		return err
	}
	c.push(func() { _ = os.RemoveAll(c.dir) })
	c.engHost = "127.0.0.1"
	for range c.cfg.Replicas {
		c.hosts = append(c.hosts, "127.0.0.1")
	}
	if c.cfg.Netns {
		if err := c.buildNetwork(); err != nil {
			return err
		}
	}
	for i := range c.cfg.Engines {
		if c.ports[i], err = freePort(c.engHost); err != nil {
			return err
		}
		if err := c.StartEngine(i); err != nil {
			return err
		}
	}
	// Every replica's ports first: each joins the others' gossip addresses.
	for i := range c.cfg.Replicas {
		c.rport[i] = [3]int{8080, 8081, 7946}
		for k := range c.rport[i] {
			if c.cfg.Netns {
				break
			}
			if c.rport[i][k], err = freePort("127.0.0.1"); err != nil {
				return err
			}
		}
	}
	for i := range c.cfg.Replicas {
		if err := c.StartReplica(i, c.InitialURLs()); err != nil {
			return err
		}
	}
	return nil
}

// buildNetwork makes a bridge in this namespace (the engines listen on its
// address) and one namespace per replica, joined to it by a veth pair.
func (c *Cluster) buildNetwork() error {
	RemoveLeftovers()
	br := prefix + "br"
	if err := run("ip", "link", "add", br, "type", "bridge"); err != nil {
		return err
	}
	c.push(func() { _ = run("ip", "link", "del", br) })
	for _, a := range [][]string{{"ip", "addr", "add", "10.77.0.1/24", "dev", br}, {"ip", "link", "set", br, "up"}} {
		if err := run(a...); err != nil {
			return err
		}
	}
	c.engHost = "10.77.0.1"
	for i := range c.cfg.Replicas {
		ns, host, peer := fmt.Sprintf("%sr%d", prefix, i), fmt.Sprintf("%sh%d", prefix, i), fmt.Sprintf("%sp%d", prefix, i)
		ip := fmt.Sprintf("10.77.0.%d", 10+i)
		if err := run("ip", "netns", "add", ns); err != nil {
			return err
		}
		c.push(func() { _ = run("ip", "netns", "del", ns) })
		for _, a := range [][]string{
			{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
			{"ip", "link", "set", host, "master", br},
			{"ip", "link", "set", host, "up"},
			{"ip", "link", "set", peer, "netns", ns},
			{"ip", "-n", ns, "addr", "add", ip + "/24", "dev", peer},
			{"ip", "-n", ns, "link", "set", peer, "up"},
			{"ip", "-n", ns, "link", "set", "lo", "up"},
		} {
			if err := run(a...); err != nil {
				return err
			}
		}
		c.push(func() { _ = run("ip", "link", "del", host) })
		c.hosts[i] = ip
	}
	return nil
}

// EngineURL is engine i's URL.
func (c *Cluster) EngineURL(i int) string {
	return fmt.Sprintf("http://%s:%d", c.engHost, c.ports[i])
}

// EngineURLs are every engine's URL.
func (c *Cluster) EngineURLs() []string {
	out := make([]string, c.cfg.Engines)
	for i := range out {
		out[i] = c.EngineURL(i)
	}
	return out
}

// InitialURLs are the URLs of the engines the replicas start with.
func (c *Cluster) InitialURLs() []string {
	all := c.EngineURLs()
	if c.cfg.Initial > 0 && c.cfg.Initial < len(all) {
		return all[:c.cfg.Initial]
	}
	return all
}

// URL is replica i's API root; Admin its admin listener's.
func (c *Cluster) URL(i int) string   { return fmt.Sprintf("http://%s:%d", c.hosts[i], c.rport[i][0]) }
func (c *Cluster) Admin(i int) string { return fmt.Sprintf("http://%s:%d", c.hosts[i], c.rport[i][1]) }

// URLs are every replica's API root.
func (c *Cluster) URLs() []string {
	out := make([]string, c.cfg.Replicas)
	for i := range out {
		out[i] = c.URL(i)
	}
	return out
}

// StartEngine starts (or restarts on its port) engine i.
func (c *Cluster) StartEngine(i int) error {
	argv := append([]string{"sim", "--listen", fmt.Sprintf("%s:%d", c.engHost, c.ports[i]), "--seed", fmt.Sprint(i + 1)}, c.cfg.EngineArgs...)
	p, _, err := e2eproc.Launch(c.cfg.Bin, fmt.Sprintf("engine-%d", i), argv, c.cfg.Log, simRe)
	if p != nil {
		c.push(func() { p.Stop(2 * time.Second) })
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.engines[i] = p
	c.mu.Unlock()
	return nil
}

// KillEngine kills engine i with SIGKILL.
func (c *Cluster) KillEngine(i int) {
	c.mu.Lock()
	p := c.engines[i]
	c.engines[i] = nil
	c.mu.Unlock()
	if p != nil {
		_ = p.Cmd.Process.Kill()
		p.Exit(10 * time.Second)
	}
}

// SetFaults sets engine i's fault knobs (PUT /admin/faults).
func (c *Cluster) SetFaults(i int, faults string) error {
	req, _ := http.NewRequest(http.MethodPut, c.EngineURL(i)+"/admin/faults", strings.NewReader(faults))
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("faults %s: %d %s", faults, resp.StatusCode, b)
	}
	return nil
}

// endpointsFile is replica i's --endpoints-file.
func (c *Cluster) endpointsFile(i int) string {
	return filepath.Join(c.dir, fmt.Sprintf("r%d.endpoints", i))
}

// writeEndpoints replaces replica i's endpoints file at once (a rename: a
// periodic re-read never sees half a file).
func (c *Cluster) writeEndpoints(i int, endpoints []string) error {
	tmp := c.endpointsFile(i) + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(endpoints, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.endpointsFile(i))
}

// SetEndpoints rewrites every live replica's endpoints file and sends it
// SIGHUP, which re-reads the file at once.
func (c *Cluster) SetEndpoints(endpoints []string) error {
	for _, i := range c.Live() {
		if err := c.writeEndpoints(i, endpoints); err != nil {
			return err
		}
		if err := c.Signal(i, syscall.SIGHUP); err != nil {
			return err
		}
	}
	return nil
}

// Signal sends sig to replica i's process.
func (c *Cluster) Signal(i int, sig syscall.Signal) error {
	c.mu.Lock()
	p := c.reps[i]
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("replica %d is not running", i)
	}
	return p.Cmd.Process.Signal(sig)
}

// gossipAddr is replica i's gossip address.
func (c *Cluster) gossipAddr(i int) string {
	return fmt.Sprintf("%s:%d", c.hosts[i], c.rport[i][2])
}

// StartReplica starts (or restarts, with the same name and addresses)
// replica i with endpoints in its --endpoints-file.
func (c *Cluster) StartReplica(i int, endpoints []string) error {
	if err := c.writeEndpoints(i, endpoints); err != nil {
		return err
	}
	h := c.hosts[i]
	var join []string
	for j := range c.cfg.Replicas {
		if j != i {
			join = append(join, c.gossipAddr(j))
		}
	}
	argv := []string{"serve", "--listen", fmt.Sprintf("%s:%d", h, c.rport[i][0]), "--admin-listen", fmt.Sprintf("%s:%d", h, c.rport[i][1]),
		"--gossip-bind", c.gossipAddr(i), "--join", strings.Join(join, ","), "--node-name", fmt.Sprintf("r%d", i),
		"--gossip-key", c.key, "--endpoints-file", c.endpointsFile(i), "--health-interval", "1s", "--health-timeout", "500ms",
		"--ejection-time", "5s", "--upstream-timeout", "3s", "--drain-delay", "0s", "--drain-timeout", "5s",
		"--admin-token", Token, "--routing-headers-address"}
	argv = append(argv, c.cfg.ReplicaArgs...)
	bin := c.cfg.Bin
	if c.cfg.Netns {
		argv = append([]string{"netns", "exec", fmt.Sprintf("%sr%d", prefix, i), bin}, argv...)
		bin = "ip"
	}
	p, _, err := e2eproc.Launch(bin, fmt.Sprintf("r%d", i), argv, c.cfg.Log, servingRe)
	if p != nil {
		c.push(func() { p.Stop(5 * time.Second) })
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.reps[i] = p
	c.mu.Unlock()
	return nil
}

// StopReplica ends replica i with sig: SIGKILL counts as a crash.
func (c *Cluster) StopReplica(i int, sig syscall.Signal) {
	c.mu.Lock()
	p := c.reps[i]
	c.reps[i] = nil
	if sig == syscall.SIGKILL {
		c.crashes[i]++
	}
	c.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.Cmd.Process.Signal(sig)
	if exited, _ := p.Exit(30 * time.Second); !exited {
		_ = p.Cmd.Process.Kill()
		p.Exit(10 * time.Second)
	}
}

// Crashes counts replica i's SIGKILLs.
func (c *Cluster) Crashes(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashes[i]
}

// Live lists the replicas running.
func (c *Cluster) Live() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, p := range c.reps {
		if p != nil {
			out = append(out, i)
		}
	}
	return out
}

func (c *Cluster) getJSON(url string, v any) error {
	resp, err := c.client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Picks asks every live replica where keys go now and where their homes
// are (GET /debug/pick), one answer per replica.
func (c *Cluster) Picks(keys []uint64) ([]PickView, error) {
	q := make([]string, len(keys))
	for k, key := range keys {
		q[k] = fmt.Sprint(key)
	}
	// All at once: replicas asked one after the other read loads a few
	// milliseconds apart, which alone would show as disagreement.
	live := c.Live()
	out, errs := make([]PickView, len(live)), make([]error, len(live))
	var wg sync.WaitGroup
	for k, i := range live {
		wg.Go(func() { errs[k] = c.getJSON(c.Admin(i)+"/debug/pick?key="+strings.Join(q, ","), &out[k]) })
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// Agreement is the share of keys every live replica sends to the same
// endpoint.
func (c *Cluster) Agreement(keys []uint64) (float64, error) {
	views, err := c.Picks(keys)
	if err != nil {
		return 0, err
	}
	return Agreement(keys, views), nil
}

// ClusterView is the part of /debug/cluster the scenarios read.
type ClusterView struct {
	Members []struct{ Name string } `json:"members"`
	Loads   map[string]int64        `json:"loads"`
	Local   map[string]int64        `json:"local"`
}

// View reads replica i's /debug/cluster.
func (c *Cluster) View(i int) (ClusterView, error) {
	var v ClusterView
	err := c.getJSON(c.Admin(i)+"/debug/cluster", &v)
	return v, err
}

// Routed reports whether every live replica routes id healthy (want) or
// not at all / held out (!want), from /debug/ring.
func (c *Cluster) Routed(id string, want bool) bool {
	for _, i := range c.Live() {
		var v struct {
			Endpoints []struct {
				ID      string `json:"id"`
				Healthy bool   `json:"healthy"`
			} `json:"endpoints"`
		}
		if err := c.getJSON(c.Admin(i)+"/debug/ring", &v); err != nil {
			return false
		}
		healthy := false
		for _, e := range v.Endpoints {
			if e.ID == id {
				healthy = e.Healthy
			}
		}
		if healthy != want {
			return false
		}
	}
	return true
}

// gossipFilter applies netem to the gossip packets (to or from port 7946)
// that leave replica i's namespace for the addresses in to (all: nil).
func (c *Cluster) gossipFilter(i int, netem []string, to []string) error {
	ns, dev := fmt.Sprintf("%sr%d", prefix, i), fmt.Sprintf("%sp%d", prefix, i)
	tc := func(a ...string) error { return run(append([]string{"ip", "netns", "exec", ns, "tc"}, a...)...) }
	_ = tc("qdisc", "del", "dev", dev, "root")
	if netem == nil {
		return nil
	}
	if err := tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "prio", "bands", "3", "priomap", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1"); err != nil {
		return err
	}
	if err := tc(append([]string{"qdisc", "add", "dev", dev, "parent", "1:3", "handle", "30:", "netem"}, netem...)...); err != nil {
		return err
	}
	if to == nil {
		to = []string{"10.77.0.0/24"}
	}
	for _, dst := range to {
		for _, port := range []string{"dport", "sport"} {
			if err := tc("filter", "add", "dev", dev, "protocol", "ip", "parent", "1:0", "prio", "1", "u32",
				"match", "ip", "dst", dst, "match", "ip", port, "7946", "0xffff", "flowid", "1:3"); err != nil {
				return err
			}
		}
	}
	return nil
}

// cut drops, with nftables, lossPct percent of the gossip packets (to or
// from port 7946) that leave replica i's namespace for the addresses in to
// (all replicas: nil); 100 cuts the link.
func (c *Cluster) cut(i, lossPct int, to []string) error {
	ns := fmt.Sprintf("%sr%d", prefix, i)
	nft := func(a ...string) error { return run(append([]string{"ip", "netns", "exec", ns, "nft"}, a...)...) }
	if err := nft("add", "table", "inet", prefix); err != nil {
		return err
	}
	if err := nft("add", "chain", "inet", prefix, "out", "{ type filter hook output priority 0; }"); err != nil {
		return err
	}
	if to == nil {
		to = []string{"10.77.0.0/24"}
	}
	for _, dst := range to {
		for _, m := range [][]string{{"udp", "dport"}, {"udp", "sport"}, {"tcp", "dport"}, {"tcp", "sport"}} {
			rule := []string{"add", "rule", "inet", prefix, "out", "ip", "daddr", dst, m[0], m[1], "7946"}
			if lossPct < 100 {
				rule = append(rule, "numgen", "random", "mod", "100", "<", fmt.Sprint(lossPct))
			}
			if err := nft(append(rule, "drop")...); err != nil {
				return err
			}
		}
	}
	return nil
}

// Partition cuts the gossip between the groups of replica indexes.
func (c *Cluster) Partition(groups ...[]int) error {
	if !c.cfg.Netns {
		return errors.New("partitions need --netns")
	}
	for gi, g := range groups {
		var others []string
		for gj, h := range groups {
			if gj != gi {
				for _, j := range h {
					others = append(others, c.hosts[j]+"/32")
				}
			}
		}
		for _, i := range g {
			if err := c.cut(i, 100, others); err != nil {
				return err
			}
		}
	}
	return nil
}

// Degrade makes every gossip link lose lossPct percent of its packets and
// delay them by delay ± jitter, with tc netem. A kernel without netem
// ("Specified qdisc kind is unknown") gets the loss alone, through
// nftables; applied says which.
func (c *Cluster) Degrade(lossPct int, delay, jitter time.Duration) (applied string, err error) {
	if !c.cfg.Netns {
		return "", errors.New("degraded links need --netns")
	}
	netem := []string{"loss", fmt.Sprintf("%d%%", lossPct), "delay", delay.String(), jitter.String()}
	for i := range c.cfg.Replicas {
		if err = c.gossipFilter(i, netem, nil); err != nil {
			break
		}
	}
	if err == nil {
		return "tc netem " + strings.Join(netem, " "), nil
	}
	if !strings.Contains(err.Error(), "qdisc kind is unknown") {
		return "", err
	}
	for i := range c.cfg.Replicas {
		if err := c.cut(i, lossPct, nil); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("nftables: %d%% loss, no delay (this kernel has no netem)", lossPct), nil
}

// BlackHole drops every packet into and out of replica i's namespace, as
// a dead host or a pulled cable does: nothing is refused or reset, every
// packet to it vanishes. The replica leaves Live (its process runs on,
// cut off). The returned end kills the process and lifts the drop, so
// connections still open to it are reset.
func (c *Cluster) BlackHole(i int) (end func(), err error) {
	if !c.cfg.Netns {
		return nil, errors.New("a black hole needs --netns")
	}
	ns, table := fmt.Sprintf("%sr%d", prefix, i), prefix+"bh"
	nft := func(a ...string) error { return run(append([]string{"ip", "netns", "exec", ns, "nft"}, a...)...) }
	if err := nft("add", "table", "inet", table); err != nil {
		return nil, err
	}
	for _, hook := range []string{"input", "output"} {
		if err := nft("add", "chain", "inet", table, hook, "{ type filter hook "+hook+" priority -10; policy drop; }"); err != nil {
			return nil, err
		}
	}
	for _, r := range [][]string{{"input", "iif", "lo", "accept"}, {"output", "oif", "lo", "accept"}} {
		if err := nft(append([]string{"insert", "rule", "inet", table}, r...)...); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	p := c.reps[i]
	c.reps[i] = nil
	c.crashes[i]++
	c.mu.Unlock()
	return func() {
		if p != nil {
			_ = p.Cmd.Process.Kill()
			p.Exit(10 * time.Second)
		}
		_ = nft("delete", "table", "inet", table)
	}, nil
}

// Heal removes every gossip filter.
func (c *Cluster) Heal() {
	if c.cfg.Netns {
		for i := range c.cfg.Replicas {
			_ = c.gossipFilter(i, nil, nil)
			_ = run("ip", "netns", "exec", fmt.Sprintf("%sr%d", prefix, i), "nft", "delete", "table", "inet", prefix)
		}
	}
}

// Wait polls ok every 100 ms until it holds or limit passes, and returns
// how long it took.
func Wait(ctx context.Context, limit time.Duration, ok func() bool) (time.Duration, error) {
	start := time.Now()
	for {
		if ok() {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			return time.Since(start), fmt.Errorf("not within %v", limit)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
