package eval

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/workload"
)

// Model is the model name the study's requests carry.
const Model = "meta-llama/Llama-3.1-8B-Instruct"

// DefaultKey is the key design prefixring ships.
const DefaultKey = "shared-skip"

// keyDesign is a way to key requests: a keyer configuration, and whether
// the replicas learn shared prefixes with a gossiped sketch.
type keyDesign struct {
	cfg    prefix.Config
	sketch bool
	spread float64 // ring.Config.GroupSpread
	doc    string
}

var keyDesigns = map[string]keyDesign{
	"shared-skip": {cfg: prefix.DefaultConfig(), sketch: true, spread: ring.DefaultConfig().GroupSpread,
		doc: "prefixring's key: skip the deepest prefix the gossiped sketch marks as shared, then read one 256-character chunk (completions) or the first user message (chat); a shared part (system prompt, tools, shared preamble) of at least 1024 tokens with share s of the requests goes to about 8·n·s of the n engines, the request's key choosing among them"},
	"shared-skip-flat": {cfg: prefix.DefaultConfig(), sketch: true,
		doc: "shared-skip without the group spread: the request's key alone, over all engines"},
	"two-level-2": {cfg: prefix.DefaultConfig(), sketch: true, spread: 2,
		doc: "shared-skip with a tight group spread, about 2·n·s engines per shared part: a two-level key (the shared part chooses a small set of engines, sized by its traffic; the conversation chooses within it)"},
	"first-4096": {cfg: prefix.Config{MaxChars: 4096, PromptChars: 4096, SharedChars: 0},
		doc: "the key before the study: the first 4096 characters of the prompt (completions) or of the first user message (chat), no sketch"},
	"first-256": {cfg: prefix.Config{MaxChars: 4096, PromptChars: 256, SharedChars: 0},
		doc: "shared-skip without the sketch: the prompt's first 256 characters"},
	"first-2048": {cfg: prefix.Config{MaxChars: 4096, PromptChars: 2048, SharedChars: 0},
		doc: "the first 2048 characters of a completions prompt, no sketch"},
}

// KeyDesigns are the key designs the study can compare, the default first.
var KeyDesigns = []string{DefaultKey, "shared-skip-flat", "two-level-2", "first-4096", "first-2048", "first-256"}

// KeyDesign checks a key design's name.
func KeyDesign(name string) (string, error) {
	if d, ok := keyDesigns[name]; ok {
		return d.doc, nil
	}
	return "", fmt.Errorf("eval: unknown key design %q (known: %s)", name, strings.Join(KeyDesigns, ", "))
}

// Sketch gossip, modelled as the gossip package does it: each replica
// counts the requests it keys, publishes its summary every sketchInterval,
// and keys with the union of the summaries published so far (its own
// included), so replicas that heard the same publications key alike.
const (
	sketchInterval = time.Second
	sketchLatency  = 500 * time.Microsecond
	sketchSummary  = 256
)

// callKey keys the calls of one run, as the router replicas would: the
// production keyer on each request's JSON body, the n-th call through
// replica n mod R (the pickers spread requests the same way).
type callKey struct {
	design   keyDesign
	plain    *prefix.Keyer // the keyer without a sketch's table
	replicas []*sketchReplica
	turn     int
	next     time.Duration // the next round of publications
	blocks   bool          // the policy reads ring.Request.Blocks
	// sessions: every request carries its session's id, as a client
	// sending serve's session header does; the session policy follows it.
	sessions bool
	history  *prefix.History // the one router's, without replicas (nil with them)
	buf      []uint64
	// Keyed counts keyed requests with a sketch; Split those that some
	// replica would have keyed differently from the one that keyed it.
	Keyed, Split int
}

type sketchReplica struct {
	sketch    *prefix.Sketch
	published published
	heard     []published   // heard[j]: the summary of replica j it holds
	keyer     *prefix.Keyer // with the union of the summaries it heard
	inbox     []delivered
	history   *prefix.History // its completions' prompts, as the router keeps them
}

// published is what one replica publishes of its sketch.
type published struct {
	prefixes []prefix.SummaryEntry
	groups   prefix.GroupCounts
}

type delivered struct {
	at   time.Duration
	from int
	sum  published
}

