package proxy

import (
	"regexp"
	"strings"
	"testing"
)

// TestEndpointHeaderHidesAddress: X-Prefixring-Endpoint shows an
// operator's label when the endpoint has one, else an opaque name that is
// the same on every replica and across restarts (derived from the
// endpoint's ID alone); host:port only when the operator asks for it
// (EndpointAddress). Before the fix an unlabelled endpoint showed clients
// its internal host:port.
func TestEndpointHeaderHidesAddress(t *testing.T) {
	f := newFixture(t, 1)
	host := strings.TrimPrefix(f.ups[0].URL, "http://")
	name := func(f *fixture) string {
		resp := f.post(t, "/v1/completions", `{"model":"m","prompt":"x"}`)
		readAll(t, resp.Body)
		return resp.Header.Get("X-Prefixring-Endpoint")
	}
	got := name(f)
	_, port, _ := strings.Cut(host, ":")
	if strings.Contains(got, "127.0.0.1") || strings.Contains(got, port) || !regexp.MustCompile(`^ep-[0-9a-f]{8}$`).MatchString(got) {
		t.Fatalf("unlabelled endpoint shown as %q (its address is %s), want an opaque ep-xxxxxxxx", got, host)
	}
	// Another replica (another Router) names it alike.
	g := newFixture(t, 0)
	g.setEndpoints(t, f.ups[0].URL)
	if again := name(g); again != got {
		t.Fatalf("another replica names the endpoint %q, this one %q", again, got)
	}
	g.setEndpoints(t, "gpu-a="+f.ups[0].URL)
	if got := name(g); got != "gpu-a" {
		t.Fatalf("labelled endpoint shown as %q, want gpu-a", got)
	}
	h := newFixture(t, 1, func(c *Config) { c.EndpointAddress = true })
	if got, want := name(h), strings.TrimPrefix(h.ups[0].URL, "http://"); got != want {
		t.Fatalf("with EndpointAddress: %q, want %q", got, want)
	}
}
