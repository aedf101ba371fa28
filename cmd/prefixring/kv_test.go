package main

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/upstream"
)

// runKVFlags parses serve's flags from args and returns kvConfig's answer.
func runKVFlags(t *testing.T, args ...string) (upstream.KVConfig, error) {
	t.Helper()
	var kc upstream.KVConfig
	var kerr error
	app := &cli.App{Flags: serveFlags(), Action: func(c *cli.Context) error {
		kc, kerr = kvConfig(c)
		return nil
	}}
	if err := app.Run(append([]string{"prefixring"}, args...)); err != nil {
		t.Fatal(err)
	}
	return kc, kerr
}

func TestKVFlags(t *testing.T) {
	kc, err := runKVFlags(t)
	if err != nil || !kc.Scrape || kc.Interval != upstream.DefaultKVConfig().Interval || kc.MetricsPath != "/metrics" {
		t.Fatalf("defaults: %+v, %v", kc, err)
	}
	kc, err = runKVFlags(t, "--kv-capacity", "http://10.0.0.7:8000=396000,gpu-b=200000", "--kv-capacity", "1000",
		"--kv-scrape=false", "--kv-metrics-path", "/engine/metrics")
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := upstream.ParseEndpoint("http://10.0.0.7:8000")
	b, _, _ := upstream.ParseEndpoint("gpu-b=http://10.0.0.8:8000")
	c, _, _ := upstream.ParseEndpoint("http://10.0.0.9:8000")
	if kc.Scrape || kc.MetricsPath != "/engine/metrics" || kc.Capacity.For(a) != 396000 || kc.Capacity.For(b) != 200000 || kc.Capacity.For(c) != 1000 {
		t.Fatalf("parsed %+v: %d %d %d", kc, kc.Capacity.For(a), kc.Capacity.For(b), kc.Capacity.For(c))
	}
	for _, bad := range [][]string{{"--kv-capacity", "gpu-a=lots"}, {"--kv-scrape-interval", "0s"}, {"--kv-metrics-path", "metrics"}} {
		if _, err := runKVFlags(t, bad...); err == nil {
			t.Errorf("%v accepted", bad)
		} else if bad[0] == "--kv-capacity" && !strings.Contains(err.Error(), "--kv-capacity") {
			t.Errorf("%v: %v does not name the flag", bad, err)
		}
	}
}
