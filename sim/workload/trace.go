package workload

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

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

// Names are the workloads [Named] knows, besides "trace:PATH".
var Names = []string{"shared-prefix", "multi-turn", "multi-turn-completions", "agentic"}

// Named returns the sessions of the workload called name with its defaults,
// under seed, with every arrival rate multiplied by rateScale:
// shared-prefix, multi-turn (chat), multi-turn-completions, agentic, or
// trace:PATH (a Mooncake-format trace; a malformed line is reported with its
// number).
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
	if path, ok := strings.CutPrefix(name, "trace:"); ok {
		if path == "" {
			return nil, errors.New("workload: trace: needs a path")
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
		return TraceSessions(reqs, rateScale)
	}
	return nil, fmt.Errorf("workload: unknown workload %q (known: %s, trace:PATH)", name, strings.Join(Names, ", "))
}

// LoadTrace reads a Mooncake-format trace from r (see [LoadMooncake]) as
// sessions at rateScale.
func LoadTrace(r io.Reader, rateScale float64) ([]Session, error) {
	reqs, err := LoadMooncake(r)
	if err != nil {
		return nil, err
	}
	return TraceSessions(reqs, rateScale)
}
