package vllm

import (
	"unicode/utf8"

	"github.com/prefixring/prefixring/sim/engine"
)

// Simulated logprobs. No model computes them: each token, generated or
// prompt, is its position's most likely one, with a logprob from a short
// fixed cycle; its r-th alternative is 2r lower. The values are exact in
// binary, and each position's probabilities sum to under 1.
var sampledLogprobs = [...]float64{-0.25, -0.5, -0.375, -0.1875, -0.3125}

// alternativeWords are the alternatives' text: the filler's words, then
// others, so that a position has maxLogprobs alternatives besides its token.
var alternativeWords = func() []string {
	var w []string
	for i := range 16 {
		w = append(w, engine.FillerToken(i))
	}
	return append(w, " who", " its", " has", " his", " may", " new", " now", " two")
}()

// scored is one token and its top alternatives, itself first.
type scored struct {
	text string
	top  []alternative // nil: no logprob (an echoed prompt's first token)
}

type alternative struct {
	text    string
	logprob float64
}

// score lists the token text at position pos with k entries: the token
// and k-1 alternatives that differ from it.
func score(text string, pos, k int) scored {
	lp := sampledLogprobs[pos%len(sampledLogprobs)]
	top := make([]alternative, 0, k)
	if k > 0 {
		top = append(top, alternative{text, lp})
	}
	for i := 1; len(top) < k; i++ {
		if w := alternativeWords[(pos+i)%len(alternativeWords)]; w != text {
			top = append(top, alternative{w, lp - 2*float64(len(top))})
		}
	}
	return scored{text: text, top: top}
}

// choiceTokens scores a choice's tokens: with from == 0, the echoed
// prompt's (its first has no logprob), then output tokens [from, to).
// Each position lists max(logprobs, 1) entries, as vLLM's dict of the
// token and its top logprobs holds (the token is among them).
func (c *call) choiceTokens(from, to int) []scored {
	k := max(c.logprobs, 1)
	var out []scored
	if from == 0 {
		for j, piece := range c.pieces {
			if j == 0 {
				out = append(out, scored{text: piece})
				continue
			}
			out = append(out, score(piece, j, k))
		}
	}
	if c.hideOutput {
		return out
	}
	for i := from; i < to; i++ {
		out = append(out, score(engine.FillerToken(i), i, k))
	}
	return out
}

// completionLogprobsOf is vLLM's completion shape: top_logprobs holds
// all of a position's entries, and text_offset counts characters from
// offset.
func completionLogprobsOf(toks []scored, offset int) *completionLogprobs {
	lp := &completionLogprobs{
		TextOffset:    make([]int, 0, len(toks)),
		TokenLogprobs: make([]*float64, 0, len(toks)),
		Tokens:        make([]string, 0, len(toks)),
		TopLogprobs:   make([]map[string]float64, 0, len(toks)),
	}
	for _, t := range toks {
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += utf8.RuneCountInString(t.text)
		lp.Tokens = append(lp.Tokens, t.text)
		if t.top == nil {
			lp.TokenLogprobs = append(lp.TokenLogprobs, nil)
			lp.TopLogprobs = append(lp.TopLogprobs, nil)
			continue
		}
		lp.TokenLogprobs = append(lp.TokenLogprobs, ptr(t.top[0].logprob))
		top := make(map[string]float64, len(t.top))
		for _, a := range t.top {
			top[a.text] = a.logprob
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
	}
	return lp
}

// chatLogprobsOf is vLLM's chat shape: each token's logprob and bytes,
// and its first k entries (itself, then alternatives) as top_logprobs.
func chatLogprobsOf(toks []scored, k int) *chatLogprobs {
	lp := &chatLogprobs{Content: make([]chatTokenLogprob, 0, len(toks))}
	for _, t := range toks {
		e := chatTokenLogprob{Token: t.text, Logprob: t.top[0].logprob, Bytes: bytesOf(t.text),
			TopLogprobs: make([]chatTopLogprob, 0, k)}
		for _, a := range t.top[:k] {
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: a.text, Logprob: a.logprob, Bytes: bytesOf(a.text)})
		}
		lp.Content = append(lp.Content, e)
	}
	return lp
}

// bytesOf is a token's UTF-8 bytes as JSON numbers (a []byte would
// marshal as base64).
func bytesOf(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}
