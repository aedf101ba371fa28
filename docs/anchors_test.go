// Package docs holds the project's design notes and measurements; this test
// keeps the code's and the docs' references into them pointing at headings
// that exist.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// anchor matches a reference such as `docs/study.md, "The key"`, also
// broken over two comment lines or in parentheses: docs/X.md ("Heading").
var anchor = regexp.MustCompile(`((?:docs|[a-z]+)/[\w-]+\.md),?[\s/]*\(?"([^"\n]+)"`)

// heading matches a Markdown ATX heading.
var heading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)

// A reference names a heading of the file by its text or by its first
// words (headings carry long parentheticals: "The bound's floor" for
// "The bound's floor and load factor (...)", "Question 2" for "Question 2:
// affinity against queueing; ..."); backquotes do not count.
func TestDocAnchorsExist(t *testing.T) {
	root := ".."
	headings := map[string][]string{}
	read := func(rel string) ([]string, bool) {
		if h, ok := headings[rel]; ok {
			return h, true
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return nil, false
		}
		var hs []string
		for _, m := range heading.FindAllStringSubmatch(string(b), -1) {
			hs = append(hs, m[1])
		}
		headings[rel] = hs
		return hs, true
	}
	refs := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "out" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range anchor.FindAllStringSubmatch(string(b), -1) {
			hs, ok := read(m[1])
			if !ok {
				continue // a path that is not a file of this repository
			}
			refs++
			if !hasHeading(hs, m[2]) {
				t.Errorf("%s: %s has no heading %q", path, m[1], m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if refs < 5 {
		t.Errorf("found %d references to docs headings; the pattern no longer matches the code's", refs)
	}
}

func hasHeading(hs []string, want string) bool {
	want = strings.ReplaceAll(want, "`", "")
	for _, h := range hs {
		h = strings.ReplaceAll(h, "`", "")
		if rest, ok := strings.CutPrefix(h, want); ok && (rest == "" || rest[0] == ' ' || rest[0] == ':') {
			return true
		}
	}
	return false
}
