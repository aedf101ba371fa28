package deploy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the parent module's directory, relative to this package.
const repoRoot = ".."

var (
	tmpDir    string
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	var err error
	if tmpDir, err = os.MkdirTemp("", "prefixring-deploy"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(tmpDir)
	os.Exit(code)
}

// binary builds prefixring once per test run, the way the Dockerfile does
// (dockerBuild; TestDockerfileBuildsAsTheTestsDo holds the two together).
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binPath = filepath.Join(tmpDir, "prefixring")
		args := dockerBuild.args(binPath)
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), dockerBuild.envList()...)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// serveHelp is what `prefixring serve --help` says about each flag.
type serveHelp struct {
	flags    map[string]string // flag name without dashes -> default ("" when none shown)
	values   map[string]bool   // flag name -> whether it takes a value (not a boolean)
	envFlags map[string]string // PREFIXRING_X -> flag name
}

var (
	helpOnce sync.Once
	help     serveHelp
	helpErr  error

	helpFlagRe    = regexp.MustCompile(`^\s+--([a-z0-9-]+)( value)?\b`)
	helpDefaultRe = regexp.MustCompile(`\(default: ([^()]*)\)(?:\s+\[\$[A-Z0-9_]+\])?\s*$`)
	helpEnvRe     = regexp.MustCompile(`\[\$([A-Z0-9_]+)\]\s*$`)
)

// readServeHelp runs the built binary's `serve --help` once and parses it.
func readServeHelp(t testing.TB) serveHelp {
	t.Helper()
	bin := binary(t)
	helpOnce.Do(func() {
		out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
		if err != nil {
			helpErr = fmt.Errorf("serve --help: %v\n%s", err, out)
			return
		}
		help, helpErr = parseServeHelp(string(out))
	})
	if helpErr != nil {
		t.Fatal(helpErr)
	}
	return help
}

func parseServeHelp(out string) (serveHelp, error) {
	h := serveHelp{flags: map[string]string{}, values: map[string]bool{}, envFlags: map[string]string{}}
	for _, line := range strings.Split(out, "\n") {
		m := helpFlagRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		h.flags[name] = ""
		h.values[name] = m[2] != ""
		if d := helpDefaultRe.FindStringSubmatch(line); d != nil {
			h.flags[name] = strings.Trim(d[1], `"`)
		}
		if e := helpEnvRe.FindStringSubmatch(line); e != nil {
			h.envFlags[e[1]] = name
		}
	}
	if len(h.flags) < 10 || len(h.envFlags) < 10 {
		return h, fmt.Errorf("serve --help lists %d flags and %d variables: not the help text this test reads\n%s",
			len(h.flags), len(h.envFlags), out)
	}
	return h, nil
}

func TestParseServeHelp(t *testing.T) {
	h := readServeHelp(t)
	for flag, want := range map[string]string{"listen": ":8080", "admin-listen": ":9090", "drain-delay": "5s", "drain-timeout": "20s", "gossip-bind": ""} {
		got, ok := h.flags[flag]
		if !ok {
			t.Errorf("--%s missing from serve --help", flag)
		} else if got != want {
			t.Errorf("--%s default %q, want %q", flag, got, want)
		}
	}
	if !h.values["listen"] || h.values["pprof"] {
		t.Errorf("--listen takes a value: %v, --pprof does: %v", h.values["listen"], h.values["pprof"])
	}
	if got := h.envFlags["PREFIXRING_GOSSIP_KEY"]; got != "gossip-key" {
		t.Errorf("PREFIXRING_GOSSIP_KEY names flag %q, want gossip-key", got)
	}
}

// port returns the port of a host:port address.
func port(t testing.TB, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return p
}
