package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prefixring/prefixring/internal/e2etest"
)

// GET /debug/pick answers where keys would go, the same each time, without
// leaving load behind; a bad key gets a 400 JSON error.
func TestDebugPick(t *testing.T) {
	var urls []string
	for range 3 {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	p := e2etest.Serve(t, "pick", "--endpoints", strings.Join(urls, ","))
	get := func(q string) (int, map[string]any) {
		resp, err := http.Get(p.Admin + "/debug/pick?key=" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, v
	}
	code, a := get("1,2,3,18446744073709551615")
	_, b := get("1,2,3,18446744073709551615")
	picks := a["picks"].(map[string]any)
	if code != 200 || len(picks) != 4 || picks["1"] == "" || b["picks"].(map[string]any)["1"] != picks["1"] {
		t.Fatalf("%d %v %v", code, a, b)
	}
	if code, v := get("1,x"); code != 400 || v["error"] == nil {
		t.Fatalf("bad key: %d %v", code, v)
	}
	resp, err := http.Get(p.Admin + "/debug/ring")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ring struct {
		Endpoints []struct {
			LocalLoad int64 `json:"local_load"`
		}
	}
	_ = json.NewDecoder(resp.Body).Decode(&ring)
	for _, e := range ring.Endpoints {
		if e.LocalLoad != 0 {
			t.Fatalf("probes left load: %+v", ring)
		}
	}
}
