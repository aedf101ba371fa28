package prefix

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// benchText returns n bytes of prose with the things real prompts contain:
// newlines and quotes (escaped in JSON) and some non-ASCII text.
func benchText(rng *rand.Rand, n int) string {
	// Mostly English, with newlines and quotes (escaped in JSON) and some
	// non-ASCII text, roughly one special word in eight.
	words := []string{"the", "cache", "router", "prefix", "token", "server", "of", "a", "model", "and",
		"request", "to", "is", "prompt", "block", "naïve", "\\n", "\\\"quoted\\\"", "replica", "key", "in", "for", "日本語", "with"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	// Cut at a word boundary so that no escape or rune is split, then pad.
	s := b.String()[:n]
	s = s[:strings.LastIndexByte(s, ' ')+1]
	return s + strings.Repeat(".", n-len(s))
}

// benchChat returns a chat body whose messages total about size bytes: a
// 2 KB system prompt, then user/assistant turns of about 1 KB.
func benchChat(size int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	b.WriteString(`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"system","content":"`)
	b.WriteString(benchText(rng, min(2048, size/2)))
	b.WriteString(`"}`)
	for i := 0; b.Len() < size; i++ {
		role := [2]string{"user", "assistant"}[i%2]
		fmt.Fprintf(&b, `,{"role":%q,"content":"%s"}`, role, benchText(rng, min(1024, size/2)))
	}
	b.WriteString(`],"temperature":0.7,"max_tokens":256,"stream":true}`)
	return b.Bytes()
}

func benchCompletion(size int) []byte {
	rng := rand.New(rand.NewPCG(3, 4))
	return []byte(`{"model":"m","max_tokens":16,"prompt":"` + benchText(rng, size) + `","temperature":0}`)
}

func benchTokens(n int) []byte {
	return []byte(`{"model":"m","prompt":[` + repeatTok(n) + `]}`)
}

// BenchmarkKey measures Key against two encoding/json designs that compute
// the same chat key (model, system text, first user text):
//
//   - json-unmarshal decodes the whole body into structs (every message);
//   - json-stream walks it with json.Decoder, decoding messages one by one
//     until the first user message and skipping the rest as RawMessage.
//
// Measured on the shared 2-core machine at low load (median of
// go test -run '^$' -bench Key -benchmem -count=3 ./prefix/; up to 2x
// slower while other jobs run):
//
//	chat-4KB                  3.5 µs   1.2 GB/s    0 allocs
//	chat-256KB                51 µs    5.1 GB/s    0 allocs
//	completions-4KB           3.5 µs   1.2 GB/s    0 allocs
//	completions-256KB         45 µs    5.9 GB/s    0 allocs
//	tokens-1K                 17 µs    0.29 GB/s   0 allocs
//	json-unmarshal/chat-4KB   40 µs    0.11 GB/s   26 allocs
//	json-stream/chat-4KB      46 µs    0.09 GB/s   88 allocs
//	json-unmarshal/chat-256KB 1.17 ms  0.22 GB/s   522 allocs
//	json-stream/chat-256KB    1.71 ms  0.15 GB/s   578 allocs
func BenchmarkKey(b *testing.B) {
	k, _ := New(DefaultConfig())
	bodies := []struct {
		name  string
		route Route
		body  []byte
	}{
		{"chat-4KB", RouteChat, benchChat(4 << 10)},
		{"chat-256KB", RouteChat, benchChat(256 << 10)},
		{"completions-4KB", RouteCompletions, benchCompletion(4 << 10)},
		{"completions-256KB", RouteCompletions, benchCompletion(256 << 10)},
		{"tokens-1K", RouteCompletions, benchTokens(1000)},
	}
	for _, bc := range bodies {
		if _, _, err := k.Key(bc.route, bc.body); err != nil || !json.Valid(bc.body) {
			b.Fatal(bc.name, err)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				k.Key(bc.route, bc.body)
			}
		})
	}
	for _, bc := range bodies[:2] {
		for _, alt := range []struct {
			name string
			fn   func([]byte, int) uint64
		}{{"json-unmarshal", unmarshalKey}, {"json-stream", streamKey}} {
			b.Run(alt.name+"/"+bc.name, func(b *testing.B) {
				b.SetBytes(int64(len(bc.body)))
				b.ReportAllocs()
				for b.Loop() {
					alt.fn(bc.body, DefaultMaxChars)
				}
			})
		}
	}
}

