package deploy

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goBuild is a `go build` command line: environment assignments, then the
// arguments after `go`, with out standing for the -o value.
type goBuild struct {
	env  map[string]string
	argv []string
}

const outPlaceholder = "$OUT"

// dockerBuild is how the tests build prefixring, and how the Dockerfile
// must: static (no cgo, so no libc and Go's own DNS resolver), without
// paths of the build machine, VCS stamps or symbol tables.
var dockerBuild = goBuild{
	env:  map[string]string{"CGO_ENABLED": "0"},
	argv: []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", outPlaceholder, "./cmd/prefixring"},
}

func (b goBuild) args(out string) []string {
	a := slices.Clone(b.argv)
	for i := range a {
		if a[i] == outPlaceholder {
			a[i] = out
		}
	}
	return a
}

func (b goBuild) envList() []string {
	var l []string
	for k, v := range b.env {
		l = append(l, k+"="+v)
	}
	slices.Sort(l)
	return l
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case
	rest string
}

func parseDockerfile(text string) ([]instruction, error) {
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		f := strings.SplitN(cur.String(), " ", 2)
		cur.Reset()
		in := instruction{cmd: strings.ToUpper(f[0])}
		if len(f) == 2 {
			in.rest = strings.TrimSpace(f[1])
		}
		out = append(out, in)
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("Dockerfile ends in a continuation line")
	}
	return out, sc.Err()
}

// shellWords splits a shell command line into words, with single and
// double quotes (no expansions: the build line must not need any).
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case strings.ContainsRune("$`;&|<>()\\", r):
			return nil, fmt.Errorf("%q: shell syntax %q the test does not model", s, r)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("%q: unterminated quote", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// parseGoBuild reads a RUN line's `[VAR=value ...] go build ...`, after
// its --mount and other RUN flags; out is the -o value.
func parseGoBuild(run string) (b goBuild, out string, err error) {
	words, err := shellWords(run)
	if err != nil {
		return b, "", err
	}
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		words = words[1:]
	}
	b.env = map[string]string{}
	for len(words) > 0 && strings.Contains(words[0], "=") {
		k, v, _ := strings.Cut(words[0], "=")
		b.env[k] = v
		words = words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		return b, "", fmt.Errorf("%q is not a go build", run)
	}
	b.argv = words[1:]
	for i, a := range b.argv {
		if a == "-o" && i+1 < len(b.argv) {
			out = b.argv[i+1]
			b.argv[i+1] = outPlaceholder
		}
	}
	if out == "" {
		return b, "", fmt.Errorf("%q: no -o", run)
	}
	return b, out, nil
}

// dockerfile is what the tests read from the Dockerfile.
type dockerfile struct {
	build      goBuild
	out        string   // the build's -o path
	builder    string   // image of the stage that builds
	builderAs  string   // that stage's name
	final      string   // image of the last stage
	copyFrom   string   // COPY --from=<stage> <src> <dst> into the last stage:
	copySrc    string   //
	copyDst    string   //
	user       string   // USER of the last stage
	entrypoint []string // ENTRYPOINT of the last stage (exec form)
	expose     []string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	ins, err := parseDockerfile(string(text))
	if err != nil {
		t.Fatal(err)
	}
	var d dockerfile
	builds := 0
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			f := strings.Fields(in.rest)
			d.final, d.user, d.entrypoint, d.copyFrom = f[0], "", nil, ""
			if len(f) == 3 && strings.EqualFold(f[1], "AS") && d.builder == "" {
				d.builder, d.builderAs = f[0], f[2]
			}
		case "RUN":
			if !strings.Contains(in.rest, "go build") {
				continue
			}
			builds++
			if d.build, d.out, err = parseGoBuild(in.rest); err != nil {
				t.Fatal(err)
			}
		case "COPY":
			f := strings.Fields(in.rest)
			if len(f) == 3 && strings.HasPrefix(f[0], "--from=") {
				d.copyFrom, d.copySrc, d.copyDst = strings.TrimPrefix(f[0], "--from="), f[1], f[2]
			}
		case "USER":
			d.user = in.rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.rest), &d.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: want the exec form (a JSON array): %v", in.rest, err)
			}
		case "EXPOSE":
			d.expose = append(d.expose, strings.Fields(in.rest)...)
		}
	}
	if builds != 1 {
		t.Fatalf("Dockerfile has %d RUN lines with go build, want 1", builds)
	}
	return d
}

