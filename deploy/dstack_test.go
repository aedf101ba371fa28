package deploy

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The keys dstack's ServiceConfiguration and ReplicaGroup accept
// (dstack's core/models/configurations.py and profiles.py, read for this
// test): a key outside them is a typo dstack would reject.
var (
	dstackServiceKeys = strings.Fields(`type name image user privileged entrypoint working_dir home_dir
		registry_auth python nvcc single_branch env shell resources priority volumes docker repos files
		dstack setup commands ports port gateway strip_prefix model https auth scaling rate_limits probes
		replicas groups backends regions availability_zones instance_types reservation spot_policy retry
		max_duration stop_duration max_price creation_policy idle_duration utilization_policy
		startup_order stop_criteria schedule fleets instances tags backend_options`)
	dstackGroupKeys = strings.Fields(`name count replicas scaling resources spot_policy reservation
		commands image python nvcc docker privileged router`)
)

type dstackConfig struct {
	path string
	raw  map[string]any
}

func readDstackConfigs(t *testing.T) []dstackConfig {
	t.Helper()
	paths, _ := filepath.Glob("dstack/*.dstack.yml")
	if len(paths) != 3 {
		t.Fatalf("dstack configs %v, want the router-group setup and the two-service setup", paths)
	}
	var out []dstackConfig
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		if err := yaml.Unmarshal(b, &raw); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, dstackConfig{p, raw})
	}
	return out
}

func unknownKeys(m map[string]any, allowed []string) []string {
	var bad []string
	for k := range m {
		if !slices.Contains(allowed, k) {
			bad = append(bad, k)
		}
	}
	slices.Sort(bad)
	return bad
}

// serveCommands returns the `prefixring serve ...` command lines of a
// config's commands (each a shell line, continuations joined), split into
// words, shell expansions of optional flags (${X:+--join $X}) left out.
func serveCommands(cfg dstackConfig) [][]string {
	var cmds []any
	if c, ok := cfg.raw["commands"].([]any); ok {
		cmds = append(cmds, c...)
	}
	if groups, ok := cfg.raw["replicas"].([]any); ok {
		for _, g := range groups {
			if c, ok := g.(map[string]any)["commands"].([]any); ok {
				cmds = append(cmds, c...)
			}
		}
	}
	optional := regexp.MustCompile(`\$\{[A-Z_]+:\+[^}]*\}`)
	var out [][]string
	for _, c := range cmds {
		line := strings.ReplaceAll(c.(string), "\\\n", " ")
		line = optional.ReplaceAllString(line, "")
		if f := strings.Fields(line); len(f) > 1 && f[0] == "prefixring" && f[1] == "serve" {
			out = append(out, f[1:])
		}
	}
	return out
}

// Every config decodes, uses only keys dstack knows, mounts files that
// exist (or that `make build` writes), and passes prefixring serve only
// flags it has, with values it accepts.
func TestDstackConfigs(t *testing.T) {
	h := readServeHelp(t)
	serves := 0
	for _, cfg := range readDstackConfigs(t) {
		if cfg.raw["type"] != "service" {
			t.Errorf("%s: type %v, want service", cfg.path, cfg.raw["type"])
		}
		if bad := unknownKeys(cfg.raw, dstackServiceKeys); len(bad) > 0 {
			t.Errorf("%s: keys dstack does not know: %v", cfg.path, bad)
		}
		if groups, ok := cfg.raw["replicas"].([]any); ok {
			routers := 0
			for _, g := range groups {
				gm := g.(map[string]any)
				if bad := unknownKeys(gm, dstackGroupKeys); len(bad) > 0 {
					t.Errorf("%s: replica group keys dstack does not know: %v", cfg.path, bad)
				}
				if r, ok := gm["router"].(map[string]any); ok {
					routers++
					if r["type"] != "sglang" || gm["count"] != 1.0 {
						t.Errorf("%s: router group %v: dstack drives type sglang with count 1", cfg.path, gm)
					}
				}
			}
			if routers != 1 {
				t.Errorf("%s: %d router groups", cfg.path, routers)
			}
		}
		files, _ := cfg.raw["files"].([]any)
		for _, f := range files {
			local, _, _ := strings.Cut(f.(string), ":")
			if local == "bin/prefixring" {
				continue // what `make build` writes
			}
			if _, err := os.Stat(filepath.Join(repoRoot, local)); err != nil {
				t.Errorf("%s: mounts %s: %v", cfg.path, local, err)
			}
		}
		for _, args := range serveCommands(cfg) {
			serves++
			s, err := parseServeArgs(h, args)
			if err != nil {
				t.Errorf("%s: %v", cfg.path, err)
				continue
			}
			if w := s.get("workers-api"); !slices.Contains([]string{"admin", "public", "off"}, w) {
				t.Errorf("%s: --workers-api %q", cfg.path, w)
			}
		}
	}
	if serves != 2 {
		t.Fatalf("%d prefixring serve command lines found, want 2 (one per setup)", serves)
	}
}

