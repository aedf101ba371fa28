package engine

import (
	"math"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// The stand-in tokenizer: text is cut into chunks of CharsPerToken bytes from
// its start and each chunk becomes one token id in [0, VocabSize). About four
// characters per token is the usual figure for English text under BPE
// tokenizers such as Llama 3's; the ids carry no meaning, but the same text
// always yields the same ids, and two texts sharing a prefix share the tokens
// of every whole chunk in it.
const (
	CharsPerToken = 4
	VocabSize     = 128256 // Llama 3's vocabulary size (config.json vocab_size)
)

// Tokenize returns the stand-in token ids of text.
func Tokenize(text string) []uint32 {
	out := make([]uint32, 0, CountTokens(text))
	for i := 0; i < len(text); i += CharsPerToken {
		chunk := text[i:min(i+CharsPerToken, len(text))]
		out = append(out, uint32(xxhash.Sum64String(chunk)%VocabSize))
	}
	return out
}

// TokenizeScaled is Tokenize with charsPerToken characters a token on
// average instead of CharsPerToken: token k ends at byte round((k+1) ·
// charsPerToken). Like Tokenize it depends only on the text from its
// start, so texts sharing a prefix share the tokens of every whole token
// in it; at CharsPerToken it is Tokenize. The fleet simulator uses it to
// make the engine's count depart from the router's bytes/4 estimate as a
// real tokenizer's does (text kinds whose tokens are shorter or longer than
// four bytes).
func TokenizeScaled(text string, charsPerToken float64) []uint32 {
	if charsPerToken == CharsPerToken || !(charsPerToken > 0) {
		return Tokenize(text)
	}
	out := make([]uint32, 0, int(float64(len(text))/charsPerToken)+1)
	for i, k := 0, 1; i < len(text); k++ {
		j := min(max(int(math.Round(float64(k)*charsPerToken)), i+1), len(text))
		out = append(out, uint32(xxhash.Sum64String(text[i:j])%VocabSize))
		i = j
	}
	return out
}

// CountTokens is len(Tokenize(text)) without the allocation.
func CountTokens(text string) int {
	return (len(text) + CharsPerToken - 1) / CharsPerToken
}

// Message is one chat turn.
type Message struct {
	Role    string
	Content string
}

// RenderChat applies a Llama-3-like chat template and adds the assistant
// header, so that the turns of one conversation share a prefix. tools, a
// JSON array of tool definitions or "", is rendered into the system block
// after the system message's text, as real templates render a request's
// "tools" into the prompt (Qwen 2.5's in the system message, Llama 3.1's
// in the first user message): an engine prefills them with every request
// and its prefix cache holds them like any other text. The block is
// opened for them when the conversation has no system message.
func RenderChat(msgs []Message, tools string) string {
	var b strings.Builder
	b.WriteString("<|begin_of_text|>")
	if tools != "" && tools != "[]" {
		b.WriteString("<|start_header_id|>system<|end_header_id|>\n\n")
		if len(msgs) > 0 && msgs[0].Role == "system" {
			b.WriteString(msgs[0].Content)
			b.WriteString("\n\n")
			msgs = msgs[1:]
		}
		b.WriteString("# Tools\n\n")
		b.WriteString(tools)
		b.WriteString("<|eot_id|>")
	}
	for _, m := range msgs {
		b.WriteString("<|start_header_id|>")
		b.WriteString(m.Role)
		b.WriteString("<|end_header_id|>\n\n")
		b.WriteString(m.Content)
		b.WriteString("<|eot_id|>")
	}
	b.WriteString(GenerationPrompt)
	return b.String()
}

// GenerationPrompt ends a rendered chat: the assistant's header, which a
// template adds with add_generation_prompt (vLLM's default).
const GenerationPrompt = "<|start_header_id|>assistant<|end_header_id|>\n\n"

// fillerWords are output tokens: CharsPerToken characters each, so that the
// stand-in tokenizer counts generated text exactly as it was generated.
var fillerWords = [...]string{
	" the", " and", " for", " are", " but", " not", " you", " all",
	" any", " can", " had", " her", " was", " one", " our", " out",
}

// FillerToken is the text of output token i (0-based) of any request.
func FillerToken(i int) string { return fillerWords[i%len(fillerWords)] }

// FillerText is the text of output tokens [from, to).
func FillerText(from, to int) string {
	var b strings.Builder
	b.Grow((to - from) * CharsPerToken)
	for i := from; i < to; i++ {
		b.WriteString(FillerToken(i))
	}
	return b.String()
}

// TraceBlockTokens appends to dst the first n tokens of the fixed block that a
// trace hash_id stands for (Mooncake traces give each 512-token block of a
// prompt an id; equal ids mean equal blocks). The tokens are a pure function
// of (hashID, position), so shared ids really share tokens.
func TraceBlockTokens(dst []uint32, hashID uint64, n int) []uint32 {
	seed := splitmix64(hashID)
	for j := 0; j < n; j++ {
		dst = append(dst, uint32(splitmix64(seed+uint64(j))%VocabSize))
	}
	return dst
}

// AppendTraceBlock appends the first n tokens of trace block hashID to c
// without materializing more than one engine block of tokens at a time.
func (c *Chain) AppendTraceBlock(hashID uint64, n int) {
	var buf [64]uint32
	seed := splitmix64(hashID)
	for j := 0; j < n; j += len(buf) {
		k := min(len(buf), n-j)
		for i := 0; i < k; i++ {
			buf[i] = uint32(splitmix64(seed+uint64(j+i)) % VocabSize)
		}
		c.Append(buf[:k]...)
	}
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
