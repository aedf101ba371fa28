package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestMetricsAndDebugRing(t *testing.T) {
	f := newFixture(t, 2)
	for range 3 {
		readAll(t, f.post(t, "/v1/completions", `{"model":"m","prompt":"same prompt"}`).Body)
	}
	readAll(t, f.post(t, "/v1/completions", `{"model":"m","prompt":`).Body)

	resp, err := f.srv.Client().Get(f.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text := readAll(t, resp.Body)
	for _, want := range []string{
		`prefixring_requests_total{decision="home",endpoint="` + mustID(t, f.ups[0].URL),
		`prefixring_requests_total{decision="none",endpoint="",status="400"} 1`,
		`prefixring_upstream_ttfb_seconds_count`,
		`prefixring_upstream_duration_seconds_count`,
		`prefixring_inflight_requests{endpoint=`,
		`prefixring_endpoint_healthy{endpoint=`,
		`prefixring_load_bound 1`,
	} {
		if !strings.Contains(text, want) && !strings.Contains(text, strings.Replace(want, mustID(t, f.ups[0].URL), mustID(t, f.ups[1].URL), 1)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(text, `status="200"} 3`) {
		t.Errorf("/metrics does not count 3 answered requests:\n%s", text)
	}

	resp, err = f.srv.Client().Get(f.srv.URL + "/debug/ring")
	if err != nil {
		t.Fatal(err)
	}
	var ring struct {
		LoadFactor float64 `json:"load_factor"`
		Endpoints  []struct {
			ID         string `json:"id"`
			Healthy    bool   `json:"healthy"`
			Partitions int    `json:"partitions"`
		} `json:"endpoints"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ring); err != nil {
		t.Fatal(err)
	}
	parts := 0
	for _, e := range ring.Endpoints {
		parts += e.Partitions
		if !e.Healthy {
			t.Errorf("%s unhealthy", e.ID)
		}
	}
	if ring.LoadFactor != 1.25 || len(ring.Endpoints) != 2 || parts != 7919 {
		t.Fatalf("/debug/ring: %+v", ring)
	}
}

func TestHealthzAndReadyz(t *testing.T) {
	f := newFixture(t, 1)
	get := func(path string) int {
		resp, err := f.srv.Client().Get(f.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get("/healthz") != http.StatusOK || get("/readyz") != http.StatusOK {
		t.Fatal("healthz/readyz not OK with a healthy endpoint")
	}
	f.balancer.SetHealthy(f.endpoints.IDs()[0], false)
	if got := get("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("readyz %d with no healthy endpoint", got)
	}
}
