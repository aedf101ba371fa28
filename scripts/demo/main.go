// Command demo sends the same multi-turn chat traffic through prefixring
// replicas (alternating between them) to one fleet of simulated vLLM
// servers and, picking a server at random as a Kubernetes Service does, to a
// second, identical fleet; it prints what each did to the prefix cache and
// to time to first token. Run it through `make demo`.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type result struct {
	via, endpoint, decision string
	prompt, cached          int
	ttft                    time.Duration
}

func main() {
	router := flag.String("router", "", "comma-separated base URLs of the prefixring replicas; requests alternate between them")
	direct := flag.String("direct", "", "comma-separated base URLs of the fleet that gets random routing")
	convs := flag.Int("conversations", 12, "concurrent conversations")
	turns := flag.Int("turns", 6, "turns per conversation")
	flag.Parse()
	if *router == "" || *direct == "" {
		flag.Usage()
		os.Exit(2)
	}
	system := strings.Repeat("You are the support assistant of a hardware store. Answer precisely and cite the aisle. ", 10)

	fmt.Printf("%d conversations x %d turns; a %d-character shared system prompt; each turn pastes a %d-character document; max_tokens %d\n\n",
		*convs, *turns, len(system), len(document(0, 0)), maxTokens)
	urls := strings.Split(*direct, ",")
	replicas := strings.Split(*router, ",")
	var next atomic.Int64
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	modes := []struct {
		name string
		base func() string
	}{
		// Clients alternate between the replicas, as DNS round-robin
		// spreads them: each conversation's turns reach both.
		{"prefixring", func() string { return replicas[int(next.Add(1))%len(replicas)] }},
		// A Kubernetes Service (kube-proxy in iptables mode) picks a
		// backend at random per connection.
		{"random", func() string { mu.Lock(); defer mu.Unlock(); return urls[rng.IntN(len(urls))] }},
	}
	fmt.Printf("%-12s %9s %13s %14s %14s\n", "routing", "requests", "cached share", "TTFT p50 (ms)", "TTFT p90 (ms)")
	for _, m := range modes {
		res := run(m.base, system, *convs, *turns)
		var prompt, cached int
		var ttfts []time.Duration
		for _, r := range res {
			prompt += r.prompt
			cached += r.cached
			ttfts = append(ttfts, r.ttft)
		}
		slices.Sort(ttfts)
		fmt.Printf("%-12s %9d %12.1f%% %14.1f %14.1f\n", m.name, len(res), 100*float64(cached)/float64(max(prompt, 1)),
			ms(ttfts[len(ttfts)/2]), ms(ttfts[len(ttfts)*9/10]))
		if m.name == "prefixring" {
			printAffinity(res, *turns)
		}
	}
}

const maxTokens = 128

// document is the text a user pastes into turn t of conversation c: the
// part of the prompt that only that conversation's history shares.
func document(c, t int) string {
	var b strings.Builder
	for i := range 120 {
		fmt.Fprintf(&b, "Item %d-%d-%02d: hex bolt M%d, zinc, box of %d. ", c, t, i, 4+i%8, 10*(1+i%5))
	}
	return b.String()
}

func port(url string) string { return url[strings.LastIndex(url, ":")+1:] }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// printAffinity shows where every conversation's turns went, and counts
// how many stayed on their conversation's most-used endpoint.
func printAffinity(res []result, turns int) {
	fmt.Println("  each turn: the replica it went through -> the endpoint it reached (X-Prefixring-Endpoint), decision:")
	convs, together, stayed, spilled := 0, 0, 0, 0
	for c := 0; (c+1)*turns <= len(res); c++ {
		var cells []string
		count := map[string]int{}
		for _, r := range res[c*turns : (c+1)*turns] {
			cells = append(cells, fmt.Sprintf("%s->%s %-5s", port(r.via), port(r.endpoint), r.decision))
			count[r.endpoint]++
			if r.decision != "home" {
				spilled++
			}
		}
		most := 0
		for _, n := range count {
			most = max(most, n)
		}
		convs++
		stayed += most
		if most == turns {
			together++
		}
		fmt.Printf("    conversation %2d: %s\n", c, strings.Join(cells, " | "))
	}
	fmt.Printf("  all %d conversations shown: %d of %d turns on their conversation's most-used endpoint; "+
		"%d of %d conversations entirely on one endpoint; %d turns not at home (spill or fallback)\n",
		convs, stayed, convs*turns, together, convs, spilled)
}

// run plays every conversation concurrently, turn by turn, and returns the
// results ordered by conversation then turn.
func run(base func() string, system string, convs, turns int) []result {
	out := make([]result, convs*turns)
	var wg sync.WaitGroup
	for c := range convs {
		wg.Go(func() {
			// Conversations start staggered, as users arrive.
			time.Sleep(time.Duration(c) * 150 * time.Millisecond)
			msgs := []message{{"system", system}}
			for t := range turns {
				msgs = append(msgs, message{"user", document(c, t) + fmt.Sprintf("\nQuestion %d: which of these do you stock?", t)})
				r, answer := chat(base(), msgs)
				out[c*turns+t] = r
				msgs = append(msgs, message{"assistant", answer})
			}
		})
	}
	wg.Wait()
	return out
}

// chat streams one completion and measures its time to first token.
func chat(base string, msgs []message) (result, string) {
	body, _ := json.Marshal(map[string]any{
		"model": "meta-llama/Llama-3.1-8B-Instruct", "messages": msgs, "max_tokens": maxTokens,
		"stream": true, "stream_options": map[string]bool{"include_usage": true},
	})
	start := time.Now()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		log.Fatalf("%s: status %d", base, resp.StatusCode)
	}
	r := result{via: base, endpoint: resp.Header.Get("X-Prefixring-Endpoint"), decision: resp.Header.Get("X-Prefixring-Decision")}
	if r.endpoint == "" {
		r.endpoint = base
	}
	var answer strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens int `json:"prompt_tokens"`
				Details      *struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(data), &chunk) != nil {
			continue
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			if r.ttft == 0 {
				r.ttft = time.Since(start)
			}
			answer.WriteString(chunk.Choices[0].Delta.Content)
		}
		if chunk.Usage != nil {
			r.prompt = chunk.Usage.PromptTokens
			if chunk.Usage.Details != nil {
				r.cached = chunk.Usage.Details.Cached
			}
		}
	}
	return r, answer.String()
}