// TestDockerfileBuildsAsTheTestsDo holds the Dockerfile to what the tests
// build and run: the same go build, into a static nonroot image whose
// entrypoint is that binary.
func TestDockerfileBuildsAsTheTestsDo(t *testing.T) {
	d := readDockerfile(t)
	if !maps.Equal(d.build.env, dockerBuild.env) {
		t.Errorf("Dockerfile builds with %v, the tests with %v", d.build.env, dockerBuild.env)
	}
	if !slices.Equal(d.build.argv, dockerBuild.argv) {
		t.Errorf("Dockerfile runs go %q, the tests go %q", d.build.argv, dockerBuild.argv)
	}
	goVersion := goModVersion(t)
	if want := "golang:" + goVersion; d.builder != want && !strings.HasPrefix(d.builder, want+"-") {
		t.Errorf("build stage FROM %s, want %s (go.mod's go %s)", d.builder, want, goVersion)
	}
	if d.final != "scratch" && !(strings.HasPrefix(d.final, "gcr.io/distroless/static") && strings.HasSuffix(d.final, ":nonroot")) {
		t.Errorf("final stage FROM %s, want gcr.io/distroless/static*:nonroot or scratch", d.final)
	}
	if d.copyFrom != d.builderAs || d.copySrc != d.out {
		t.Errorf("final stage copies %s from stage %q, want %s from %q", d.copySrc, d.copyFrom, d.out, d.builderAs)
	}
	if len(d.entrypoint) != 1 || d.entrypoint[0] != d.copyDst {
		t.Errorf("ENTRYPOINT %q, want [%q]", d.entrypoint, d.copyDst)
	}
	if u, _, _ := strings.Cut(d.user, ":"); u != "nonroot" && u != "65532" {
		t.Errorf("final stage USER %q, want nonroot", d.user)
	}
	h := readServeHelp(t)
	for _, flag := range []string{"listen", "admin-listen"} {
		if p := port(t, h.flags[flag]); !slices.Contains(d.expose, p) {
			t.Errorf("EXPOSE %v lacks %s, the port of --%s's default", d.expose, p, flag)
		}
	}
}

func goModVersion(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("go.mod has no go line")
	return ""
}

func TestParseGoBuild(t *testing.T) {
	b, out, err := parseGoBuild(`--mount=type=cache,target=/x CGO_ENABLED=0 go build -ldflags="-s -w" -o /out/p ./cmd/p`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"build", "-ldflags=-s -w", "-o", outPlaceholder, "./cmd/p"}
	if out != "/out/p" || !slices.Equal(b.argv, want) || b.env["CGO_ENABLED"] != "0" || len(b.env) != 1 {
		t.Errorf("got out %q argv %q env %v", out, b.argv, b.env)
	}
	for _, bad := range []string{`go build -o "x`, `go build -o $OUT .`, `go vet ./...`, `go build ./cmd/p`} {
		if _, _, err := parseGoBuild(bad); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

// isStatic reports whether an ELF file needs no dynamic loader: no
// interpreter and no dynamic section.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return false, nil
		}
	}
	return f.Section(".dynamic") == nil && f.Section(".interp") == nil, nil
}

func TestBinaryIsStaticAndRuns(t *testing.T) {
	bin := binary(t)
	static, err := isStatic(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !static {
		t.Errorf("%s is dynamically linked: it would not start on distroless/static", bin)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// -trimpath keeps -ldflags out of the build info: -s and -w are read
	// from the file instead (symbol table and DWARF gone).
	for k, v := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true"} {
		if settings[k] != v {
			t.Errorf("build setting %s = %q, want %q", k, settings[k], v)
		}
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, sec := range []string{".symtab", ".debug_info", ".zdebug_info"} {
		if f.Section(sec) != nil {
			t.Errorf("%s has a %s section: not built with -ldflags=-s -w", bin, sec)
		}
	}
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("prefixring %s: %v\n%s", strings.Join(args, " "), err, out)
		} else if !strings.Contains(string(out), "USAGE") {
			t.Errorf("prefixring %s printed no usage:\n%s", strings.Join(args, " "), out)
		}
	}
}

// TestIsStaticSeesDynamicBinaries is the static check's control: a libc
// program from the system must read as dynamic.
func TestIsStaticSeesDynamicBinaries(t *testing.T) {
	for _, p := range []string{"/bin/sh", "/usr/bin/env", "/bin/ls"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		static, err := isStatic(p)
		if err != nil {
			t.Fatal(err)
		}
		if static {
			t.Errorf("%s reads as static; a dynamically linked system binary was expected", p)
		}
		return
	}
	t.Skip("no dynamically linked system binary to check against")
}
