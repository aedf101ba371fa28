package workload

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prefixring/prefixring/sim/engine"
)

// Each turn of a conversation carries the previous turn's request and answer
// as its prefix, in the engine's text as in the JSON: the prefix cache can
// reuse all of it.
func TestTurnsExtendTheirHistory(t *testing.T) {
	for _, api := range []API{Chat, Completions} {
		ss, err := MultiTurn{Conversations: 3, Turns: 4, SystemPrompts: 2, SystemTokens: 50, UserTokens: 10,
			OutputTokens: 8, Think: time.Second, Rate: 1, API: api, Seed: 3}.Sessions()
		if err != nil {
			t.Fatal(err)
		}
		s := &ss[1]
		var answers []string
		prev := ""
		for k := range s.Turns {
			c := s.Call(k, answers)
			text := c.EngineText()
			if k > 0 && !strings.HasPrefix(text, prev+answers[k-1]) {
				t.Fatalf("%s turn %d does not extend turn %d and its answer", api, k, k-1)
			}
			if c.API != api || c.MaxTokens != 8 || c.Session != 1 || c.Turn != k {
				t.Fatalf("%s turn %d: %+v", api, k, c)
			}
			prev = text
			answers = append(answers, SimAnswer(c.MaxTokens))
		}
	}
}

func TestBodyIsTheOpenAIRequest(t *testing.T) {
	ss, err := DefaultAgentic().Sessions()
	if err != nil {
		t.Fatal(err)
	}
	c := ss[0].Call(2, []string{"a1", "a2"})
	b, err := c.Body("m", true)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Model         string `json:"model"`
		MaxTokens     int    `json:"max_tokens"`
		Stream        bool   `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Messages []struct{ Role, Content string } `json:"messages"`
		Tools    []struct {
			Type     string                `json:"type"`
			Function struct{ Name string } `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	roles := []string{}
	for _, m := range got.Messages {
		roles = append(roles, m.Role)
	}
	if got.Model != "m" || !got.Stream || !got.StreamOptions.IncludeUsage || got.MaxTokens != 64 ||
		!reflect.DeepEqual(roles, []string{"system", "user", "assistant", "tool", "assistant", "tool"}) ||
		got.Messages[2].Content != "a1" || len(got.Tools) < 10 || got.Tools[0].Type != "function" {
		t.Fatalf("body %s", b)
	}
	c = Call{API: Completions, Prompt: "p", MaxTokens: 3}
	if b, _ := c.Body("m", false); string(b) != `{"max_tokens":3,"model":"m","prompt":"p"}` {
		t.Fatalf("completions body %s", b)
	}
}

func TestGeneratorsAreDeterministicAndShaped(t *testing.T) {
	for _, name := range Names {
		a, err := Named(name, 7, 1)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Named(name, 7, 1)
		c, _ := Named(name, 8, 1)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: same seed, different sessions", name)
		}
		if reflect.DeepEqual(a, c) {
			t.Fatalf("%s: different seeds, same sessions", name)
		}
		fast, _ := Named(name, 7, 4)
		groups := map[int]string{}
		for i, s := range a {
			if i > 0 && s.Start < a[i-1].Start {
				t.Fatalf("%s: starts out of order", name)
			}
			if fast[i].Start > s.Start/3 {
				t.Fatalf("%s: rate scale 4 starts session %d at %v, at 1 %v", name, i, fast[i].Start, s.Start)
			}
			if prev, ok := groups[s.Group]; ok && prev != s.System+s.Tools {
				t.Fatalf("%s: group %d has two preambles", name, s.Group)
			}
			groups[s.Group] = s.System + s.Tools
		}
	}
	ss, _ := DefaultSharedPrefix().Sessions()
	perGroup := map[int]int{}
	for _, s := range ss {
		perGroup[s.Group]++
		if n := engine.CountTokens(s.System); n != 2048 {
			t.Fatalf("system prompt of %d tokens", n)
		}
		if n := engine.CountTokens(s.Turns[0].User); n != 128 {
			t.Fatalf("question of %d tokens", n)
		}
	}
	if len(ss) != 64*16 || len(perGroup) != 64 || perGroup[5] != 16 {
		t.Fatalf("%d sessions over %d groups", len(ss), len(perGroup))
	}
}

