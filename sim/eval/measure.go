package eval

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/prefixring/prefixring/sim/fleet"
	"github.com/prefixring/prefixring/sim/workload"
)

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile returns the q-quantile of sorted xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// average is the mean of xs, 0 for none.
func average(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// stay is one request's time in its engine's queue.
type stay struct{ arrive, admit time.Duration }

// measure computes a run's metrics from its records. closed says the run
// played its sessions closed loop: its queues are bounded by its
// sessions, and it is never marked QueuesGrew.
func measure(res *fleet.Result, reqs []workload.Request, blockSize, endpoints int, closed bool, ideal func() Ideal) Result {
	var r Result
	var ttft, e2e []float64
	var prompt, cached, out int
	var first time.Duration = -1
	// Queue depth: for each arrival at an engine, the other requests there
	// still waiting for their first step.
	queue := map[string][]stay{}
	var stays []stay // every engine's, for the queue's growth
	busy := map[string]time.Duration{}
	spills, ok := 0, 0
	for _, rec := range res.Records {
		r.Requests++
		if rec.Err != "" {
			r.Errors++
			continue
		}
		ok++
		if first < 0 || rec.Arrival < first {
			first = rec.Arrival
		}
		ttft = append(ttft, ms(rec.TTFT))
		e2e = append(e2e, ms(rec.E2E))
		prompt += rec.PromptTokens
		cached += rec.CachedTokens
		out += rec.OutputTokens
		r.PrefillTokens += int64(rec.PrefillComputed)
		if rec.Decision == "spill" {
			spills++
		}
		st := stay{rec.Arrival, rec.Arrival + rec.QueueDelay}
		queue[rec.Endpoint], stays = append(queue[rec.Endpoint], st), append(stays, st)
		busy[rec.Endpoint] += rec.E2E
	}
	slices.Sort(ttft)
	slices.Sort(e2e)
	r.TTFTsMS = ttft
	r.TTFTMeanMS = average(ttft)
	r.TTFTP50MS, r.TTFTP95MS, r.TTFTP99MS = quantile(ttft, 0.5), quantile(ttft, 0.95), quantile(ttft, 0.99)
	r.E2EP50MS, r.E2EP99MS = quantile(e2e, 0.5), quantile(e2e, 0.99)
	if prompt > 0 {
		r.HitRate = float64(cached) / float64(prompt)
	}
	id := ideal()
	r.IdealHitRate = id.HitRate
	if len(id.FloorsMS) > 0 {
		r.TTFTFloorMeanMS = average(id.FloorsMS)
		r.TTFTFloorP50MS, r.TTFTFloorP99MS = quantile(id.FloorsMS, 0.5), quantile(id.FloorsMS, 0.99)
	}
	r.QueueEarlyMS, r.QueueLateMS = queueQuarters(stays)
	r.QueuesGrew = !closed && queuesGrew(r.QueueEarlyMS, r.QueueLateMS, r.TTFTFloorMeanMS)
	if span := res.End - first; span > 0 {
		r.OutputTokensPerS = float64(out) / span.Seconds()
	}
	if ok > 0 {
		r.SpillRate = float64(spills) / float64(ok)
	}
	var samples, depthSum int
	for _, st := range queue {
		slices.SortStableFunc(st, func(a, b stay) int { return cmp.Compare(a.arrive, b.arrive) })
		var waiting []time.Duration
		for _, x := range st {
			k := 0
			for _, a := range waiting {
				if a > x.arrive {
					waiting[k] = a
					k++
				}
			}
			waiting = waiting[:k]
			samples++
			depthSum += len(waiting)
			r.QueueDepthMax = max(r.QueueDepthMax, len(waiting))
			waiting = append(waiting, x.admit) // the admission times of earlier arrivals not yet admitted
		}
	}
	if samples > 0 {
		r.QueueDepthMean = float64(depthSum) / float64(samples)
	}
	// Imbalance: the busiest engine's mean in-flight requests over the mean
	// engine's (request-seconds each engine held, over the same span).
	var total, peak time.Duration
	for _, b := range busy {
		total += b
		peak = max(peak, b)
	}
	if total > 0 {
		r.Imbalance = float64(peak) / (float64(total) / float64(max(endpoints, 1)))
	}
	return r
}

// queueQuarters returns the mean engine queue delay of the first and the
// third quarter of ss by arrival (ties in their order), in ms; zeros for
// fewer than four. It sorts ss.
func queueQuarters(ss []stay) (early, late float64) {
	k := len(ss) / 4
	if k == 0 {
		return 0, 0
	}
	slices.SortStableFunc(ss, func(a, b stay) int { return cmp.Compare(a.arrive, b.arrive) })
	mean := func(q []stay) float64 {
		var sum time.Duration
		for _, s := range q {
			sum += s.admit - s.arrive
		}
		return ms(sum) / float64(len(q))
	}
	return mean(ss[:k]), mean(ss[2*k : 3*k])
}

// queuesGrew reports a run whose engine queues grew through it: its third
// quarter of requests waited more than twice as long as its first
// quarter, by more than an ideal fleet's mean TTFT (floor). Such a run is
// past its fleet's capacity for its policy; its TTFTs rise with its
// length and measure no steady state (docs/study.md, "Steady state (stop
// 38)").
func queuesGrew(early, late, floor float64) bool { return late > 2*early+floor }