func newCallKey(design string, routers int) (*callKey, error) {
	d, ok := keyDesigns[design]
	if !ok {
		_, err := KeyDesign(design)
		return nil, err
	}
	plain, err := prefix.New(d.cfg)
	if err != nil {
		return nil, err
	}
	ck := &callKey{design: d, plain: plain}
	if !d.sketch {
		ck.history = prefix.NewHistory(prefix.DefaultHistoryKeys)
		return ck, nil
	}
	for range routers {
		r := &sketchReplica{sketch: prefix.NewSketch(0, 0), keyer: plain, history: prefix.NewHistory(prefix.DefaultHistoryKeys)}
		ck.replicas = append(ck.replicas, r)
	}
	if err := ck.rekey(); err != nil {
		return nil, err
	}
	return ck, nil
}

// request turns a call arriving at at into what a picker sees: its key,
// group key and size in tokens as the router estimates it (body bytes / 4,
// and for a chat the bytes after the last assistant message / 4, for a
// completion those its replica's History finds beyond the key's last
// prompt), and, when the policy reads them, its prompt's blocks.
func (ck *callKey) request(c *workload.Call, at time.Duration) ring.Request {
	body, err := c.Body(Model, false)
	if err != nil {
		return ring.Request{}
	}
	route := prefix.RouteChat
	if c.API == workload.Completions {
		route = prefix.RouteCompletions
	}
	k := ck.plain
	var r *sketchReplica
	if ck.replicas != nil {
		ck.advance(at)
		r = ck.replicas[ck.turn%len(ck.replicas)]
		ck.turn++
		k = r.keyer
	}
	key, err := k.Request(route, body, ck.prefixes(r))
	if err != nil {
		return ring.Request{}
	}
	h := ck.history
	if r != nil {
		h = r.history
	}
	req := policy.BodyRequest(k, route, body, key, h, ck.blocks)
	if ck.sessions {
		// As serve keys a request carrying the session header.
		req = ring.Request{Key: prefix.SessionKey(Model, "", strconv.Itoa(c.Session)), Keyed: true, Session: true, Tokens: req.Tokens}
	}
	if r != nil {
		r.sketch.Observe(key.Prefixes)
		if req.Keyed {
			r.sketch.ObserveGroup(key.Group)
		}
		ck.Keyed++
		for _, o := range ck.replicas {
			if other, _, _ := o.keyer.Key(route, body); other != key.Hash {
				ck.Split++
				break
			}
		}
	}
	return req
}

// prefixes is the buffer Request fills for replica r's sketch (nil: none).
func (ck *callKey) prefixes(r *sketchReplica) []uint64 {
	if r == nil {
		return nil
	}
	if ck.buf == nil {
		ck.buf = make([]uint64, 0, 160)
	}
	return ck.buf[:0]
}

// advance publishes and delivers the summaries due by now.
func (ck *callKey) advance(now time.Duration) {
	round := false
	for ck.next <= now {
		round = true
		for i, r := range ck.replicas {
			g, n := r.sketch.Groups(sketchSummary)
			r.published = published{r.sketch.Summary(sketchSummary), prefix.GroupCounts{Groups: g, Requests: n}}
			for j, o := range ck.replicas {
				if j != i {
					o.inbox = append(o.inbox, delivered{at: ck.next + sketchLatency, from: i, sum: r.published})
				}
			}
		}
		ck.next += sketchInterval
		ck.deliver(ck.next-sketchInterval, true)
	}
	ck.deliver(now, round)
}

func (ck *callKey) deliver(now time.Duration, changed bool) {
	for _, r := range ck.replicas {
		keep := r.inbox[:0]
		for _, d := range r.inbox {
			if d.at <= now {
				r.heardFrom(d.from, d.sum, len(ck.replicas))
				changed = true
				continue
			}
			keep = append(keep, d)
		}
		r.inbox = keep
	}
	if changed {
		_ = ck.rekey()
	}
}

func (r *sketchReplica) heardFrom(from int, sum published, n int) {
	if r.heard == nil {
		r.heard = make([]published, n)
	}
	r.heard[from] = sum
}

// rekey rebuilds each replica's keyer from the summaries it holds.
func (ck *callKey) rekey() error {
	for i, r := range ck.replicas {
		sums := [][]prefix.SummaryEntry{r.published.prefixes}
		counts := []prefix.GroupCounts{r.published.groups}
		for j, h := range r.heard {
			if j != i {
				sums, counts = append(sums, h.prefixes), append(counts, h.groups)
			}
		}
		cfg := ck.design.cfg
		cfg.Common = prefix.MergeSummaries(r.sketch.Fanout(), sums...).WithShares(prefix.MergeShares(counts...))
		k, err := prefix.New(cfg)
		if err != nil {
			return err
		}
		r.keyer = k
	}
	return nil
}
