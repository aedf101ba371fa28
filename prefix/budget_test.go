package prefix

import (
	"strings"
	"testing"
)

func mustKey(t *testing.T, k *Keyer, r Route, body string) uint64 {
	t.Helper()
	key, ok, err := k.Key(r, []byte(body))
	if err != nil || !ok {
		t.Fatalf("Key(%s): ok=%v err=%v", body, ok, err)
	}
	return key
}

func completion(prompt string) string { return `{"model":"m","prompt":"` + prompt + `"}` }

// TestMaxChars: text past MaxChars code points never changes the key, text
// before it always does; multi-byte runes and escapes count as one.
func TestMaxChars(t *testing.T) {
	k, _ := New(Config{MaxChars: 4})
	cases := []struct {
		a, b string
		same bool
	}{
		{"abcdX", "abcdY", true},
		{"abcX", "abcY", false},
		{"abcd", "abcdefgh", true},
		{"日本語のX", "日本語のY", true},            // 4 runes of 3 bytes each
		{"日本語X", "日本語Y", false},             // would differ inside a rune if cut by bytes
		{`\u65e5本語の!`, "日本語の?", true},       // escaped and literal count alike
		{`😀\ud83d\ude00ab!`, "😀😀ab?", true}, // a surrogate pair is one code point
		{`ab\"cX`, `ab\"cY`, true},
		{`ab\\X`, `ab\\Y`, false},
		{"ab\xffcX", "ab\xffcY", true}, // an invalid byte counts as one U+FFFD
		{"ab\xffc", "ab\uFFFDc", true},
	}
	for _, c := range cases {
		ka := mustKey(t, k, RouteCompletions, completion(c.a))
		kb := mustKey(t, k, RouteCompletions, completion(c.b))
		if (ka == kb) != c.same {
			t.Errorf("%q vs %q: same=%v, want %v", c.a, c.b, ka == kb, c.same)
		}
	}
}

// TestTokenBudget: a token id counts as 4 characters.
func TestTokenBudget(t *testing.T) {
	k, _ := New(Config{MaxChars: 8})
	a := mustKey(t, k, RouteCompletions, `{"model":"m","prompt":[1,2,3]}`)
	b := mustKey(t, k, RouteCompletions, `{"model":"m","prompt":[1,2,4,"not read"]}`)
	c := mustKey(t, k, RouteCompletions, `{"model":"m","prompt":[1,3]}`)
	if a != b || a == c {
		t.Fatalf("token budget: %x %x %x", a, b, c)
	}
}

// TestChatParts: each of tools, preamble and anchor has its own window,
// so a long shared system prompt does not hide the user message.
func TestChatParts(t *testing.T) {
	k, _ := New(Config{MaxChars: 16})
	long := strings.Repeat("shared system prompt ", 100)
	chat := func(system, user string) string {
		return `{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"` + user + `"}]}`
	}
	a := mustKey(t, k, RouteChat, chat(long, "1st question is this"))
	b := mustKey(t, k, RouteChat, chat(long, "2nd question is this"))
	c := mustKey(t, k, RouteChat, chat(long+"x", "1st question is this"))
	d := mustKey(t, k, RouteChat, chat(long, "1st question is this, continued"))
	if a == b {
		t.Error("distinct user questions under one long system prompt collide")
	}
	if a != c || a != d {
		t.Error("text past the window changed the key")
	}
}

// TestCommonSkipsSharedPreamble: with a Common table, a shared preamble
// inside the prompt is skipped, so what follows it tells requests apart.
func TestCommonSkipsSharedPreamble(t *testing.T) {
	plain, _ := New(Config{MaxChars: ChunkChars})
	pre := strings.Repeat("context ", 2*ChunkChars/8) // exactly two chunks
	tally := NewTally()
	for i := 0; i < 10; i++ {
		hs, err := plain.Prefixes(RouteCompletions, []byte(completion(pre+strings.Repeat(string(rune('a'+i)), 600))), 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		tally.Observe(hs)
	}
	common := tally.Common(0.5, 3)
	if common.Len() != 2 {
		t.Fatalf("common prefixes: %d, want 2", common.Len())
	}
	adaptive, err := New(Config{MaxChars: ChunkChars, Common: common})
	if err != nil {
		t.Fatal(err)
	}
	x, y := completion(pre+"question x"), completion(pre+"question y")
	if mustKey(t, plain, RouteCompletions, x) != mustKey(t, plain, RouteCompletions, y) {
		t.Fatal("plain keys should collide on the shared preamble")
	}
	if mustKey(t, adaptive, RouteCompletions, x) == mustKey(t, adaptive, RouteCompletions, y) {
		t.Fatal("adaptive keys should differ after the shared preamble")
	}
	// A prompt that only starts like the preamble is keyed as usual.
	z := completion(strings.Repeat("context ", 10) + "other")
	if mustKey(t, adaptive, RouteCompletions, z) != mustKey(t, plain, RouteCompletions, z) {
		t.Fatal("uncommon prompt keyed differently by the adaptive keyer")
	}
}

func TestTallyMerge(t *testing.T) {
	a, b, ab := NewTally(), NewTally(), NewTally()
	a.Observe([]uint64{1, 2})
	b.Observe([]uint64{1, 3})
	ab.Observe([]uint64{1, 2})
	ab.Observe([]uint64{1, 3})
	ba := NewTally()
	ba.Merge(b)
	ba.Merge(a)
	a.Merge(b)
	for _, got := range []*Tally{a, ba} {
		if got.Requests != 2 || got.Counts[1] != 2 || got.Counts[2] != 1 || got.Counts[3] != 1 {
			t.Fatalf("merge: %+v, want %+v", got, ab)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{}, {MaxChars: -1}, {MaxChars: 1 << 21}, {MaxChars: 10, Common: NewCommon(nil)}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v): want error", c)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestRouteOf(t *testing.T) {
	for path, want := range map[string]Route{
		"/v1/completions": RouteCompletions, "/v1/chat/completions": RouteChat,
		"/v1/chat/completions/": RouteChat, "/v1/embeddings": RouteEmbeddings,
		"/v1/models": RouteOther, "/": RouteOther, "/v1/completionsX": RouteOther,
	} {
		if got := RouteOf(path); got != want {
			t.Errorf("RouteOf(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestSessionKey(t *testing.T) {
	if SessionKey("m", "s1") == SessionKey("m", "s2") || SessionKey("m", "s1") == SessionKey("m2", "s1") {
		t.Fatal("session keys collide")
	}
	if SessionKey("ab", "c") == SessionKey("a", "bc") {
		t.Fatal("model/session boundary is ambiguous")
	}
}
