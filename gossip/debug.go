package gossip

import (
	"encoding/json"
	"github.com/prefixring/prefixring/gossip/core"
	"net/http"
	"slices"
	"strings"
)

// ClusterStatus is what /debug/cluster shows.
type ClusterStatus struct {
	Self string `json:"self"`
	// Isolated: discovery names other replicas, yet none accepted this one
	// (a wrong --gossip-key, a firewall): it routes on its own counts.
	Isolated bool             `json:"isolated"`
	View     core.ViewMode    `json:"view"` // what Loads adds to Remote: our last publication (shared) or Local (exact)
	Members  []MemberStatus   `json:"members"`
	Entries  []EntryStatus    `json:"entries"`
	Loads    map[string]int64 `json:"loads"` // cluster-wide load per endpoint, as the bound reads it
	Verdict  core.Verdict     `json:"verdict"`
	Remote   map[string]int64 `json:"remote"` // the other replicas' part of Loads
	Local    map[string]int64 `json:"local"`  // this replica's exact live counts
	// Settings is this replica's settings summary (what every replica
	// must share); SettingsMismatch the live members whose settings
	// differ, with theirs: their entries are refused.
	Settings         string             `json:"settings,omitempty"`
	SettingsMismatch []SettingsMismatch `json:"settings_mismatch,omitempty"`
	// ApplyLagMillis: in the aligned view, how long after its stamp a
	// publication applies.
	ApplyLagMillis int64 `json:"apply_lag_ms,omitempty"`
	// Mirrors: in the overlay view, how many other replicas are presumed
	// to have placed what this one placed since its last publication
	// (gossip/DESIGN.md, "Mirrors").
	Mirrors int `json:"mirrors,omitempty"`
}

// MemberStatus is one live memberlist member.
type MemberStatus struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

// EntryStatus is one replica's entry as this replica holds it.
type EntryStatus struct {
	Node        string `json:"node"`
	Addr        string `json:"addr"`
	Incarnation uint64 `json:"incarnation"`
	Version     uint64 `json:"version"`
	AgeMillis   int64  `json:"age_ms"` // since this replica heard it, by its own clock
	// SkewMillis is this replica's clock minus the owner's, measured on
	// the owner's own publications (absent before one arrived); see
	// prefixring_gossip_clock_skew_seconds.
	SkewMillis *int64 `json:"skew_ms,omitempty"`
	Counted    bool   `json:"counted"`
	// AppliedVersion and Pending (aligned view): the version the sum
	// reads, and how many newer publications wait for their due time.
	AppliedVersion uint64           `json:"applied_version,omitempty"`
	Pending        int              `json:"pending,omitempty"`
	Left           bool             `json:"left,omitempty"`
	Counts         map[string]int64 `json:"counts"`
	Down           []string         `json:"down,omitempty"`
	// Failing: down for failed requests; Served: vouched for (see core.Tally).
	Failing   []string `json:"failing,omitempty"`
	Served    []string `json:"served,omitempty"`
	Endpoints int      `json:"endpoints"`
}

// Status returns the cluster as this replica sees it.
func (n *Node) Status() ClusterStatus {
	now := n.cfg.Clock()
	st := ClusterStatus{Self: n.cfg.NodeName, Isolated: n.Isolated(), View: n.loads.Mode(), Loads: map[string]int64{}, Remote: map[string]int64{},
		Local: n.bal.Inflight().Counts(), Settings: n.cfg.Settings, SettingsMismatch: n.SettingsMismatch()}
	for _, m := range n.liveMembers() {
		st.Members = append(st.Members, MemberStatus{Name: m.Name, Addr: m.Address()})
	}
	slices.SortFunc(st.Members, func(a, b MemberStatus) int { return strings.Compare(a.Name, b.Name) })
	n.mu.Lock()
	defer n.mu.Unlock()
	if st.View == core.ViewAligned {
		st.ApplyLagMillis = n.cfg.ApplyLag.Milliseconds()
	}
	if st.View == core.ViewOverlay {
		st.Mirrors = n.loads.Mirrors()
	}
	for _, e := range n.view.Table().Entries() {
		es := EntryStatus{Node: e.Node, Addr: e.Addr, Incarnation: e.Incarnation, Version: e.Version,
			AgeMillis: now.UnixMilli() - e.Heard, Left: e.Left, Counts: map[string]int64{},
			Endpoints: len(e.Endpoints), Pending: n.view.Pending(e.Node)}
		if a, ok := n.view.Applied(e.Node); ok {
			es.Counted = n.view.Liveness().Counts(a, now)
			if st.View == core.ViewAligned {
				es.AppliedVersion = a.Version
			}
		}
		if d, ok := n.clocks.skew[e.Node]; ok {
			ms := d.Milliseconds()
			es.SkewMillis = &ms
		}
		for i, id := range e.Endpoints {
			if e.Counts[i] != 0 {
				es.Counts[id] = e.Counts[i]
			}
			if e.Down[i] {
				es.Down = append(es.Down, id)
			}
			if i < len(e.Failing) && e.Failing[i] {
				es.Failing = append(es.Failing, id)
			}
			if i < len(e.Served) && e.Served[i] {
				es.Served = append(es.Served, id)
			}
		}
		st.Entries = append(st.Entries, es)
	}
	st.Verdict = n.view.verdict
	for id, v := range n.view.Remote().Loads() {
		if v != 0 {
			st.Remote[id] = v
		}
	}
	// What the bound reads, for every endpoint the balancer holds: in the
	// shared view that includes our own last publication, which neither
	// Remote nor Local shows.
	bal, _ := n.bal.Status()
	for _, e := range bal {
		if e.Load != 0 {
			st.Loads[e.ID] = e.Load
		}
	}
	return st
}

// DebugHandler serves [Node.Status] as JSON, for /debug/cluster.
func (n *Node) DebugHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(n.Status())
	})
}
