package prefix

import (
	"slices"
	"strings"
	"testing"
)

// Request returns Key's key, and its prefixes are Prefixes'.
func TestRequestAgreesWithKeyAndPrefixes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Common = NewCommon(nil)
	k, _ := New(cfg)
	for _, tc := range keyCases() {
		key, ok, err := k.Key(tc.route, []byte(tc.body))
		got, gotErr := k.Request(tc.route, []byte(tc.body), make([]uint64, 0, 4))
		if got.Hash != key || got.Keyed != ok || (err == nil) != (gotErr == nil) {
			t.Errorf("%s: Request %x %v %v, Key %x %v %v", tc.name, got.Hash, got.Keyed, gotErr, key, ok, err)
		}
		if err != nil {
			continue
		}
		p, _ := k.Prefixes(tc.route, []byte(tc.body), nil)
		if !slices.Equal(p, got.Prefixes) {
			t.Errorf("%s: prefixes %x, Prefixes %x", tc.name, got.Prefixes, p)
		}
	}
}

// NewBytes counts the messages after the last assistant message, and is -1
// for a first turn or a completion.
func TestNewBytes(t *testing.T) {
	k, _ := New(DefaultConfig())
	tail := `{"role":"tool","content":"42"},{"role":"user","content":"thanks"}`
	for _, tc := range []struct {
		route Route
		body  string
		want  int
	}{
		{RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, -1},
		{RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},` + tail + `]}`, len(tail) + 1},
		{RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"},{"content":"hello","role":"assistant"}]}`, 0},
		{RouteChat, `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"d"},{"role":"user","content":"e"}]}`, len(`,{"role":"user","content":"e"}`)},
		{RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}, 7]}`, -1}, // not a message: unknown
		{RouteCompletions, `{"model":"m","prompt":"hi"}`, -1},
	} {
		got, err := k.Request(tc.route, []byte(tc.body), nil)
		if err != nil || got.NewBytes != tc.want {
			t.Errorf("%s: new bytes %d %v, want %d", tc.body, got.NewBytes, err, tc.want)
		}
	}
}

// The group key is the key of the shared part alone: a chat's system
// prompt and tools, whatever the user says; a completion's shared prefix.
func TestGroupKey(t *testing.T) {
	k, _ := New(DefaultConfig())
	chat := func(system, user string) string {
		return `{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"` + user + `"}]}`
	}
	a, _ := k.Request(RouteChat, []byte(chat("You are terse.", "one")), nil)
	b, _ := k.Request(RouteChat, []byte(chat("You are terse.", "two")), nil)
	c, _ := k.Request(RouteChat, []byte(chat("You are verbose.", "one")), nil)
	if a.Group != b.Group || a.Group == c.Group || a.Hash == b.Hash {
		t.Fatalf("chat groups: %x %x %x", a.Group, b.Group, c.Group)
	}
	pre := strings.Repeat("shared preamble ", 32) // 512 chars: two chunks
	cfg := DefaultConfig()
	cfg.Common = NewCommon(nil)
	learn, _ := New(cfg)
	p, _ := learn.Prefixes(RouteCompletions, []byte(completion(pre+"x")), nil)
	cfg.Common = NewCommon([]uint64{p[1]})
	ks, _ := New(cfg)
	x, _ := ks.Request(RouteCompletions, []byte(completion(pre+strings.Repeat("x", 300))), nil)
	y, _ := ks.Request(RouteCompletions, []byte(completion(pre+strings.Repeat("y", 300))), nil)
	whole, _ := ks.Request(RouteCompletions, []byte(completion(pre)), nil)
	if x.Group != y.Group || x.Hash == y.Hash || x.Group != whole.Hash {
		t.Fatalf("completion groups %x %x, keys %x %x; the preamble alone keys %x", x.Group, y.Group, x.Hash, y.Hash, whole.Hash)
	}
}

// Blocks: two prompts share exactly their common whole chunks; a longer
// conversation extends a shorter one's blocks; models never share.
func TestBlocks(t *testing.T) {
	k, _ := New(DefaultConfig())
	chat := func(model string, msgs ...string) []byte {
		var parts []string
		for i, m := range msgs {
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			parts = append(parts, `{"role":"`+role+`","content":"`+m+`"}`)
		}
		return []byte(`{"model":"` + model + `","messages":[` + strings.Join(parts, ",") + `]}`)
	}
	long := strings.Repeat("a conversation about caches ", 40) // 1120 chars
	turn1, err := k.Blocks(RouteChat, chat("m", long), nil)
	if err != nil {
		t.Fatal(err)
	}
	turn2, _ := k.Blocks(RouteChat, chat("m", long, "an answer", "a follow-up"), nil)
	other, _ := k.Blocks(RouteChat, chat("n", long), nil)
	full := (1 + 1 + 2 + 4 + 1 + len(long)) / ChunkChars // model, separators, role, text
	if len(turn1) != full+1 || !slices.Equal(turn1[:full], turn2[:full]) || turn1[full] == turn2[full] {
		t.Fatalf("turn 1 %d blocks (want %d + tail), shares %v with turn 2", len(turn1), full, slices.Equal(turn1[:full], turn2[:full]))
	}
	if other[0] == turn1[0] {
		t.Fatal("two models share a block")
	}
	// Tools come first whatever their place in the body.
	a, _ := k.Blocks(RouteChat, []byte(`{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"user","content":"hi"}]}`), nil)
	b, _ := k.Blocks(RouteChat, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}`), nil)
	if !slices.Equal(a, b) {
		t.Fatal("tools' position in the body changed the blocks")
	}
	// Two SGLang LoRA adapters chosen by lora_path keep separate caches,
	// as two models do, so the same prompt must not share a block; Key
	// hashes lora_path too.
	body := func(lora string) []byte {
		return []byte(`{"model":"m",` + lora + `"prompt":"` + long + `"}`)
	}
	sql, _ := k.Blocks(RouteCompletions, body(`"lora_path":"sql",`), nil)
	chatLora, _ := k.Blocks(RouteCompletions, body(`"lora_path":"chat",`), nil)
	base, _ := k.Blocks(RouteCompletions, body(""), nil)
	if len(sql) == 0 || sql[0] == chatLora[0] || sql[0] == base[0] {
		t.Fatal("two lora_path adapters, or one and the base model, share a block")
	}
	// A lora_path that is not a string selects nothing (SGLang's business,
	// as for Key): the blocks are the base model's.
	if odd, _ := k.Blocks(RouteCompletions, body(`"lora_path":null,`), nil); !slices.Equal(odd, base) {
		t.Fatal("a null lora_path changed the blocks")
	}
	// Nor does an empty one, which names no adapter (SessionKey's "").
	if empty, _ := k.Blocks(RouteCompletions, body(`"lora_path":"",`), nil); !slices.Equal(empty, base) {
		t.Fatal("an empty lora_path changed the blocks")
	}
	// A missing or null model is the engine's default model, as "" is:
	// the blocks are those of model "", and the model is not read from
	// wherever the body starts.
	unnamed, err := k.Blocks(RouteCompletions, []byte(`{"model":"","prompt":"`+long+`"}`), nil)
	if err != nil || len(unnamed) == 0 || unnamed[0] == base[0] {
		t.Fatalf("model \"\": %d blocks, %v, or the same as model m's", len(unnamed), err)
	}
	for _, b := range []string{`{"prompt":"` + long + `"}`, `{"model":null,"prompt":"` + long + `"}`, `{"prompt":"` + long + `","model":null}`} {
		if got, err := k.Blocks(RouteCompletions, []byte(b), nil); err != nil || !slices.Equal(got, unnamed) {
			t.Fatalf("%.30s...: blocks differ from model \"\"'s (%v)", b, err)
		}
	}
	// An empty tools array renders like none, so it must not change the
	// blocks either.
	none, _ := k.Blocks(RouteChat, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
	empty, _ := k.Blocks(RouteChat, []byte(`{"model":"m","tools":[],"messages":[{"role":"user","content":"hi"}]}`), nil)
	if len(none) == 0 || !slices.Equal(none, empty) {
		t.Fatalf("an empty tools array changed the blocks: %x against %x", empty, none)
	}
	if _, err := k.Blocks(RouteChat, []byte(`{"model":"m"}`), nil); err == nil {
		t.Fatal("a chat without messages has blocks")
	}
	if got, _ := k.Blocks(RouteCompletions, []byte(completion(strings.Repeat("z", MaxBlocks*ChunkChars+999))), nil); len(got) != MaxBlocks {
		t.Fatalf("%d blocks of a prompt past the bound, want %d", len(got), MaxBlocks)
	}
}
