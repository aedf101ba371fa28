package fleet

import (
	"github.com/prefixring/prefixring/sim/workload"
	"os"
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim/engine"
)

// roundRobin is the simplest picker: endpoints in turn, no load.
type roundRobin struct {
	ids []string
	n   int
}

func (p *roundRobin) Acquire(ring.Request) (ring.Lease, error) {
	id := p.ids[p.n%len(p.ids)]
	p.n++
	return ring.Lease{Endpoint: id, Decision: ring.DecisionFallback}, nil
}

// sharedPrefixWorkload: n requests every 100 ms, each a 2-block system
// prompt shared by all plus one block of its own.
func sharedPrefixWorkload(n int) []workload.Request {
	reqs := make([]workload.Request, n)
	for i := range reqs {
		reqs[i] = workload.Request{
			Arrival:   time.Duration(i) * 100 * time.Millisecond,
			InputLen:  3 * workload.TraceBlockSize,
			OutputLen: 10,
			HashIDs:   []uint64{1, 2, uint64(100 + i)},
		}
	}
	return reqs
}

func TestRoundRobinRecords(t *testing.T) {
	cfg := Config{Engines: 2, Engine: engine.DefaultConfig(), Picker: &roundRobin{ids: EndpointIDs(2)}}
	res, err := Run(cfg, sharedPrefixWorkload(4))
	if err != nil {
		t.Fatal(err)
	}
	// Requests 0 and 1 are cold on engines 0 and 1; 2 and 3 find the
	// 1024-token shared prefix there.
	wantCached := []int{0, 0, 1024, 1024}
	for i, rec := range res.Records {
		if rec.Err != "" {
			t.Fatalf("request %d: %s", i, rec.Err)
		}
		if want := EndpointIDs(2)[i%2]; rec.Endpoint != want {
			t.Errorf("request %d on %s, want %s", i, rec.Endpoint, want)
		}
		if rec.CachedTokens != wantCached[i] || rec.PrefillComputed != 1536-wantCached[i] {
			t.Errorf("request %d: cached %d computed %d", i, rec.CachedTokens, rec.PrefillComputed)
		}
		if rec.OutputTokens != 10 || rec.QueueDelay != 0 || rec.TTFT <= 0 || rec.E2E <= rec.TTFT {
			t.Errorf("request %d: %+v", i, rec)
		}
	}
	if cold, warm := res.Records[0].TTFT, res.Records[2].TTFT; warm >= cold/2 {
		t.Errorf("warm TTFT %v not well below cold %v", warm, cold)
	}
}

// TestNamedEngines: engines named by Config.Names take the picker's
// requests under those names, and names that cannot name the engines are
// refused.
func TestNamedEngines(t *testing.T) {
	names := []string{"http://10.0.0.7:8000", "http://10.0.0.8:8000"}
	cfg := Config{Engines: 2, Names: names, Engine: engine.DefaultConfig(), Picker: &roundRobin{ids: names}}
	res, err := Run(cfg, sharedPrefixWorkload(4))
	if err != nil {
		t.Fatal(err)
	}
	for i, rec := range res.Records {
		if rec.Err != "" || rec.Endpoint != names[i%2] || i >= 2 && rec.CachedTokens != 1024 {
			t.Errorf("request %d: on %q, cached %d, error %q; want %q, the shared prefix cached from the second round", i, rec.Endpoint, rec.CachedTokens, rec.Err, names[i%2])
		}
	}
	for _, bad := range [][]string{{"a"}, {"a", "a"}, {"a", ""}, {"a", "b", "c"}} {
		cfg.Names = bad
		if err := cfg.Validate(); err == nil {
			t.Errorf("names %q for 2 engines: no error", bad)
		}
	}
}

