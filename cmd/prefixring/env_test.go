package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/router"
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

// captureApp is the real app with every command's action replaced by one
// that hands its context to got: what the app parsed, nothing run.
func captureApp(got func(cmd string, c *cli.Context) error) *cli.App {
	app := newApp()
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	for _, cmd := range app.Commands {
		cmd.Action = func(c *cli.Context) error { return got(cmd.Name, c) }
	}
	return app
}

// An empty variable is no setting: Compose's `VAR:` and a Kubernetes
// `value: ""` leave one empty. Until stop 43 urfave/cli counted it as the
// flag given, so PREFIXRING_GOSSIP_INSECURE= refused serve ("needs
// --gossip-bind"), PREFIXRING_ADMIN_TOKEN= warned of a token with no
// effect, and an empty string variable replaced its flag's default (an
// empty --log-level). Every flag of every command, its variable set empty,
// reads as not set and holds its default.
func TestEmptyEnvVarIsUnset(t *testing.T) {
	values := func() map[string]string {
		t.Helper()
		seen := map[string]string{}
		app := captureApp(func(cmd string, c *cli.Context) error {
			for _, f := range c.Command.Flags {
				name := f.Names()[0]
				if c.IsSet(name) {
					t.Errorf("%s --%s is set", cmd, name)
				}
				seen[cmd+" --"+name] = fmt.Sprint(c.Value(name))
			}
			return nil
		})
		for _, cmd := range app.Commands {
			if err := app.Run([]string{"prefixring", cmd.Name}); err != nil {
				t.Fatalf("%s: %v", cmd.Name, err)
			}
		}
		return seen
	}
	defaults := values()
	for _, cmd := range newApp().Commands {
		for _, f := range cmd.Flags {
			for _, v := range f.(interface{ GetEnvVars() []string }).GetEnvVars() {
				t.Setenv(v, "")
			}
		}
	}
	got := values()
	for _, flag := range slices.Sorted(maps.Keys(got)) {
		if v := got[flag]; v != defaults[flag] {
			t.Errorf("%s with its variable empty: %q, want the default %q", flag, v, defaults[flag])
		}
	}

	// The report's case, through serve's own reading of its flags; and the
	// empty secrets read as absent: no key, which gossip refuses unless
	// --gossip-insecure, and no admin token.
	serve := func(args ...string) (cfg router.Config, warnings []string, err error) {
		t.Helper()
		app := captureApp(func(_ string, c *cli.Context) error {
			cfg, warnings, err = routerConfig(c)
			return nil
		})
		if rerr := app.Run(append([]string{"prefixring", "serve", "--endpoints", "http://127.0.0.1:1"}, args...)); rerr != nil {
			t.Fatal(rerr)
		}
		return cfg, warnings, err
	}
	if cfg, w, err := serve(); err != nil || len(w) != 0 || cfg.GossipInsecure || cfg.Workers.Token != "" {
		t.Errorf("serve with every variable empty: %v, warnings %q, insecure %v, token %q; want it to start as with none", err, w, cfg.GossipInsecure, cfg.Workers.Token)
	}
	if _, _, err := serve("--gossip-bind=127.0.0.1:0"); !errors.Is(err, router.ErrGossipKeyMissing) {
		t.Errorf("gossip with PREFIXRING_GOSSIP_KEY empty: %v, want %v", err, router.ErrGossipKeyMissing)
	}
	if cfg, _, err := serve("--gossip-bind=127.0.0.1:0", "--gossip-insecure"); err != nil || cfg.Gossip == nil || cfg.Gossip.Key != nil {
		t.Errorf("gossip with PREFIXRING_GOSSIP_KEY empty and --gossip-insecure: %v, want it to run without a key", err)
	}
	// Only empty is dropped: a secret of only whitespace stays refused.
	t.Setenv("PREFIXRING_ADMIN_TOKEN", " \n")
	if _, _, err := serve(); err == nil || !strings.Contains(err.Error(), "--admin-token") {
		t.Errorf("PREFIXRING_ADMIN_TOKEN of only whitespace: %v, want an error naming --admin-token", err)
	}
}
