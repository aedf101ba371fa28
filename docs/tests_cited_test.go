package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var (
	// cited matches a test, fuzz target or benchmark named in prose or a
	// command: TestFoo, ring/TestFoo, TestFoo* or TestFoo/sub, and the
	// alternatives of a -run pattern.
	cited = regexp.MustCompile(`\b((?:Test|Fuzz|Benchmark)[A-Z]\w*)`)
	// defined matches a test function's declaration.
	defined = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)\w+)\(`)
)

// TestCitedTestsExist: every test the README, docs/ and the packages'
// DESIGN.md files name as the evidence for a claim is a test function of
// this repository (its name, or a prefix of one: docs cite families as
// TestFoo* and -run patterns). A test renamed or removed would otherwise
// leave a claim that reads as tested and is not. Two such references were
// found at stop 40, to tests earlier stops had removed.
func TestCitedTestsExist(t *testing.T) {
	root := ".."
	var names []string
	where := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "out" || name == "bin" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch {
		case strings.HasSuffix(path, "_test.go"):
			for _, m := range defined.FindAllSubmatch(b, -1) {
				names = append(names, string(m[1]))
			}
		case strings.HasSuffix(path, ".md"):
			for _, m := range cited.FindAllSubmatch(b, -1) {
				where[string(m[1])] = append(where[string(m[1])], path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	if len(names) < 100 || len(where) < 50 {
		t.Fatalf("found %d test functions and %d cited names: the walk missed the tree", len(names), len(where))
	}
	for name, files := range where {
		// A defined name, or one the cited name begins: sorted, the first
		// name not below it is the only candidate.
		i := sort.SearchStrings(names, name)
		if i == len(names) || !strings.HasPrefix(names[i], name) {
			t.Errorf("%s is cited (%s) but no test function is named so or begins so", name, strings.Join(files, ", "))
		}
	}
}