func TestValidate(t *testing.T) {
	bad := []interface{ Validate() error }{
		SharedPrefix{}, MultiTurn{}, Agentic{},
		func() SharedPrefix { w := DefaultSharedPrefix(); w.Skew = -1; return w }(),
		func() MultiTurn { w := DefaultMultiTurn(Chat); w.Rate = 0; return w }(),
		func() Agentic { w := DefaultAgentic(); w.Think = -1; return w }(),
	}
	for _, w := range bad {
		if w.Validate() == nil {
			t.Errorf("%+v accepted", w)
		}
	}
	if _, err := Named("nope", 1, 1); err == nil || !strings.Contains(err.Error(), "shared-prefix") {
		t.Fatalf("unknown workload: %v", err)
	}
	if _, err := Named("multi-turn", 1, 0); err == nil {
		t.Fatal("rate scale 0 accepted")
	}
}

func TestTraceSessions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.jsonl")
	trace := `{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}
{"timestamp": 1000, "input_length": 600, "output_length": 0, "hash_ids": [1, 3]}
`
	if err := os.WriteFile(path, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	ss, err := Named("trace:"+path, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[1].Start != 500*time.Millisecond || ss[0].API != Completions || ss[1].Turns[0].MaxTokens != 1 {
		t.Fatalf("%+v", ss)
	}
	a, b := ss[0].Call(0, nil).Prompt, ss[1].Call(0, nil).Prompt
	if len(a) != 700*engine.CharsPerToken || len(b) != 600*engine.CharsPerToken {
		t.Fatalf("prompt lengths %d, %d", len(a), len(b))
	}
	// Block 1 is shared, blocks 2 and 3 are not; a cut block is a prefix of
	// the whole one.
	shared := TraceBlockSize * engine.CharsPerToken
	if a[:shared] != b[:shared] || a[shared:shared+8] == b[shared:shared+8] {
		t.Fatal("trace blocks do not share text as their ids do")
	}
	if BlockText([]uint64{9}, 100) != BlockText([]uint64{9}, 512)[:400] {
		t.Fatal("a cut block is not a prefix of the block")
	}
	if engine.CountTokens(a) != 700 || !reflect.DeepEqual(engine.Tokenize(a)[:512], engine.Tokenize(b)[:512]) {
		t.Fatal("shared blocks do not share stand-in tokens")
	}

	if err := os.WriteFile(path, []byte(trace+"{\"timestamp\": 2, \"input_length\": -1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Named("trace:"+path, 1, 1); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("malformed line 3: %v", err)
	}
}

// A trace stamped on a coarse grid has its ticks' requests spread within
// them; a finely stamped one is replayed as written.
func TestSpreadTicks(t *testing.T) {
	at := func(ms ...int) []Request {
		var out []Request
		for i, m := range ms {
			out = append(out, Request{Arrival: time.Duration(m) * time.Millisecond, InputLen: i + 1})
		}
		return out
	}
	// Ticks of 3 s: four requests at 0, one at 3000, three at 6000 (the
	// last tick, spread over the median gap, 3000 ms).
	reqs := at(0, 0, 0, 0, 3000, 6000, 6000, 6000)
	got := SpreadTicks(reqs, 1)
	if reqs[1].Arrival != 0 {
		t.Fatal("SpreadTicks changed its argument")
	}
	for i, r := range got {
		if r.InputLen != i+1 {
			t.Fatalf("request %d moved in the order: %+v", i, got)
		}
		lo := reqs[i].Arrival
		if r.Arrival < lo || r.Arrival >= lo+3*time.Second {
			t.Errorf("request %d at %v, outside its tick [%v, %v)", i, r.Arrival, lo, lo+3*time.Second)
		}
		if i > 0 && r.Arrival < got[i-1].Arrival {
			t.Errorf("request %d at %v, before request %d at %v", i, r.Arrival, i-1, got[i-1].Arrival)
		}
	}
	if got[4].Arrival != 3*time.Second {
		t.Errorf("a request alone at its timestamp moved to %v", got[4].Arrival)
	}
	distinct := map[time.Duration]bool{}
	for _, r := range got {
		distinct[r.Arrival] = true
	}
	if len(distinct) != len(got) {
		t.Errorf("requests still share arrival times: %+v", got)
	}
	if !reflect.DeepEqual(SpreadTicks(reqs, 1), got) {
		t.Error("the same seed spread the ticks differently")
	}
	if reflect.DeepEqual(SpreadTicks(reqs, 2), got) {
		t.Error("another seed spread the ticks alike")
	}
	// Stamped to the millisecond: nothing shares a timestamp, nothing moves.
	fine := at(0, 7, 12, 400, 401)
	if !reflect.DeepEqual(SpreadTicks(fine, 1), fine) {
		t.Errorf("a finely stamped trace moved: %+v", SpreadTicks(fine, 1))
	}
	// One timestamp for all: no tick to spread over.
	if one := at(5, 5, 5); !reflect.DeepEqual(SpreadTicks(one, 1), one) {
		t.Errorf("a trace of one timestamp moved: %+v", SpreadTicks(one, 1))
	}
}

func TestTraceNames(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.jsonl")
	trace := `{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}
{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 3]}
{"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [4]}
`
	if err := os.WriteFile(path, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	spread, err := Named(TracePrefix+path, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	recorded, err := Named(RecordedTracePrefix+path, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if recorded[0].Start != 0 || recorded[1].Start != 0 {
		t.Errorf("as recorded, the first tick's requests start at %v and %v", recorded[0].Start, recorded[1].Start)
	}
	if spread[0].Start == spread[1].Start || spread[1].Start >= time.Second || spread[2].Start != time.Second {
		t.Errorf("spread, the requests start at %v, %v, %v", spread[0].Start, spread[1].Start, spread[2].Start)
	}
	for _, tc := range []struct {
		name           string
		path           string
		recorded, isTr bool
	}{
		{"trace:a/b.jsonl", "a/b.jsonl", false, true},
		{"trace-recorded:a/b.jsonl", "a/b.jsonl", true, true},
		{"multi-turn", "", false, false},
		{"traces:a", "", false, false},
	} {
		p, rec, ok := TraceName(tc.name)
		if p != tc.path || rec != tc.recorded || ok != tc.isTr {
			t.Errorf("TraceName(%q) = %q, %v, %v", tc.name, p, rec, ok)
		}
	}
	if _, err := Named(RecordedTracePrefix, 1, 1); err == nil || !strings.Contains(err.Error(), "needs a path") {
		t.Errorf("a trace name without a path: %v", err)
	}
	if _, err := ReadTrace("multi-turn", 1); err == nil || !strings.Contains(err.Error(), "names no trace") {
		t.Errorf("ReadTrace of a built-in workload: %v", err)
	}
}

// An answer of n tokens is n tokens of its session's text: after any
// prompt, tokenized with it at the session's scale, it adds n tokens, give
// or take the one where it joins the prompt; at scale 1 it is SimAnswer.
func TestSimAnswerScaled(t *testing.T) {
	if SimAnswerScaled(50, 1) != SimAnswer(50) || SimAnswerScaled(50, 0) != SimAnswer(50) {
		t.Fatal("at scale 1 the answer is not SimAnswer")
	}
	for _, scale := range []float64{0.569, 0.8, 1, 1.29, 1.654} {
		cpt := engine.CharsPerToken * scale
		for _, n := range []int{1, 7, 128, 500} {
			for pad := range 9 {
				prompt := strings.Repeat("x", 100+pad)
				got := len(engine.TokenizeScaled(prompt+SimAnswerScaled(n, scale), cpt)) - len(engine.TokenizeScaled(prompt, cpt))
				if got < n-1 || got > n+1 {
					t.Fatalf("scale %v, %d tokens after %d bytes: %d tokens", scale, n, len(prompt), got)
				}
			}
		}
	}
}
