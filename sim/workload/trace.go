package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"
)

// A trace workload is named by its path behind one of two prefixes:
// TracePrefix replays it with the requests that share a timestamp spread
// over that timestamp's tick ([SpreadTicks]); RecordedTracePrefix replays
// every request at its timestamp as written.
const (
	TracePrefix         = "trace:"
	RecordedTracePrefix = "trace-recorded:"
)

// TraceName parses a trace workload's name: the trace's path, and whether
// its timestamps are replayed as recorded. ok is false for any other name.
func TraceName(name string) (path string, recorded, ok bool) {
	if path, ok = strings.CutPrefix(name, TracePrefix); ok {
		return path, false, true
	}
	if path, ok = strings.CutPrefix(name, RecordedTracePrefix); ok {
		return path, true, true
	}
	return "", false, false
}

// SpreadTicks returns reqs with the requests that share a timestamp spread
// over its tick, in their order. A trace's timestamps are as fine as its
// clock: Mooncake's conversation trace stamps its requests on a 3-second
// grid, about ten a tick, and replayed as written those ten arrive at one
// instant, a burst that no client sends and that every router replica
// places blind to the others' picks. The k requests of timestamp t take
// k uniform draws in [t, t') under seed, sorted, in file order; t' is the
// next later timestamp, or for the last one t plus the median gap between
// timestamps. A request alone at its timestamp keeps it: a trace stamped
// finely enough to tell its requests apart is replayed as written.
func SpreadTicks(reqs []Request, seed uint64) []Request {
	out := slices.Clone(reqs)
	tick := medianGap(reqs)
	r := rand.New(rand.NewPCG(seed, 0x71c45))
	var offs []time.Duration
	for i := 0; i < len(reqs); {
		t, j := reqs[i].Arrival, i+1
		for j < len(reqs) && reqs[j].Arrival == t {
			j++
		}
		span := tick
		if j < len(reqs) && reqs[j].Arrival > t {
			span = reqs[j].Arrival - t
		}
		if j-i > 1 && span > 0 {
			offs = offs[:0]
			for range j - i {
				offs = append(offs, time.Duration(r.Int64N(int64(span))))
			}
			slices.Sort(offs)
			for k, d := range offs {
				out[i+k].Arrival = t + d
			}
		}
		i = j
	}
	return out
}

// medianGap is the median of the gaps between successive distinct
// timestamps of reqs, later ones only (0: none).
func medianGap(reqs []Request) time.Duration {
	var gaps []time.Duration
	for i := 1; i < len(reqs); i++ {
		if d := reqs[i].Arrival - reqs[i-1].Arrival; d > 0 {
			gaps = append(gaps, d)
		}
	}
	if len(gaps) == 0 {
		return 0
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}

// TraceSessions turns trace requests (see [LoadMooncake]) into single-turn
// completions sessions that keep the trace's own arrival times, divided by
// rateScale: 2 replays the trace at twice its rate.
func TraceSessions(reqs []Request, rateScale float64) ([]Session, error) {
	if !(rateScale > 0) || math.IsInf(rateScale, 0) {
		return nil, fmt.Errorf("workload: rate scale %v must be > 0", rateScale)
	}
	out := make([]Session, len(reqs))
	for i, r := range reqs {
		if r.HashIDs == nil {
			return nil, fmt.Errorf("workload: trace request %d has no hash_ids", i)
		}
		out[i] = Session{ID: i, Start: time.Duration(float64(r.Arrival) / rateScale), API: Completions, Group: -1,
			Trace: true, Turns: []Turn{{Blocks: r.HashIDs, InputLen: r.InputLen, MaxTokens: r.OutputLen}}}
	}
	return out, nil
}

// Names are the workloads [Named] knows, besides trace:PATH and
// trace-recorded:PATH.
var Names = []string{"shared-prefix", "multi-turn", "multi-turn-completions", "agentic"}

// Named returns the sessions of the workload called name with its defaults,
// under seed, with every arrival rate multiplied by rateScale:
// shared-prefix, multi-turn (chat), multi-turn-completions, agentic, or
// trace:PATH or trace-recorded:PATH (a Mooncake-format trace, its ticks
// spread under seed or as recorded: see [TraceName]; a malformed line is
// reported with its number).
func Named(name string, seed uint64, rateScale float64) ([]Session, error) {
	if !(rateScale > 0) || math.IsInf(rateScale, 0) {
		return nil, fmt.Errorf("workload: rate scale %v must be > 0", rateScale)
	}
	switch name {
	case "shared-prefix":
		w := DefaultSharedPrefix()
		w.Seed, w.Rate = seed, w.Rate*rateScale
		return w.Sessions()
	case "multi-turn", "multi-turn-completions":
		api := Chat
		if name == "multi-turn-completions" {
			api = Completions
		}
		w := DefaultMultiTurn(api)
		w.Seed, w.Rate = seed, w.Rate*rateScale
		return w.Sessions()
	case "agentic":
		w := DefaultAgentic()
		w.Seed, w.Rate = seed, w.Rate*rateScale
		return w.Sessions()
	}
	if _, _, ok := TraceName(name); ok {
		reqs, err := ReadTrace(name, seed)
		if err != nil {
			return nil, err
		}
		return TraceSessions(reqs, rateScale)
	}
	return nil, fmt.Errorf("workload: unknown workload %q (known: %s, trace:PATH, trace-recorded:PATH)", name, strings.Join(Names, ", "))
}

// ReadTrace reads the requests of a trace workload, named as [TraceName]
// parses it: the Mooncake-format file at its path, its ticks spread under
// seed ([SpreadTicks]) unless it is named as recorded.
func ReadTrace(name string, seed uint64) ([]Request, error) {
	path, recorded, ok := TraceName(name)
	switch {
	case !ok:
		return nil, fmt.Errorf("workload: %q names no trace (trace:PATH, trace-recorded:PATH)", name)
	case path == "":
		return nil, fmt.Errorf("workload: %s needs a path", name)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	reqs, err := LoadMooncake(f)
	if err != nil {
		return nil, fmt.Errorf("workload: %s: %w", path, err)
	}
	if !recorded {
		reqs = SpreadTicks(reqs, seed)
	}
	return reqs, nil
}
