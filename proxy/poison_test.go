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

// TestPoisonPromptEjectsNothing: a prompt every engine answers with 500,
// sent 100 times by the official Go client with its default retries (2),
// is the request's fault, not the engines': it ejects none of them, and
// other clients keep 100% success. (The engines ask for Retry-After-Ms: 0
// so the SDK's backoff does not make the test slow; the retry count is the
// SDK's default.) Before the fix every 5xx counted against its endpoint
// and affinity sent each retry to the same one: the first call ejected
// the key's home, the next its neighbour, and the fleet answered 503.
func TestPoisonPromptEjectsNothing(t *testing.T) {
	const poison = "POISON: this prompt crashes the tokenizer"
	f := newFixture(t, 3)
	for _, u := range f.ups {
		name := u.name
		u.setHandler(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if strings.Contains(string(b), "POISON") {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After-Ms", "0")
				w.WriteHeader(500)
				io.WriteString(w, openAI500)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"llama","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`, name)
		})
	}
	client := openai.NewClient(option.WithBaseURL(f.srv.URL+"/v1/"), option.WithAPIKey("unused"))
	ask := func(prompt string) error {
		_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model:    "llama",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are helpful."), openai.UserMessage(prompt)},
		})
		return err
	}
	poisoned := int64(0)
	for range 100 {
		if ask(poison) == nil {
			t.Fatal("the poison prompt was answered")
		}
	}
	for _, u := range f.ups {
		poisoned += u.served.Load()
	}
	ejected := 0
	for _, h := range f.endpoints.Health() {
		if h.Ejected {
			ejected++
		}
	}
	ok := 0
	for i := range 100 {
		if err := ask(fmt.Sprintf("question %d", i)); err == nil {
			ok++
		}
	}
	t.Logf("poison: %d tries reached engines; ejected %d of 3; others: %d of 100 succeeded", poisoned, ejected, ok)
	if poisoned != 300 {
		t.Fatalf("the SDK's default retries: want 300 tries of the poison prompt, got %d", poisoned)
	}
	if ejected != 0 || ok != 100 {
		t.Fatalf("the poison prompt ejected %d of 3 endpoints; other clients: %d of 100 succeeded", ejected, ok)
	}
}
