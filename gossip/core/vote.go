package core

import (
	"cmp"
	"slices"
)

// Verdict is the endpoint set and health every replica computes the same way
// from the same entries.
type Verdict struct {
	// Endpoints are listed by a strict majority of the voters, sorted.
	Endpoints []string `json:"endpoints"`
	// Down are the endpoints of Endpoints held out (see [Tally]), sorted.
	Down []string `json:"down"`
}

// tally is what the voters listing one endpoint say of it.
type tally struct{ listed, down, failing, served int }

// Tally counts the voters' observations. Voters are this replica's own
// entry and the entries that count under [Liveness]; tombstones and entries
// that list no endpoint (a replica that has not discovered any yet) do not
// vote, and an entry votes only for the endpoints it discovered (Listed),
// not for those it carries only for their counts.
//
// An endpoint is in the set when a strict majority of the voters list it.
// Of those, an endpoint is down when
//   - a strict majority of its listers see it down by their probes: a
//     replica whose own probes fail alone (a one-sided network fault) does
//     not take it from the others, and a tie fails open; or
//   - it failed requests (Failing), and either a strict majority of its
//     listers see it down or no lister vouches for it (Served: it answered
//     that replica's requests lately). The requests a failing engine fails
//     are often seen by one replica at a time (at light load, or with
//     affinity sending a key's requests through few replicas), so one
//     replica's failed requests take it out unless another's succeed; a
//     replica with a bad path to a healthy engine is outvoted by the
//     replicas it answers.
//
// Endpoints down for failed requests are capped, as one replica's
// ejections are (upstream.HealthConfig.MaxEjectionPercent): at most
// maxEjectionPercent of the set, at least one, the ones with the most
// failing voters first (then by ID), so every replica picks the same.
func Tally(voters []Entry, maxEjectionPercent int) Verdict {
	counts := map[string]*tally{}
	n := 0
	for _, e := range voters {
		if e.Left || !e.listsAny() {
			continue
		}
		n++
		for i, id := range e.Endpoints {
			if !e.listed(i) {
				continue
			}
			c := counts[id]
			if c == nil {
				c = &tally{}
				counts[id] = c
			}
			c.listed++
			switch {
			case e.failing(i):
				c.down++
				c.failing++
			case e.Down[i]:
				c.down++
			case e.served(i):
				c.served++
			}
		}
	}
	var v Verdict
	var failing []string
	for id, c := range counts {
		if 2*c.listed <= n {
			continue
		}
		v.Endpoints = append(v.Endpoints, id)
		switch {
		case 2*(c.down-c.failing) > c.listed:
			v.Down = append(v.Down, id)
		case c.failing > 0 && (2*c.down > c.listed || c.served == 0):
			failing = append(failing, id)
		}
	}
	slices.SortFunc(failing, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b].failing, counts[a].failing), cmp.Compare(a, b))
	})
	v.Down = append(v.Down, failing[:min(len(failing), max(1, len(v.Endpoints)*maxEjectionPercent/100))]...)
	slices.Sort(v.Endpoints)
	slices.Sort(v.Down)
	return v
}

// Equal reports whether two verdicts are the same.
func (v Verdict) Equal(w Verdict) bool {
	return slices.Equal(v.Endpoints, w.Endpoints) && slices.Equal(v.Down, w.Down)
}