// Setup A's router, started as the config starts it (ports moved to
// loopback), answers the calls dstack's router_worker_sync makes, from a
// loopback client with no token, on the service port.
func TestDstackRouterGroupTakesDstacksCalls(t *testing.T) {
	var args []string
	for _, cfg := range readDstackConfigs(t) {
		if strings.HasSuffix(cfg.path, "router-group.dstack.yml") {
			args = serveCommands(cfg)[0]
		}
	}
	for i, a := range args {
		if a == "--listen" || a == "--admin-listen" {
			args[i+1] = "127.0.0.1:0"
		}
	}
	a := start(t, "router-group", []*regexp.Regexp{servingRe}, args...)
	api := "http://" + a[0]
	engine := deadEndpoint(t)

	call := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, api+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		// dstack's server calls http://dstack/workers through an SSH
		// tunnel to localhost:<service port> (router_worker_sync.py).
		req.Host = "dstack"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, body := call("GET", "/workers", ""); code != 200 || len(body["workers"].([]any)) != 0 {
		t.Fatalf("GET /workers: %d %v", code, body)
	}
	// dstack's payload for an SGLang HTTP worker.
	code, body := call("POST", "/workers", `{"url":"`+engine+`","worker_type":"regular","connection_mode":"http","runtime_type":"sglang"}`)
	if code != 202 || body["status"] != "accepted" {
		t.Fatalf("POST /workers: %d %v", code, body)
	}
	_, body = call("GET", "/workers", "")
	ws := body["workers"].([]any)
	w := ws[0].(map[string]any)
	if len(ws) != 1 || strings.TrimRight(w["url"].(string), "/") != engine {
		t.Fatalf("GET after POST: %v", body)
	}
	if code, body := call("DELETE", "/workers/"+w["id"].(string), ""); code != 202 || body["status"] != "accepted" {
		t.Fatalf("DELETE: %d %v", code, body)
	}
	if _, body := call("GET", "/workers", ""); len(body["workers"].([]any)) != 0 {
		t.Fatalf("GET after DELETE: %v", body)
	}
	// A client relayed to the service port by a proxy on the host (Host
	// rewritten, or a forwarding header) is refused.
	for _, edit := range []func(*http.Request){
		func(r *http.Request) { r.Host = a[0] },
		func(r *http.Request) { r.Header.Set("X-Real-IP", "203.0.113.9") },
	} {
		req, _ := http.NewRequest("POST", api+"/workers", strings.NewReader(`{"url":"`+engine+`"}`))
		req.Host = "dstack"
		edit(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("a relayed POST: %d, want 403", resp.StatusCode)
		}
	}
}

// The dstack configs mount the bin/prefixring that `make build` writes into
// images of their own (debian:bookworm-slim, dstackai/dstack): it must be
// static, as the Dockerfile's is, not linked against the build machine's
// libc (until stop 41 `make build` used cgo wherever a C compiler was).
func TestMakeBuildIsStatic(t *testing.T) {
	out := filepath.Join(t.TempDir(), "prefixring")
	cmd := exec.Command("make", "--no-print-directory", "build", "BIN="+out)
	cmd.Dir = repoRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, b)
	}
	static, err := isStatic(out)
	if err != nil {
		t.Fatal(err)
	}
	if !static {
		t.Errorf("make build wrote a dynamically linked %s: it starts only where the build machine's libc is", out)
	}
}
