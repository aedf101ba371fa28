package prefix

import (
	"fmt"
	"slices"
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

// learnShared has a sketch of fanout 4 observe the completion bodies, as a
// keyer that reads as deep as a sketch does finds their prefixes, and
// returns the shared prefixes it would publish, and the last body's
// prefixes.
func learnShared(t *testing.T, bodies ...string) (*Common, []uint64) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Common = NewCommon(nil)
	k, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sk := NewSketch(4, 0)
	var p []uint64
	for _, b := range bodies {
		if p, err = k.Prefixes(RouteCompletions, []byte(b), nil); err != nil {
			t.Fatal(err)
		}
		sk.Observe(p)
	}
	return MergeSummaries(sk.Fanout(), sk.Summary(64)), p
}

// TestMaxChars: text past MaxChars code points never changes the key, text
// before it always does; multi-byte runes and escapes count as one.
func TestMaxChars(t *testing.T) {
	k, _ := New(Config{MaxChars: 4, PromptChars: 4})
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
	k, _ := New(Config{MaxChars: 8, PromptChars: 8})
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
	k, _ := New(Config{MaxChars: 16, PromptChars: 16})
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

// TestCommonSkipsSharedPreamble: a sketch that sees a preamble continued
// many ways marks it shared, and the key then reads its window after it;
// before, every prompt behind the preamble collides.
func TestCommonSkipsSharedPreamble(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Common = NewCommon(nil)
	plain, _ := New(cfg)
	pre := strings.Repeat("context ", 3*ChunkChars/8) // exactly three chunks
	var bodies []string
	for i := range 10 {
		bodies = append(bodies, completion(pre+strings.Repeat(string(rune('a'+i)), 600)))
	}
	common, _ := learnShared(t, bodies...)
	if common.Len() != 1 {
		t.Fatalf("shared prefixes: %d, want 1 (the preamble's last chunk)", common.Len())
	}
	cfg.Common = common
	adaptive, err := New(cfg)
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

// TestTurnsOfACompletionsConversationKeyAlike: a conversation sent as one
// growing completions prompt behind a shared system prompt keeps its key
// from its first turn on, once the system prompt is known to be shared,
// and two conversations behind it get different keys.
func TestTurnsOfACompletionsConversationKeyAlike(t *testing.T) {
	system := strings.Repeat("You are a helpful assistant. ", 28) // 812 characters
	turn := func(conv, k int) string {
		p := system
		for i := 0; i <= k; i++ {
			p += fmt.Sprintf("\n\nUser: conversation %d asks question %d %s\n\nAssistant:", conv, i, strings.Repeat("words ", 80))
			if i < k {
				p += strings.Repeat(" answer", 60)
			}
		}
		return completion(p)
	}
	var firsts []string
	for c := range 6 {
		firsts = append(firsts, turn(c, 0))
	}
	cfg := DefaultConfig()
	cfg.Common, _ = learnShared(t, firsts...)
	k, _ := New(cfg)
	first := mustKey(t, k, RouteCompletions, turn(7, 0))
	for turnNo := 1; turnNo < 6; turnNo++ {
		if got := mustKey(t, k, RouteCompletions, turn(7, turnNo)); got != first {
			t.Fatalf("turn %d keyed %x, turn 0 %x", turnNo, got, first)
		}
	}
	if mustKey(t, k, RouteCompletions, turn(8, 0)) == first {
		t.Fatal("two conversations behind one system prompt share a key")
	}
	// Without the table, the key is the system prompt's first chunk: every
	// conversation collides (the study's first-256 design).
	plain, _ := New(DefaultConfig())
	if mustKey(t, plain, RouteCompletions, turn(7, 0)) != mustKey(t, plain, RouteCompletions, turn(8, 3)) {
		t.Fatal("without a table, keys should stop inside the system prompt")
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	for _, c := range []Config{{}, {MaxChars: -1, PromptChars: 1}, {MaxChars: 1 << 21, PromptChars: 1}, {MaxChars: 1, PromptChars: 0},
		{MaxChars: 10, PromptChars: 256, Common: NewCommon(nil)}, {MaxChars: 256, PromptChars: 10, Common: NewCommon(nil)},
		{MaxChars: 1, PromptChars: 1, SharedChars: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v): want error", c)
		}
	}
	if err := ok.Validate(); err != nil {
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
	if SessionKey("m", "", "s1") == SessionKey("m", "", "s2") || SessionKey("m", "", "s1") == SessionKey("m2", "", "s1") {
		t.Fatal("session keys collide")
	}
	if SessionKey("m", "a", "s1") == SessionKey("m", "", "s1") || SessionKey("m", "a", "s1") == SessionKey("m", "b", "s1") {
		t.Fatal("adapters share a session key")
	}
	if SessionKey("ab", "", "c") == SessionKey("a", "", "bc") || SessionKey("m", "ab", "c") == SessionKey("m", "a", "bc") {
		t.Fatal("model/lora/session boundary is ambiguous")
	}
}

// ModelAndLora reads the model the session key needs without parsing the rest:
// the last top-level "model" member (duplicates: the last wins, as in
// Python's json, which vLLM and SGLang parse with), decoded as encoding/json decodes it,
// wherever it stands; "" for anything that is not a string model.
func TestModel(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"model":"llama","prompt":"hi"}`, "llama"},
		{`{"messages":[{"role":"user","content":"a \"model\": x","model":"inner"}],"model":"qwen"}`, "qwen"},
		{` { "stream" : true , "model" : "m:sql-adapter" } `, "m:sql-adapter"},
		{`{"m\u006fdel":"caf\u00e9 \ud83d\ude00 \\ \/"}`, "café 😀 \\ /"},
		{`{"model":"first","model":"second"}`, "second"},
		{`{"model":"first","model":7}`, ""},
		{"\xef\xbb\xbf{\"model\":\"m\"}", "m"},
		{"{\"model\":\"bad \xff byte\"}", "bad \uFFFD byte"},
		{`{"model":7,"prompt":"hi"}`, ""},
		{`{"model":null}`, ""},
		{`{"prompt":"no model"}`, ""},
		{`{"model":"unterminated`, ""},
		{`{"model":"bad \q escape"}`, ""},
		{`["model","llama"]`, ""},
		{``, ""},
	} {
		if got, _ := ModelAndLora([]byte(tc.body)); got != tc.want {
			t.Errorf("ModelAndLora(%s) model %q, want %q", tc.body, got, tc.want)
		}
	}
}

// ModelAndLora also reads SGLang's lora_path for the session key: the
// last top-level member, a string or nothing, wherever it stands
// relative to the model.
func TestModelAndLora(t *testing.T) {
	for _, tc := range []struct{ body, model, lora string }{
		{`{"model":"llama","prompt":"hi"}`, "llama", ""},
		{`{"lora_path":"sql","model":"llama"}`, "llama", "sql"},
		{`{"model":"llama","messages":[{"lora_path":"inner"}],"lora_path":"sql"}`, "llama", "sql"},
		{`{"lora_path":"first","lora_path":"second","model":"m"}`, "m", "second"},
		{`{"lora_path":"first","model":"m","lora_path":null}`, "m", ""},
		{`{"model":"m","lora_path":["sql"]}`, "m", ""},
		{`{"model":7,"lora_path":"sql"}`, "", "sql"},
		{`{"lora_path":"sql"}`, "", "sql"},
		{`{"model":"m","lora_path":"unterminated`, "m", ""},
		{``, "", ""},
	} {
		if model, lora := ModelAndLora([]byte(tc.body)); model != tc.model || lora != tc.lora {
			t.Errorf("ModelAndLora(%s) = %q, %q; want %q, %q", tc.body, model, lora, tc.model, tc.lora)
		}
	}
}

// A shared preamble followed by short questions is found although no
// question fills the chunk the preamble ends in: those requests differ
// only in how they end inside that chunk, so the hash of a partly filled
// last chunk is what tells them apart. A fix for short conversation turns
// must not lose this.
func TestShortQuestionsAfterASharedPreamble(t *testing.T) {
	cfg := DefaultConfig()
	pre := strings.Repeat("You are a careful assistant. ", 30) // 870 chars: 3 whole chunks and a bit
	var bodies []string
	for i := range 4 {
		bodies = append(bodies, completion(pre+fmt.Sprintf("Question %d: why?", i)))
	}
	common, prefixes := learnShared(t, bodies...)
	if got := common.Hashes(); !slices.Equal(got, []uint64{prefixes[2]}) {
		t.Fatalf("shared %x, want the preamble's third chunk %x", got, prefixes[2])
	}
	cfg.Common = common
	k, _ := New(cfg)
	a, _ := k.Request(RouteCompletions, []byte(completion(pre+"Question 8: how?")), nil)
	b, _ := k.Request(RouteCompletions, []byte(completion(pre+"Question 9: how?")), nil)
	if a.Hash == b.Hash || a.Group != b.Group {
		t.Fatalf("keys %x %x (want different), groups %x %x (want equal)", a.Hash, b.Hash, a.Group, b.Group)
	}
}

// A conversation of long turns, each ending in a chunk of its own, is one
// way of continuing each of its prefixes too: none is marked shared, and
// every turn keys like the first.
func TestLongTurnsDoNotShareTheirOwnHistory(t *testing.T) {
	cfg := DefaultConfig()
	prompt := ""
	var turns []string
	for i := range 8 {
		prompt += fmt.Sprintf(" User: question %d %s Assistant: %s", i, strings.Repeat("why ", 40), strings.Repeat("because ", 50))
		turns = append(turns, completion(prompt))
	}
	common, _ := learnShared(t, turns...)
	if common.Len() != 0 {
		t.Fatalf("one conversation's turns marked %d of its own prefixes shared", common.Len())
	}
	cfg.Common = common
	keyed, _ := New(cfg)
	first := mustKey(t, keyed, RouteCompletions, turns[0])
	for i, turn := range turns[1:] {
		if got := mustKey(t, keyed, RouteCompletions, turn); got != first {
			t.Fatalf("turn %d keyed %x, turn 0 %x", i+1, got, first)
		}
	}
}
