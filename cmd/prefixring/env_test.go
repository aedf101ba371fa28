package main

import (
	"strings"
	"testing"
)

// The CLI's description promises that every flag can be set through an
// environment variable; two flags reading one variable would set each other.
func TestEveryFlagHasAUniqueEnvVar(t *testing.T) {
	owner := map[string]string{}
	for _, cmd := range newApp().Commands {
		for _, f := range cmd.Flags {
			name := cmd.Name + " --" + f.Names()[0]
			ev, ok := f.(interface{ GetEnvVars() []string })
			if !ok || len(ev.GetEnvVars()) == 0 {
				t.Errorf("%s has no environment variable", name)
				continue
			}
			for _, v := range ev.GetEnvVars() {
				if !strings.HasPrefix(v, "PREFIXRING_") {
					t.Errorf("%s reads %s, outside the PREFIXRING_ prefix", name, v)
				}
				if prev, dup := owner[v]; dup {
					t.Errorf("%s and %s both read %s", prev, name, v)
				}
				owner[v] = name
			}
		}
	}
	if got := owner["PREFIXRING_LOAD_FACTOR"]; got != "serve --load-factor" {
		t.Errorf("PREFIXRING_LOAD_FACTOR is read by %q, want serve --load-factor (docs/operating.md's example)", got)
	}
}
