package gossip

import (
	"github.com/prefixring/prefixring/gossip/core"

	"github.com/prefixring/prefixring/workers"
)

// The registered-worker set (the workers API's, see package workers) rides
// on two message kinds of its own, so clusters that never register a worker
// send exactly what they sent before:
//
//	workers:       n, then n ops: url, stamp, origin, flags (bit 0: removed)
//	state+workers: a state message's body, then a workers message's body
//
// A replica sends every op it holds (tombstones included) over TCP to every
// live member when its own API changed the set, and in push/pull (every
// PushPull and on join) when it holds any op. A merged op is not re-sent:
// the replica that made it sent it to everyone, and push/pull repairs a
// loss. So a restarted replica has the set back from its first push/pull.
const (
	kindWorkers      byte = 4
	kindStateWorkers byte = 5
)

// EncodeWorkers encodes the ops of the registered-worker set.
func EncodeWorkers(ops []workers.Op) []byte {
	return workers.AppendOps([]byte{wireVersion, kindWorkers}, ops)
}

// EncodeStateWorkers encodes entries and the worker set's ops for a
// push/pull exchange.
func EncodeStateWorkers(entries []core.Entry, ops []workers.Op) []byte {
	b := EncodeState(entries)
	b[1] = kindStateWorkers
	return workers.AppendOps(b, ops)
}

// ops reads the ops that end the message (workers.DecodeOps).
func (r *reader) ops() []workers.Op {
	if r.err != nil {
		return nil
	}
	ops, err := workers.DecodeOps(r.b)
	r.b = nil
	if err != nil {
		r.err = errMalformed
	}
	return ops
}

// ShareWorkers replicates s through this node: ops made through the
// workers API on this replica go to every member, ops heard from peers are
// merged into s, and push/pull carries the whole set. Call it before Start.
func (n *Node) ShareWorkers(s *workers.Set) {
	n.workers = s
	s.OnChange(func(local bool) {
		if local {
			select {
			case n.wsend <- struct{}{}:
			default: // a send is already due; it will carry this change too
			}
		}
	})
}

// sendWorkers sends every op held to every other live member, over TCP.
func (n *Node) sendWorkers() {
	msg := EncodeWorkers(n.workers.Ops())
	for _, m := range n.liveMembers() {
		if m.Name == n.cfg.NodeName {
			continue
		}
		if err := n.ml.SendReliable(&m, msg); err != nil {
			n.met.dropped.WithLabelValues("send_error").Inc()
			continue
		}
		n.met.sent("workers", len(msg))
	}
}
