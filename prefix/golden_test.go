package prefix

import (
	"strings"
	"testing"
)

// TestGoldenKeys pins body -> key for the default configuration, beside the
// placement's golden table (ring/pick_test.go). Two replicas built from
// different commits must key a body identically, or they send one prompt to
// two homes. If this fails, the key format changed: that is a breaking
// change for mixed-version clusters; change the table only on purpose, and
// say so in the release notes.
func TestGoldenKeys(t *testing.T) {
	long := strings.Repeat("All work and no play makes Jack a dull boy. ", 200) // 8800 chars
	golden := []struct {
		name  string
		route string
		body  string
		key   uint64
	}{
		{"chat", "/v1/chat/completions",
			`{"model":"llama","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan a trip to Lyon"}]}`,
			0x311e3df5dd7122c2},
		{"chat turn 2", "/v1/chat/completions",
			`{"model":"llama","stream":true,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan a trip to Lyon"},{"role":"assistant","content":"Day 1"},{"role":"user","content":"3 days"}]}`,
			0x311e3df5dd7122c2},
		{"chat other model", "/v1/chat/completions",
			`{"model":"qwen","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan a trip to Lyon"}]}`,
			0x02d2b64355ab7bcd},
		{"chat no system", "/v1/chat/completions",
			`{"model":"llama","messages":[{"role":"user","content":"hello"}]}`,
			0x42484baa9fb9d404},
		{"chat content parts", "/v1/chat/completions",
			`{"model":"llama","messages":[{"role":"user","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]}]}`,
			0x5e74472a9629f65f},
		{"chat tools", "/v1/chat/completions",
			`{"model":"llama","tools":[{"type":"function","function":{"name":"get_weather"}}],"messages":[{"role":"user","content":"hello"}]}`,
			0xfe22363740c61f50},
		{"chat escapes", "/v1/chat/completions",
			`{"model":"llama","messages":[{"role":"user","content":"caf\u00e9 \"quoted\"\n"}]}`,
			0xe655c8afc7bbf36d},
		{"chat long system", "/v1/chat/completions",
			`{"model":"llama","messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"q1"}]}`,
			0xad9d35d7067389b4},
		{"completion", "/v1/completions",
			`{"model":"llama","prompt":"Once upon a time"}`,
			0x06db96ee2519ab45},
		{"completion long", "/v1/completions",
			`{"model":"llama","prompt":"` + long + `"}`,
			0xc9b6e697155244a9},
		{"completion token ids", "/v1/completions",
			`{"model":"llama","prompt":[1,2,3,4,5]}`,
			0x322dd44a16a15475},
		{"embeddings", "/v1/embeddings",
			`{"model":"bge","input":"a sentence to embed"}`,
			0xcfcbbc6cfc263b9b},
	}
	k, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range golden {
		key, ok, err := k.Key(RouteOf(g.route), []byte(g.body))
		if err != nil || !ok {
			t.Errorf("%s: not keyed: %v", g.name, err)
			continue
		}
		if key != g.key {
			t.Errorf("%s: key %#016x, golden %#016x", g.name, key, g.key)
		}
	}
	if got, want := SessionKey("llama", "", "session-42"), uint64(0xf48f5c994f0d9b18); got != want {
		t.Errorf("session key %#016x, golden %#016x", got, want)
	}
}

// TestGoldenSharedKeys pins the parts of the key that depend on a shared
// prefix: the key past a prefix in the Common table, and the group key the
// prefix-key policy reads.
func TestGoldenSharedKeys(t *testing.T) {
	pre := strings.Repeat("You are a careful assistant. ", 30) // 870 chars: 3 whole chunks and a bit
	body := `{"model":"llama","prompt":"` + pre + `Question: what is CHWBL? Explain it with an example."}`
	cfg := DefaultConfig()
	cfg.Common = NewCommon(nil)
	learn, _ := New(cfg)
	p, err := learn.Prefixes(RouteCompletions, []byte(body), nil)
	if err != nil || len(p) < 4 {
		t.Fatalf("prefixes %d, %v", len(p), err)
	}
	cfg.Common = NewCommon([]uint64{p[2]}) // the preamble's third chunk is shared
	k, _ := New(cfg)
	got, err := k.Request(RouteCompletions, []byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	chat, err := k.Request(RouteChat, []byte(`{"model":"llama","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan a trip to Lyon"}]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		name      string
		got, want uint64
	}{
		{"completion past a shared prefix", got.Hash, 0x273dbb055de20c68},
		{"completion group", got.Group, 0x9cd8cbfa9225db47},
		{"chat group", chat.Group, 0xb296bd017ac308c7},
	} {
		if g.got != g.want {
			t.Errorf("%s: %#016x, golden %#016x", g.name, g.got, g.want)
		}
	}
}
