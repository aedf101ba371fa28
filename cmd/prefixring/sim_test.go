package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runSimAddrs parses sim's flags from args and returns simAddrs' answer.
func runSimAddrs(t *testing.T, args ...string) (addrs []string, err error) {
	t.Helper()
	app := &cli.App{Flags: simFlags(), Action: func(c *cli.Context) error {
		addrs, err = simAddrs(c)
		return nil
	}}
	if rerr := app.Run(append([]string{"prefixring"}, args...)); rerr != nil {
		t.Fatal(rerr)
	}
	return addrs, err
}

// sim serves --listen, or --count servers from --base-port; --listen given
// beside either is refused rather than dropped (until stop 41 the servers
// silently went to --base-port).
func TestSimAddrs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"127.0.0.1:8000"}},
		{[]string{"--listen", "127.0.0.1:9001"}, []string{"127.0.0.1:9001"}},
		{[]string{"--count", "2", "--base-port", "9010"}, []string{"127.0.0.1:9010", "127.0.0.1:9011"}},
		{[]string{"--base-port", "9010"}, []string{"127.0.0.1:9010"}},
	} {
		if got, err := runSimAddrs(t, c.args...); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %v %v, want %v", c.args, got, err, c.want)
		}
	}
	for _, args := range [][]string{
		{"--listen", "127.0.0.1:9001", "--count", "2"},
		{"--listen", "127.0.0.1:9001", "--base-port", "9010"},
	} {
		if got, err := runSimAddrs(t, args...); err == nil || !strings.Contains(err.Error(), "--listen") {
			t.Errorf("%q: %v %v, want an error naming --listen", args, got, err)
		}
	}
	if _, err := runSimAddrs(t, "--count", "0"); err == nil || !strings.Contains(err.Error(), "--count") {
		t.Errorf("--count 0: %v", err)
	}
}
