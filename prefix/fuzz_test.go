package prefix

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/cespare/xxhash/v2"
)

// fuzzConfigs are the configurations every fuzz input is keyed under: a
// tiny window so that budgets run out inside strings, escapes, parts and
// token lists; the default; and a small window with a Common table, so the
// adaptive path is compared with the reference too.
func fuzzConfigs() []Config {
	k, _ := New(Config{MaxChars: ChunkChars, PromptChars: ChunkChars, SharedChars: 4 * ChunkChars, Common: NewCommon(nil)})
	// Chunk prefixes of a few plausible anchors: the seeds share them. Only
	// the first and third of each are marked shared, so a shared prefix
	// that is not prefix-closed is exercised.
	var hs []uint64
	for _, b := range []string{
		`{"model":"m","prompt":"` + repeat("abcd", 300) + `"}`,
		`{"model":"m","prompt":[` + repeatTok(300) + `]}`,
	} {
		p, _ := k.Prefixes(RouteCompletions, []byte(b), nil)
		for _, i := range []int{0, 2} {
			if i < len(p) {
				hs = append(hs, p[i])
			}
		}
	}
	return []Config{
		{MaxChars: 7, PromptChars: 5, SharedChars: 0},
		DefaultConfig(),
		{MaxChars: ChunkChars, PromptChars: ChunkChars, SharedChars: 4 * ChunkChars, Common: NewCommon(hs)},
	}
}

func addSeeds(f *testing.F) {
	for _, tc := range keyCases() {
		f.Add(uint8(tc.route), []byte(tc.body))
	}
	f.Add(uint8(RouteCompletions), []byte(`{"model":"m","prompt":"`+repeat("abcd", 300)+`"}`))
	f.Add(uint8(RouteCompletions), []byte(`{"model":"m","prompt":[`+repeatTok(300)+`]}`))
}

// FuzzKey: Key never panics, is deterministic, returns only *Error errors,
// and reads at most its budget of each part.
func FuzzKey(f *testing.F) {
	addSeeds(f)
	cfgs := fuzzConfigs()
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := Route(route % 4)
		for _, cfg := range cfgs {
			k, _ := New(cfg)
			k1, ok1, err1 := k.Key(r, body)
			k2, ok2, err2 := k.Key(r, body)
			if k1 != k2 || ok1 != ok2 || (err1 == nil) != (err2 == nil) {
				t.Fatalf("not deterministic: %x %v %v / %x %v %v", k1, ok1, err1, k2, ok2, err2)
			}
			if err1 != nil && (!errors.Is(err1, ErrInvalidBody) || ok1 || r == RouteOther) {
				t.Fatalf("bad error contract: ok=%v err=%v route=%v", ok1, err1, r)
			}
			if err1 == nil && r != RouteOther && !ok1 {
				t.Fatalf("known route not ok without error")
			}
			// Request and Blocks read the same body without panicking, and
			// Request keys it as Key does.
			rq, err3 := k.Request(r, body, make([]uint64, 0, 8))
			if rq.Hash != k1 || rq.Keyed != ok1 || (err3 == nil) != (err1 == nil) {
				t.Fatalf("Request %x %v %v, Key %x %v %v", rq.Hash, rq.Keyed, err3, k1, ok1, err1)
			}
			if bl, err4 := k.Blocks(r, body, nil); len(bl) > MaxBlocks || (err4 == nil) != (err1 == nil) {
				t.Fatalf("Blocks: %d blocks, %v; Key: %v", len(bl), err4, err1)
			}
			var req request
			if route := sniffIf(r, body); route != RouteOther && req.parse(route, body, &cfg, nil) == nil {
				// Bounded work: no part reads more than its window, and the
				// anchor no more than SharedChars past its own.
				if req.toolsT.n > cfg.MaxChars || req.preamble.n > cfg.MaxChars {
					t.Fatalf("read past budget: tools %d preamble %d", req.toolsT.n, req.preamble.n)
				}
				if req.anchor.n > req.anchor.limit+3 || req.anchor.limit > (chunks(cfg.SharedChars)+chunks(cfg.window(route)))*ChunkChars {
					t.Fatalf("anchor read %d > limit %d", req.anchor.n, req.anchor.limit)
				}
				// ModelAndLora, which the session key reads, finds the model
				// and the lora_path Key hashed: a session and its body key
				// by the same model and adapter.
				model, lora := ModelAndLora(body)
				if got, want := xxhash.Sum64String(model), req.modelSum(); got != want {
					t.Fatalf("ModelAndLora's model %q hashes %x, Key's model %x", model, got, want)
				}
				if (req.lora == 0) != (lora == "") ||
					req.lora != 0 && xxhash.Sum64String(lora) != req.whole(req.lora) {
					t.Fatalf("ModelAndLora %q %q, Key's model and lora at %d %d", model, lora, req.model, req.lora)
				}
			}
		}
	})
}

