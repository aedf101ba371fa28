package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// req is one request of a workload, in arrival order.
type req struct {
	conv      int      // conversation (or, for traces, prefix chain) it belongs to
	chat      []byte   // /v1/chat/completions body
	prompt    []byte   // /v1/completions body with the rendered prompt
	firstUser string   // text of the first user message
	blocks    []uint64 // chained ids of the prompt's cache blocks
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

const model = "meta-llama/Llama-3.1-8B-Instruct"

// vocab is a fixed list of pseudo-words; text drawn from it is
// deterministic for a seed and unlikely to repeat across seeds.
var vocab = func() []string {
	rng := rand.New(rand.NewPCG(42, 42))
	v := make([]string, 4096)
	for i := range v {
		b := make([]byte, 2+rng.IntN(8))
		for j := range b {
			b[j] = byte('a' + rng.IntN(26))
		}
		v[i] = string(b)
	}
	return v
}()

// words returns exactly n characters of pseudo-words from rng.
func words(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		b.WriteString(vocab[rng.IntN(len(vocab))])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// render builds both bodies of a chat and the chained block ids of its
// rendered prompt (blockChars characters per block).
func render(conv int, msgs []message, blockChars int) *req {
	var text strings.Builder
	first := ""
	for _, m := range msgs {
		fmt.Fprintf(&text, "<|%s|>\n%s\n", m.Role, m.Content)
		if first == "" && m.Role == "user" {
			first = m.Content
		}
	}
	chat, _ := json.Marshal(map[string]any{"model": model, "messages": msgs, "temperature": 0.7})
	prompt, _ := json.Marshal(map[string]any{"model": model, "prompt": text.String(), "max_tokens": 256})
	return &req{conv: conv, chat: chat, prompt: prompt, firstUser: first, blocks: chain(text.String(), blockChars)}
}

func chain(s string, size int) []uint64 {
	var ids []uint64
	var prev [8]byte
	for i := 0; i < len(s); i += size {
		d := xxhash.New()
		d.Write(prev[:])
		d.WriteString(s[i:min(len(s), i+size)])
		id := d.Sum64()
		binary.LittleEndian.PutUint64(prev[:], id)
		ids = append(ids, id)
	}
	return ids
}

// sharedPrefixGroups is workload (a): groups of single-turn requests that
// share a long system prompt, each with its own question.
func sharedPrefixGroups(groups, perGroup int) []*req {
	rng := seeded(1)
	systems := make([]string, groups)
	for g := range systems {
		systems[g] = words(rng, 2048+rng.IntN(6144))
	}
	var out []*req
	for i := 0; i < groups*perGroup; i++ {
		g := i % groups
		q := words(rng, 80+rng.IntN(520))
		out = append(out, render(i, []message{{"system", systems[g]}, {"user", q}}, 256))
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// multiTurn is workload (b): conversations of 1-8 turns, interleaved. Two
// apps with their own system prompts (600 and 2500 characters) and a fifth
// of conversations without one; a third of first messages open with the
// same 150-character instruction; first messages are 20-1500 characters,
// assistant replies 200-2000, later user messages 20-600.
func multiTurn(convs int) []*req {
	rng := seeded(2)
	apps := []string{words(rng, 600), words(rng, 2500), ""}
	template := "Summarize the following document in three bullet points and list any open questions it raises. " + words(rng, 52)
	type conv struct {
		msgs  []message
		turns int
	}
	cs := make([]*conv, convs)
	var order []int
	for i := range cs {
		c := &conv{turns: 1 + rng.IntN(8)}
		if sys := apps[rng.IntN(3)]; sys != "" {
			c.msgs = append(c.msgs, message{"system", sys})
		}
		first := words(rng, 20+rng.IntN(1480))
		if rng.IntN(3) == 0 {
			first = template + first
		}
		c.msgs = append(c.msgs, message{"user", first})
		cs[i] = c
		for range c.turns {
			order = append(order, i)
		}
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var out []*req
	for _, i := range order {
		c := cs[i]
		out = append(out, render(i, c.msgs, 256))
		c.msgs = append(c.msgs, message{"assistant", words(rng, 200+rng.IntN(1800))},
			message{"user", words(rng, 20+rng.IntN(580))})
	}
	return out
}

// traceRow is one line of a Mooncake trace.
type traceRow struct {
	InputLength int      `json:"input_length"`
	HashIDs     []uint64 `json:"hash_ids"`
}

// mooncake renders a trace: hash id h becomes 512 tokens (2048 characters)
// of pseudo-words seeded by h, the last block input_length-512*(n-1) tokens
// of it. The prompt is sent as a completion and as a chat with one user
// message; the router learns nothing the text does not say. Only the first
// maxChars characters are rendered: no key reads further.
//
// preamble > 0 puts that many characters of one fixed text before every
// prompt (an application's instructions pasted into each request), with its
// own block id for the hit accounting.
func mooncake(path string, maxChars, preamble int) ([]*req, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []traceRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r traceRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	convs := traceConversations(rows)
	out := make([]*req, len(rows))
	shared := words(seeded(1<<62), preamble)
	for i, r := range rows {
		var text strings.Builder
		text.WriteString(shared)
		blocks := r.HashIDs
		if preamble > 0 {
			blocks = append([]uint64{1 << 62}, blocks...)
		}
		for j, h := range r.HashIDs {
			if text.Len() >= maxChars {
				break
			}
			n := 2048
			if j == len(r.HashIDs)-1 {
				n = min(2048, max(1, 4*(r.InputLength-512*j)))
			}
			text.WriteString(words(seeded(h), 2048)[:n])
		}
		s := text.String()[:min(text.Len(), maxChars)]
		chat, _ := json.Marshal(map[string]any{"model": model, "messages": []message{{"user", s}}})
		prompt, _ := json.Marshal(map[string]any{"model": model, "prompt": s})
		out[i] = &req{conv: convs[i], chat: chat, prompt: prompt, firstUser: s, blocks: blocks}
	}
	return out, nil
}

// traceConversations groups trace requests into conversations: a request
// continues an earlier one if it starts with all of that request's full
// blocks, at least two of them (hash ids are chained, so the last full
// block's id stands for the whole prefix). One shared block is not enough:
// in the conversation trace every request shares block 0.
func traceConversations(rows []traceRow) []int {
	parent := make([]int, len(rows))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	lastFull := map[uint64]int{}
	for i, r := range rows {
		for j := 1; j < len(r.HashIDs); j++ {
			if p, ok := lastFull[r.HashIDs[j]]; ok {
				parent[find(p)] = find(i)
			}
		}
		if n := len(r.HashIDs) - 1; n >= 2 {
			lastFull[r.HashIDs[n-1]] = i
		}
	}
	out := make([]int, len(rows))
	for i := range out {
		out[i] = find(i)
	}
	return out
}
