// Command analysis compares affinity-key designs on synthetic and Mooncake
// workloads; docs/prefix-key.md records its output. It is not part of the
// router: run it with
//
//	go run ./sim/keyanalysis -traces /work/shared/traces/mooncake
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/cespare/xxhash/v2"
	"github.com/prefixring/prefixring/prefix"
)

// keying is one key design under test. key is called once per request in
// arrival order (adaptive designs learn as they go).
type keying struct {
	name string
	key  func(r *req) uint64
}

func keyer(maxChars int) *prefix.Keyer {
	k, err := prefix.New(prefix.Config{MaxChars: maxChars})
	if err != nil {
		log.Fatal(err)
	}
	return k
}

func mustKey(k *prefix.Keyer, route prefix.Route, body []byte) uint64 {
	key, _, err := k.Key(route, body)
	if err != nil {
		log.Fatalf("%v: %s", err, body[:min(200, len(body))])
	}
	return key
}

func plain(n int) keying {
	k := keyer(n)
	return keying{fmt.Sprintf("plain-%d", n), func(r *req) uint64 { return mustKey(k, prefix.RouteCompletions, r.prompt) }}
}

func structured(n int) keying {
	k := keyer(n)
	return keying{fmt.Sprintf("structured-%d", n), func(r *req) uint64 { return mustKey(k, prefix.RouteChat, r.chat) }}
}

// kubeAI hashes the first 100 characters of the first user message.
func kubeAI() keying {
	return keying{"kubeai-user-100", func(r *req) uint64 {
		s := []rune(r.firstUser)
		return xxhash.Sum64String(model + "\x00" + string(s[:min(100, len(s))]))
	}}
}

// adaptive learns the Common table online, as a router replica would: it
// keys each request with the table built so far, then counts the request's
// anchor prefixes; the table is rebuilt every 256 requests from prefixes
// that at least share of the requests so far start with.
func adaptive(route prefix.Route, n int, share float64) keying {
	base := keyer(n)
	cur := base
	tally := prefix.NewTally()
	var buf []uint64
	seen := 0
	name := fmt.Sprintf("plain-%d+common>=%.0f%%", n, share*100)
	if route == prefix.RouteChat {
		name = fmt.Sprintf("structured-%d+common>=%.0f%%", n, share*100)
	}
	return keying{name, func(r *req) uint64 {
		body := r.prompt
		if route == prefix.RouteChat {
			body = r.chat
		}
		key := mustKey(cur, route, body)
		buf, _ = base.Prefixes(route, body, 64, buf[:0])
		tally.Observe(buf)
		if seen++; seen%256 == 0 {
			k, err := prefix.New(prefix.Config{MaxChars: n, Common: tally.Common(share, 16)})
			if err != nil {
				log.Fatal(err)
			}
			cur = k
		}
		return key
	}}
}

func designs() []keying {
	return []keying{
		plain(512), plain(1024), plain(2048), plain(4096), plain(8192),
		kubeAI(),
		structured(1024), structured(2048), structured(4096),
		adaptive(prefix.RouteCompletions, 1024, 0.5),
		adaptive(prefix.RouteCompletions, 2048, 0.5),
		adaptive(prefix.RouteCompletions, 2048, 0.1),
		adaptive(prefix.RouteCompletions, 4096, 0.5),
		adaptive(prefix.RouteChat, 2048, 0.5),
		adaptive(prefix.RouteChat, 4096, 0.5),
	}
}

func main() {
	traces := flag.String("traces", "/work/shared/traces/mooncake", "directory with conversation_trace.jsonl and synthetic_trace.jsonl")
	endpoints := flag.Int("endpoints", 8, "endpoints in the bounded-load simulation")
	flag.Parse()

	type workload struct {
		name string
		reqs func() ([]*req, error)
	}
	workloads := []workload{
		{"(a) shared-prefix groups: 8 system prompts of 2-8K chars x 150 questions", func() ([]*req, error) { return sharedPrefixGroups(8, 150), nil }},
		{"(a1) one shared system prompt of 2-8K chars x 1200 questions", func() ([]*req, error) { return sharedPrefixGroups(1, 1200), nil }},
		{"(b) multi-turn chats: 400 conversations, 1-8 turns", func() ([]*req, error) { return multiTurn(400), nil }},
		{"(c1) Mooncake conversation_trace (12,031 requests)", func() ([]*req, error) {
			return mooncake(filepath.Join(*traces, "conversation_trace.jsonl"), 20000, 0)
		}},
		{"(c3) Mooncake conversation_trace behind a fixed 2048-char preamble (4096 shared chars)", func() ([]*req, error) {
			return mooncake(filepath.Join(*traces, "conversation_trace.jsonl"), 20000, 2048)
		}},
		{"(c2) Mooncake synthetic_trace (3,993 requests)", func() ([]*req, error) {
			return mooncake(filepath.Join(*traces, "synthetic_trace.jsonl"), 20000, 0)
		}},
	}
	for _, w := range workloads {
		reqs, err := w.reqs()
		if err != nil {
			log.Fatal(err)
		}
		ideal := idealHit(reqs)
		fmt.Printf("\n%s: %d requests, ideal hit (one server) %.3f\n\n", w.name, len(reqs), ideal)
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 1, ' ', tabwriter.AlignRight|tabwriter.Debug)
		fmt.Fprintf(tw, "key\tkeys\ttop key share\tmulti-turn convs on one key\tconvs sharing a key\thit, key=server\thit, %d endpoints CHWBL\t\n", *endpoints)
		for _, d := range designs() {
			keys := make([]uint64, len(reqs))
			for i, r := range reqs {
				keys[i] = d.key(r)
			}
			m := measure(reqs, keys, *endpoints)
			fmt.Fprintf(tw, "%s\t%d\t%.3f\t%s\t%.3f\t%.3f\t%.3f\t\n", d.name, m.keys, m.top, m.stable, m.collide, m.hitPerKey, m.hitCHWBL)
		}
		tw.Flush()
	}
}