func TestRunIsDeterministic(t *testing.T) {
	run := func() *Result {
		cfg := Config{Engines: 3, Engine: engine.DefaultConfig(), Picker: &roundRobin{ids: EndpointIDs(3)}}
		res, err := Run(cfg, sharedPrefixWorkload(50))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := run(), run()
	for i := range a.Records {
		if a.Records[i] != b.Records[i] {
			t.Fatalf("record %d differs: %+v vs %+v", i, a.Records[i], b.Records[i])
		}
	}
}

func TestRingBalancerThroughSim(t *testing.T) {
	// Requests overlap (one arrives every 100 ms, each takes about 110 ms):
	// the textbook bound at 1 in flight over 4 is 1, so a floor of 2 keeps
	// the key home.
	rc := ring.DefaultConfig()
	rc.MinBound = 2
	b, err := ring.NewBalancer(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetEndpoints(EndpointIDs(4)); err != nil {
		t.Fatal(err)
	}
	// Every request shares its first 2 blocks, so a 256-token prefix key
	// sends them all home to one engine.
	cfg := Config{Engines: 4, Engine: engine.DefaultConfig(), Picker: b, Key: workload.PrefixKey(256)}
	res, err := Run(cfg, sharedPrefixWorkload(20))
	if err != nil {
		t.Fatal(err)
	}
	home := res.Records[0].Endpoint
	for i, rec := range res.Records {
		if rec.Err != "" || rec.Decision != "home" || rec.Endpoint != home {
			t.Fatalf("request %d: %+v, want home on %s", i, rec, home)
		}
		if i > 0 && rec.CachedTokens != 1024 {
			t.Fatalf("request %d cached %d tokens, want 1024", i, rec.CachedTokens)
		}
	}
	if n := b.Inflight().Total(); n != 0 {
		t.Fatalf("%d leases not released", n)
	}
}

func TestRejectedRequestIsRecorded(t *testing.T) {
	cfg := Config{Engines: 1, Engine: engine.DefaultConfig(), Picker: &roundRobin{ids: EndpointIDs(1)}}
	reqs := []workload.Request{{InputLen: 200000, OutputLen: 1, Tokens: make([]uint32, 200000)}}
	res, err := Run(cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records[0].Err == "" {
		t.Fatal("a prompt over MaxModelLen must be recorded as rejected")
	}
}

func TestLoadMooncake(t *testing.T) {
	f, err := os.Open("testdata/mini.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, err := workload.LoadMooncake(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3 || reqs[1].Arrival != 1500*time.Millisecond || reqs[2].OutputLen != 1 {
		t.Fatalf("%+v", reqs)
	}
	if len(reqs[0].HashIDs) != 2 { // 600 tokens but one id: one is added
		t.Fatalf("hash ids %v", reqs[0].HashIDs)
	}
	toks := reqs[1].AppendTokens(nil, 0)
	if len(toks) != 700 || toks[0] != reqs[0].AppendTokens(nil, 1)[0] {
		t.Fatal("requests sharing hash_id 5 must share its tokens")
	}
}

// TestAdvanceRunsBeforeReleases: the fleet tells the picker the virtual
// time before it applies each step's end, never going back, so a picker
// that models time sees the requests still in flight that this step ends.
func TestAdvanceRunsBeforeReleases(t *testing.T) {
	rc := ring.DefaultConfig()
	rc.Signal, rc.MinBound = ring.SignalRequests, ring.DefaultMinRequests
	bal, err := ring.NewBalancer(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bal.SetEndpoints(EndpointIDs(2)); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		at       time.Duration
		inflight int64
	}
	var log []seen
	advance := func(now time.Duration) { log = append(log, seen{now, bal.Inflight().Total()}) }
	res, err := Run(Config{Engines: 2, Engine: engine.DefaultConfig(), Picker: bal, Advance: advance}, sharedPrefixWorkload(4))
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != res.Steps {
		t.Fatalf("advanced %d times over %d steps", len(log), res.Steps)
	}
	for i, s := range log {
		if i > 0 && s.at < log[i-1].at {
			t.Fatalf("time went back: %v after %v", s.at, log[i-1].at)
		}
		var want int64 // arrived before, and not ended before
		for _, rec := range res.Records {
			if rec.Arrival < s.at && rec.Arrival+rec.E2E >= s.at {
				want++
			}
		}
		if s.inflight != want {
			t.Fatalf("at %v the picker saw %d in flight, want %d", s.at, s.inflight, want)
		}
	}
}

// TestObserveListsEnginesInOrder: Observe gets the engines' gauges in
// the order of Config.IDs at every call, so an observer that reads them
// in turn sees the same run every time (a map's order leaked into it).
func TestObserveListsEnginesInOrder(t *testing.T) {
	ids := EndpointIDs(8)
	calls := 0
	observe := func(_ time.Duration, gs []Gauges) {
		calls++
		if len(gs) != len(ids) {
			t.Fatalf("%d gauges for %d engines", len(gs), len(ids))
		}
		for i, g := range gs {
			if g.ID != ids[i] {
				t.Fatalf("call %d: gauge %d is %s's, want %s's", calls, i, g.ID, ids[i])
			}
		}
	}
	cfg := Config{Engines: 8, Engine: engine.DefaultConfig(), Picker: &roundRobin{ids: ids}, Observe: observe}
	if _, err := Run(cfg, sharedPrefixWorkload(20)); err != nil {
		t.Fatal(err)
	}
	if calls != 20 {
		t.Fatalf("observed %d times for 20 requests", calls)
	}
}

// vLLM caches the full blocks a request generates whatever its prompt is
// made of, and a preempted request resumes after those still cached: its
// lookup covers its output too. The fleet knows the answer of a prompt of
// token ids or trace blocks as well (the engine's filler), so such a
// request resumes as one of text does. Two requests of 8 tokens and 12
// out on an engine of 8 blocks of 4: B is preempted once, when it has
// generated 8 tokens; resuming, it looks up its 16 tokens (capped at 3
// blocks: the last token is computed) and finds its prompt's 2 blocks and
// its output's first, so it computes 8 + 4 tokens by prefill in all (8 + 8
// with its output unhashed).
func TestResumedTokenPromptFindsItsOwnOutput(t *testing.T) {
	ec := engine.DefaultConfig()
	ec.BlockSize, ec.NumBlocks = 4, 8
	a := workload.Request{InputLen: 8, OutputLen: 12, Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8}}
	for name, b := range map[string]workload.Request{
		"token ids": {InputLen: 8, OutputLen: 12, Tokens: []uint32{11, 12, 13, 14, 15, 16, 17, 18}},
		"trace":     {InputLen: 8, OutputLen: 12, HashIDs: []uint64{7}},
	} {
		res, err := Run(Config{Engines: 1, Engine: ec, Picker: &roundRobin{ids: EndpointIDs(1)}}, []workload.Request{a, b})
		if err != nil {
			t.Fatal(err)
		}
		if rec := res.Records[1]; rec.Preemptions != 1 || rec.PrefillComputed != 8+4 {
			t.Errorf("%s: B preempted %d times, computed %d by prefill; want once and 12", name, rec.Preemptions, rec.PrefillComputed)
		}
	}
}

// TestSlowEngine: an engine of Config.Slowdown 10 takes ten times as long
// for the same request as a normal engine beside it; a slowdown for an
// engine outside the fleet, or below 1, is refused.
func TestSlowEngine(t *testing.T) {
	reqs := sharedPrefixWorkload(2)[:2]
	reqs[1].HashIDs = []uint64{3, 4, 101} // cold too: the same work as request 0
	run := func(slow map[int]float64) *Result {
		cfg := Config{Engines: 2, Engine: engine.DefaultConfig(), Picker: &roundRobin{ids: EndpointIDs(2)}, Slowdown: slow}
		res, err := Run(cfg, reqs)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	normal, slow := run(nil), run(map[int]float64{1: 10})
	if a, b := normal.Records[0].TTFT, normal.Records[1].TTFT; a != b || a <= 0 {
		t.Fatalf("normal fleet: TTFTs %v and %v, want equal", a, b)
	}
	if got, want := slow.Records[1].TTFT, 10*normal.Records[1].TTFT; got != want || slow.Records[1].Endpoint != "engine-1" {
		t.Errorf("on slow %s: TTFT %v, want %v", slow.Records[1].Endpoint, got, want)
	}
	if got, want := slow.Records[0].E2E, normal.Records[0].E2E; got != want {
		t.Errorf("on the normal engine: E2E %v, want %v as in a normal fleet", got, want)
	}
	for _, bad := range []map[int]float64{{2: 10}, {-1: 10}, {0: 0.5}} {
		cfg := Config{Engines: 2, Engine: engine.DefaultConfig(), Picker: &roundRobin{ids: EndpointIDs(2)}, Slowdown: bad}
		if err := cfg.Validate(); err == nil {
			t.Errorf("slowdown %v for 2 engines: no error", bad)
		}
	}
}

// TestAnswersTellThePace: the fleet tells each streamed request's lease
// its time to first token, as the proxy does at a stream's first byte,
// and each other request's lease its whole answer's time, so a
// production balancer's pace (ring.Pace) finds the engine that is ten
// times slower and moves requests off it, whether the clients stream or
// not. Unstreamed, P is held until each answer ends, so the bound keeps
// the slow engine to a few requests, too few answers for the default
// pace to count: it finds the engine by the requests it has not
// answered, which the fleet tells each lease it sent (Lease.Sent).
func TestAnswersTellThePace(t *testing.T) {
	onSlow := func(stream bool, pace ring.PaceConfig) int {
		rc := ring.DefaultConfig()
		rc.Pace = pace
		b, err := ring.NewBalancer(rc)
		if err != nil {
			t.Fatal(err)
		}
		ids := EndpointIDs(4)
		if err := b.SetEndpoints(ids); err != nil {
			t.Fatal(err)
		}
		w := workload.DefaultMultiTurn(workload.Chat)
		w.Conversations, w.Turns = 80, 4
		sessions, err := w.Sessions()
		if err != nil {
			t.Fatal(err)
		}
		for i := range sessions {
			sessions[i].Stream = stream
		}
		cfg := Config{Engines: 4, Engine: engine.DefaultConfig(), Picker: b, Slowdown: map[int]float64{0: 10}, Concurrency: 16}
		res, _, err := RunSessions(cfg, sessions, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range res.Records {
			if r.Endpoint == ids[0] {
				n++
			}
		}
		return n
	}
	for _, stream := range []bool{true, false} {
		on, off := onSlow(stream, ring.DefaultPaceConfig()), onSlow(stream, ring.PaceConfig{})
		t.Logf("streamed %v: %d with pace, %d without", stream, on, off)
		if on >= off*4/5 {
			t.Errorf("streamed %v: the slow engine took %d requests with pace, %d without", stream, on, off)
		}
	}
}
