package main

import (
	"io"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// An operator types flags, so an error about a flag's value names the
// flag, not the configuration field it fills in words (until stop 42:
// "DNS interval 0s: must be positive", "sketch fanout 1, ...", load's "at
// least one URL is needed"). Every numeric flag of serve, load, sim and
// eval is set to values out of range; whatever is refused names it.
func TestFlagErrorsNameTheFlag(t *testing.T) {
	for _, cmd := range []struct {
		name  string
		flags []cli.Flag
		base  []string // what makes every flag act
		check func(*cli.Context) error
	}{
		{"serve", append(serveFlags(), gossipFlags()...),
			[]string{"--endpoints=http://127.0.0.1:1", "--endpoints-dns=localhost:1", "--endpoints-file=/nonexistent",
				"--gossip-bind=127.0.0.1:0", "--gossip-insecure", "--gossip-view=aligned", "--kv-average"},
			func(c *cli.Context) error { _, _, err := routerConfig(c); return err }},
		{"load", loadCommand().Flags, []string{"--url=http://127.0.0.1:1", "--progress=false"},
			func(c *cli.Context) error { _, err := loadConfig(c); return err }},
		{"sim", simFlags(), nil, func(c *cli.Context) error { _, err := simConfig(c); return err }},
		{"eval", evalCommand().Flags, []string{"--kv-average"},
			func(c *cli.Context) error { _, _, err := evalConfig(c); return err }},
	} {
		for _, fl := range cmd.flags {
			name := fl.Names()[0]
			var values []string
			switch fl.(type) {
			case *cli.IntFlag, *cli.Int64Flag:
				values = []string{"0", "-1", "101", "1000000000"}
			case *cli.Float64Flag:
				values = []string{"0", "-1", "101", "1e18", "NaN"}
			case *cli.DurationFlag:
				values = []string{"0s", "-1s", "1ns"}
			default:
				continue
			}
			for _, v := range values {
				var err error
				app := &cli.App{Flags: cmd.flags, Writer: io.Discard, ErrWriter: io.Discard,
					Action: func(c *cli.Context) error { err = cmd.check(c); return nil }}
				if rerr := app.Run(append([]string{"prefixring"}, append(cmd.base, "--"+name+"="+v)...)); rerr != nil {
					continue // not a value of the flag's type: refused by name when parsed
				}
				if err != nil && !strings.Contains(err.Error(), "--"+name) {
					t.Errorf("%s --%s=%s: %v, want an error naming the flag", cmd.name, name, v, err)
				}
			}
		}
	}
}

// The checks of serve's and load's other flags name them too.
func TestFlagErrorsNameTheFlagBeyondNumbers(t *testing.T) {
	for _, f := range []string{"--policy=nope", "--workers-api=nope", "--max-workers=5000"} {
		if _, _, err := runServeFlags(t, f); err == nil || !strings.Contains(err.Error(), strings.SplitN(f, "=", 2)[0]) {
			t.Errorf("serve %s: %v, want an error naming the flag", f, err)
		}
	}
	app := &cli.App{Flags: append(serveFlags(), gossipFlags()...), Action: func(c *cli.Context) error { _, _, err := routerConfig(c); return err }}
	if err := app.Run([]string{"prefixring"}); err == nil || !strings.Contains(err.Error(), "--endpoints") {
		t.Errorf("serve without endpoints: %v, want an error naming --endpoints", err)
	}
	load := &cli.App{Flags: loadCommand().Flags, Action: func(c *cli.Context) error { _, err := loadConfig(c); return err }}
	if err := load.Run([]string{"prefixring"}); err == nil || !strings.Contains(err.Error(), "--url") {
		t.Errorf("load without --url: %v, want an error naming it", err)
	}
}