type benchMsg struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

func cutRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// chatKey is the alternatives' key from decoded values (string content
// only: enough to compare costs).
func chatKey(model string, msgs []benchMsg, max int) uint64 {
	var d xxhash.Digest
	d.Reset()
	d.WriteString(model)
	for _, m := range msgs {
		var s string
		json.Unmarshal(m.Content, &s)
		d.WriteString(m.Role)
		d.WriteString(cutRunes(s, max))
		if m.Role == "user" {
			break
		}
	}
	return d.Sum64()
}

func unmarshalKey(body []byte, max int) uint64 {
	var req struct {
		Model    string          `json:"model"`
		Messages []benchMsg      `json:"messages"`
		Tools    json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(body, &req) != nil {
		return 0
	}
	return chatKey(req.Model, req.Messages, max)
}

func streamKey(body []byte, max int) uint64 {
	d := json.NewDecoder(bytes.NewReader(body))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return 0
	}
	var model string
	var msgs []benchMsg
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return 0
		}
		switch t {
		case "model":
			if d.Decode(&model) != nil {
				return 0
			}
		case "messages":
			d.Token()
			user := false
			for d.More() {
				if user {
					var skip json.RawMessage
					if d.Decode(&skip) != nil {
						return 0
					}
					continue
				}
				var m benchMsg
				if d.Decode(&m) != nil {
					return 0
				}
				msgs = append(msgs, m)
				user = m.Role == "user"
			}
			d.Token()
		default:
			var skip json.RawMessage
			if d.Decode(&skip) != nil {
				return 0
			}
		}
	}
	return chatKey(model, msgs, max)
}

// BenchmarkHistory measures what the router adds to a completion's path
// for its History (prefix.History): the prompt's chained blocks
// (Keyer.Blocks) and the lookup (History.Extend), beside Key alone, in one
// run (compare rows of one run: the machine is shared). The key is the
// same on every call, so Extend finds the last prompt and replaces it, as
// for a conversation's next turn.
//
// On the shared 2-core machine (go test -run '^$' -bench History
// -benchmem ./prefix/, one run, the machine otherwise idle):
//
//	completions-4KB/key              1.7 µs  2.5 GB/s   0 allocs
//	completions-4KB/blocks+extend   11.6 µs  0.36 GB/s  0 allocs
//	completions-256KB/key             60 µs  4.4 GB/s   0 allocs
//	completions-256KB/blocks+extend  954 µs  0.27 GB/s  0 allocs
//
// Blocks reads the whole prompt as the engine would (escapes decoded,
// every chunk hashed), where Key stops after its window: on a 64K-token
// completion the History costs about a millisecond of router CPU, 16
// times its key. Hashing the prompt's raw JSON bytes instead would need no
// decoding; not done (docs/routing.md names --completion-history 0).
func BenchmarkHistory(b *testing.B) {
	k, _ := New(DefaultConfig())
	for _, size := range []int{4 << 10, 256 << 10} {
		body := benchCompletion(size)
		name := fmt.Sprintf("completions-%dKB", size>>10)
		b.Run(name+"/key", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				k.Key(RouteCompletions, body)
			}
		})
		b.Run(name+"/blocks+extend", func(b *testing.B) {
			h := NewHistory(DefaultHistoryKeys)
			var dst []uint64
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				dst, _ = k.Blocks(RouteCompletions, body, dst)
				h.Extend(1, dst)
			}
		})
	}
}
