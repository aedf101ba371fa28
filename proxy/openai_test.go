package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
)

// TestOpenAIClientStreamsThroughRouter drives the router with the official
// Go client: a streamed chat completion arrives chunk by chunk, intact.
func TestOpenAIClientStreamsThroughRouter(t *testing.T) {
	f := newFixture(t, 3)
	words := []string{"Paris", " is", " the", " capital", "."}
	for _, u := range f.ups {
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			for i, word := range words {
				fmt.Fprintf(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"llama","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", word)
				if i == len(words)-1 {
					fmt.Fprint(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"llama","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n")
				}
				w.(http.Flusher).Flush()
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		})
	}
	client := openai.NewClient(option.WithBaseURL(f.srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "llama",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You answer geography questions."),
			openai.UserMessage("What is the capital of France?"),
		},
	})
	var text strings.Builder
	chunks := 0
	finish := ""
	for stream.Next() {
		c := stream.Current()
		chunks++
		if len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
			if c.Choices[0].FinishReason != "" {
				finish = c.Choices[0].FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != "Paris is the capital." || chunks != 6 || finish != "stop" {
		t.Fatalf("got %q in %d chunks, finish %q", text.String(), chunks, finish)
	}
	waitIdle(t, f) // every lease is given back (settled ones weigh 0 in Total)
}
