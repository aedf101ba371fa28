package eval

import (
	"fmt"
	"strings"
)

// queuesThatGrew tables the points at 3 router replicas where some run's
// engine queues grew through it ([queuesGrew]): past the fleet's capacity
// for that policy, where TTFT depends on how long the run is, so that a
// reader does not take such a point's figures for a steady state.
func queuesThatGrew(b *strings.Builder, s set) {
	type row struct {
		p                    goalPoint
		pr, rr               string // prefixring's and round-robin's seeds grew, "k of n"
		policies, grewPolicy int    // policies run, and those grown at some seed
		early, late          []float64
	}
	var rows []row
	var runs, grew int
	points := goalPoints(s)
	for _, p := range points {
		at := s.atGP(p)
		r := row{p: p}
		grewAt := map[string]bool{} // policy: its queues grew at some seed
		for _, x := range at {
			runs++
			grewAt[x.Policy] = grewAt[x.Policy] || x.QueuesGrew
			if x.QueuesGrew {
				grew++
				r.early, r.late = append(r.early, x.QueueEarlyMS), append(r.late, x.QueueLateMS)
			}
		}
		for _, g := range grewAt {
			if g {
				r.grewPolicy++
			}
		}
		if r.grewPolicy == 0 {
			continue
		}
		r.policies = len(grewAt)
		r.pr, r.rr = grewOf(at, prefixring), grewOf(at, "round-robin")
		rows = append(rows, r)
	}
	if runs == 0 {
		return
	}
	b.WriteString("## Queues that grew\n\n")
	b.WriteString("A run's queues grew when the third quarter of its requests (by arrival) waited at the engines more than twice as long on average as the first quarter, by more than the ideal fleet's mean TTFT: the run is past its fleet's capacity for its policy, and its TTFTs rise with its length. ")
	if len(rows) == 0 {
		fmt.Fprintf(b, "No run's did, of %d at 3 router replicas.\n\n", runs)
		return
	}
	fmt.Fprintf(b, "Queues grew in %d of %d runs at 3 router replicas, at %d of %d points. The queue columns range, over the runs that grew, their first and third quarters' mean waits.\n\n", grew, runs, len(rows), len(points))
	b.WriteString("| workload | load | fleet | endpoints | prefixring | round-robin | policies grown | queue, first quarter ms | queue, third quarter ms |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %d | %s | %s | %d of %d | %s | %s |\n", short(r.p.workload)+r.p.tag(s), loadOf(r.p.rate, r.p.conc), fleetName(r.p.kv), r.p.n,
			r.pr, r.rr, r.grewPolicy, r.policies, rangeOf(r.early, 0), rangeOf(r.late, 0))
	}
	b.WriteString("\n")
}

// grewOf says at how many of a policy's seeds at a point its queues grew:
// "k of n", or "–" where the policy did not run.
func grewOf(at set, policy string) string {
	runs := at.where(func(r Result) bool { return r.Policy == policy })
	if len(runs) == 0 {
		return "–"
	}
	k := grown(runs)
	if k == 0 {
		return fmt.Sprintf("0 of %d", len(runs))
	}
	return fmt.Sprintf("**%d** of %d", k, len(runs))
}

// grewNote is what a goal's status adds for the prefixring runs cs whose
// queues grew: ", queues grew (k of n)", or nothing.
func grewNote(cs set) string {
	k := grown(cs)
	if k == 0 {
		return ""
	}
	return fmt.Sprintf(", queues grew (%d of %d)", k, len(cs))
}

// grown counts the runs of s whose queues grew.
func grown(s set) int { return len(s.where(func(r Result) bool { return r.QueuesGrew })) }
