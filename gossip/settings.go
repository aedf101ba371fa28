package gossip

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// Settings travel in memberlist's node metadata, which memberlist already
// spreads with membership (alive messages, push/pull) and hands to every
// member before the node's own messages: no byte is added to a delta, and
// a member's settings are known before its first entry is merged. The
// metadata is
//
//	wire version (1 byte) [, digest (8 bytes LE), summary (the rest)]
//
// The digest is xxhash64 of the whole summary; the summary is cut to fit
// memberlist's 512 bytes (only what is shown is cut, never what is
// compared). An older build's metadata is the version byte alone: its
// settings are unknown, and it is counted as before.
const metaDigestLen = 8

// encodeMeta returns this node's metadata for settings ("": unknown), at
// most limit bytes.
func encodeMeta(settings string, limit int) []byte {
	b := []byte{wireVersion}
	if settings == "" {
		return b
	}
	b = binary.LittleEndian.AppendUint64(b, xxhash.Sum64String(settings))
	room := limit - len(b)
	if len(settings) > room {
		settings = strings.ToValidUTF8(settings[:max(room, 0)], "")
	}
	return append(b, settings...)
}

// peerSettings is what a member's metadata says of its settings.
type peerSettings struct {
	known   bool
	digest  uint64
	summary string
}

func decodeMeta(b []byte) peerSettings {
	if len(b) < 1+metaDigestLen {
		return peerSettings{}
	}
	return peerSettings{known: true, digest: binary.LittleEndian.Uint64(b[1:]), summary: string(b[1+metaDigestLen:])}
}

// SettingsMismatch is a live member whose settings differ from this
// replica's: its entries are refused.
type SettingsMismatch struct {
	Peer     string `json:"peer"`
	Addr     string `json:"addr"`
	Settings string `json:"settings"` // the peer's summary
}

// differs reports whether m's settings are known and differ from ours
// (which must be known too).
func (n *Node) differs(m *memberlist.Node) (peerSettings, bool) {
	if n.cfg.Settings == "" || m.Name == n.cfg.NodeName {
		return peerSettings{}, false
	}
	ps := decodeMeta(m.Meta)
	return ps, ps.known && ps.digest != n.settingsDigest
}

// SettingsMismatch returns the live members whose settings differ from
// this replica's, sorted by name.
func (n *Node) SettingsMismatch() []SettingsMismatch {
	var out []SettingsMismatch
	for _, m := range n.liveMembers() {
		if ps, bad := n.differs(&m); bad {
			out = append(out, SettingsMismatch{Peer: m.Name, Addr: m.Address(), Settings: ps.summary})
		}
	}
	slices.SortFunc(out, func(a, b SettingsMismatch) int { return strings.Compare(a.Peer, b.Peer) })
	return out
}

// mismatched reports whether the live member named node has settings that
// differ from ours. Merge loop.
func (n *Node) mismatched(node string) bool {
	n.memMu.Lock()
	m, ok := n.members[node]
	n.memMu.Unlock()
	if !ok {
		return false
	}
	_, bad := n.differs(&m)
	return bad
}

// MatchingMembers is [Node.Members] without the members whose settings
// differ from this replica's: the replicas whose sketch summaries it may
// key with.
func (n *Node) MatchingMembers() map[string]string {
	members := n.liveMembers()
	alive := make(map[string]string, len(members))
	for _, m := range members {
		if _, bad := n.differs(&m); !bad {
			alive[m.Name] = m.Address()
		}
	}
	return alive
}

// warnMismatches logs each member whose settings differ from ours, once
// for each settings it shows, with both summaries, and returns how many
// members (this one included) share ours. n.mu must be held.
func (n *Node) warnMismatches(members []memberlist.Node) (matching int) {
	seen := make(map[string]bool, len(members))
	for i := range members {
		m := &members[i]
		ps, bad := n.differs(m)
		if !bad {
			matching++
			continue
		}
		seen[m.Name] = true
		if d, ok := n.settingsWarned[m.Name]; ok && d == ps.digest {
			continue
		}
		n.settingsWarned[m.Name] = ps.digest
		n.log.Error("gossip: a peer's settings differ from this replica's; its counts and votes are refused (neither replica adds the other's load), fix the flags so every replica matches",
			"peer", m.Name, "addr", m.Address(), "theirs", ps.summary, "ours", n.cfg.Settings)
	}
	for name := range n.settingsWarned {
		if !seen[name] {
			delete(n.settingsWarned, name)
		}
	}
	return matching
}

var mismatchDesc = prometheus.NewDesc("prefixring_gossip_settings_mismatch",
	"1 for each live peer whose settings (load signal, key, bound, sketch, KV accounting) differ from this replica's: its counts and votes are refused; /debug/cluster shows both.",
	[]string{"peer"}, nil)

// mismatchCollector reports the mismatched peers at scrape time.
type mismatchCollector struct{ n *Node }

func (c mismatchCollector) Describe(ch chan<- *prometheus.Desc) { ch <- mismatchDesc }

func (c mismatchCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.n.SettingsMismatch() {
		ch <- prometheus.MustNewConstMetric(mismatchDesc, prometheus.GaugeValue, 1, m.Peer)
	}
}
