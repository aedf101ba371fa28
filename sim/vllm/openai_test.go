package vllm

import (
	"context"
	"reflect"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
)

// TestOpenAIClientChoicesAndLogprobs drives the server over loopback with
// the official Go client: n choices, echo and logprobs decode into its
// types as a vLLM server's would. (The client reads the echoed prompt's
// null first logprob as 0, and drops top_logprobs whole for its null
// first entry, which vLLM sends too.)
func TestOpenAIClientChoicesAndLogprobs(t *testing.T) {
	s, _ := start(t, DefaultConfig())
	client := openai.NewClient(option.WithBaseURL(serve(t, s)+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()

	cmpl, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(s.cfg.Model),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("abcdefgh")},
		MaxTokens: openai.Int(2),
		N:         openai.Int(2),
		Echo:      openai.Bool(true),
		Logprobs:  openai.Int(1),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmpl.Choices) != 2 || cmpl.Usage.CompletionTokens != 4 {
		t.Fatalf("%d choices, usage %+v", len(cmpl.Choices), cmpl.Usage)
	}
	for i, c := range cmpl.Choices {
		lp := c.Logprobs
		if c.Index != int64(i) || c.Text != "abcdefgh the and" || !reflect.DeepEqual(lp.Tokens, []string{"abcd", "efgh", " the", " and"}) ||
			!reflect.DeepEqual(lp.TokenLogprobs, []float64{0, -0.5, -0.25, -0.5}) || !reflect.DeepEqual(lp.TextOffset, []int64{0, 4, 8, 12}) {
			t.Errorf("choice %d: %q %+v", i, c.Text, lp)
		}
	}

	chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:       s.cfg.Model,
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		MaxTokens:   openai.Int(2),
		N:           openai.Int(3),
		Logprobs:    openai.Bool(true),
		TopLogprobs: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(chat.Choices) != 3 {
		t.Fatalf("%d choices", len(chat.Choices))
	}
	for i, c := range chat.Choices {
		content := c.Logprobs.Content
		if c.Index != int64(i) || c.Message.Content != " the and" || len(content) != 2 || content[1].Token != " and" ||
			content[1].Logprob != -0.5 || len(content[1].TopLogprobs) != 2 || content[1].TopLogprobs[1].Token != " for" {
			t.Errorf("choice %d: %q %+v", i, c.Message.Content, content)
		}
	}
}