func sniffIf(r Route, body []byte) Route {
	if r == RouteOther {
		return sniff(body)
	}
	return r
}

// FuzzReference: on every body encoding/json accepts, Key agrees with the
// encoding/json reference implementation (key, ok, and error or not).
func FuzzReference(f *testing.F) {
	addSeeds(f)
	cfgs := fuzzConfigs()
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := Route(route % 4)
		for _, cfg := range cfgs {
			want, wantOK, valid, wantErr := refKey(cfg, r, body)
			if !valid {
				continue
			}
			k, _ := New(cfg)
			got, gotOK, gotErr := k.Key(r, body)
			if (gotErr == nil) != (wantErr == nil) || gotOK != wantOK || got != want {
				t.Fatalf("MaxChars=%d common=%d route=%v\n got %x %v %v\nwant %x %v %v",
					cfg.MaxChars, cfg.Common.Len(), r, got, gotOK, gotErr, want, wantOK, wantErr)
			}
		}
	})
}

// escapeAll writes s as a JSON string with every non-ASCII, quote,
// backslash and control character as a \u escape (surrogate pairs above
// U+FFFF), a spelling no encoder produces by default.
func escapeAll(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r >= 0x10000:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04X`, hi, lo)
		case r < 0x20 || r == '"' || r == '\\' || r >= 0x80:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// FuzzChatInvariance: for any message texts and window, the key does not
// change with member order, white space, escaping, fields that do not reach
// the prompt, the string-vs-text-part spelling of content, or later turns.
func FuzzChatInvariance(f *testing.F) {
	f.Add("You are terse.", "hi", "Hello!", "more", uint16(4096))
	f.Add("", "日本語 \U0001F600 \"q\" \\ \n", "x", "y", uint16(3))
	f.Add(strings.Repeat("s", 300), "\xff\xfe bad utf8", "", "", uint16(257))
	f.Fuzz(func(t *testing.T, system, user, reply, next string, max uint16) {
		k, err := New(Config{MaxChars: 1 + int(max)%5000, PromptChars: 1 + int(max)%5000})
		if err != nil {
			t.Fatal(err)
		}
		sysMsg := `{"role":"system","content":` + jsonString(system) + `}`
		base := `{"model":"m","messages":[` + sysMsg + `,{"role":"user","content":` + jsonString(user) + `}]}`
		variants := []string{
			` { "temperature" : 0.5 , "messages" : [ {"content":` + escapeAll(system) + ` , "role":"sys\u0074em"},` +
				"\n\t" + `{"content":` + escapeAll(user) + `,"role":"user","name":"n"} ] , "model":"\u006d", "stream":true } `,
			`{"model":"m","messages":[` + sysMsg + `,{"role":"user","content":[{"text":` + jsonString(user) + `,"type":"text"},{"type":"image_url","image_url":{"url":"u"}}]}]}`,
			`{"model":"m","messages":[` + sysMsg + `,{"role":"user","content":` + jsonString(user) + `},{"role":"assistant","content":` +
				jsonString(reply) + `},{"role":"user","content":` + jsonString(next) + `}],"max_tokens":5}`,
		}
		want, ok, err := k.Key(RouteChat, []byte(base))
		if err != nil || !ok {
			t.Fatalf("base: %v %v\n%s", ok, err, base)
		}
		for i, v := range variants {
			got, ok, err := k.Key(RouteChat, []byte(v))
			if err != nil || !ok || got != want {
				t.Fatalf("variant %d: %x %v %v, want %x\n%s\n%s", i, got, ok, err, want, base, v)
			}
		}
	})
}
