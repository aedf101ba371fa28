package core

import "slices"

// Verdict is the endpoint set and health every replica computes the same way
// from the same entries.
type Verdict struct {
	// Endpoints are listed by a strict majority of the voters, sorted.
	Endpoints []string `json:"endpoints"`
	// Down are the endpoints of Endpoints that a strict majority of the
	// voters listing them see down, sorted.
	Down []string `json:"down"`
}

// Tally counts the voters' observations. Voters are this replica's own
// entry and the entries that count under [Liveness]; tombstones and entries
// that list no endpoint (a replica that has not discovered any yet) do not
// vote, and an entry votes only for the endpoints it discovered (Listed),
// not for those it carries only for their counts. A tie keeps an endpoint
// in, and healthy: a replica whose own probes fail alone (a one-sided
// network fault) does not take an endpoint away from the others, and two
// replicas that disagree fail open.
func Tally(voters []Entry) Verdict {
	listed, down := map[string]int{}, map[string]int{}
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
			listed[id]++
			if e.Down[i] {
				down[id]++
			}
		}
	}
	var v Verdict
	for id, k := range listed {
		if 2*k > n {
			v.Endpoints = append(v.Endpoints, id)
			if 2*down[id] > k {
				v.Down = append(v.Down, id)
			}
		}
	}
	slices.Sort(v.Endpoints)
	slices.Sort(v.Down)
	return v
}

// Equal reports whether two verdicts are the same.
func (v Verdict) Equal(w Verdict) bool {
	return slices.Equal(v.Endpoints, w.Endpoints) && slices.Equal(v.Down, w.Down)
}
