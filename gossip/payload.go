package gossip

import (
	"errors"
	"fmt"
	"slices"
)

// Payload is a replicated value the node carries for another package
// without understanding it, as serf carries user events: its bytes ride in
// a section of their own, under their tag, in push/pull, in what a joining
// member is sent, and in the payload's own broadcasts. The payload owns its
// codec and its merge (which must be idempotent, commutative and
// associative: push/pull repeats what broadcasts carried). The node calls
// it from its own goroutines, concurrently: it must be safe for that, and
// none of its methods may block for long.
//
// prefix.Share (the shared-prefix sketch) and workers.Share (the
// registered-worker set) implement it.
type Payload interface {
	// Tag names the payload's section: 1-255, one payload a tag. A peer
	// that carries no payload of that tag skips the section.
	Tag() byte
	// Local is this replica's own part: sent to every other live member
	// when Changed fires. It may hand out each change once (a second call
	// returns only what changed since). nil: nothing.
	Local() []byte
	// State is the payload's section of a push/pull exchange (join: the
	// exchange is a join's, or a member that joined is being sent our
	// state). nil: no section.
	State(join bool) []byte
	// Merge merges a section member from sent. A non-nil reply is sent
	// back to from, if it is a live member. An error means the section did
	// not decode: it is skipped and counted, and the rest of the message
	// merged.
	Merge(from string, b []byte) (reply []byte, err error)
	// Changed fires when Local changed and should go to every member.
	Changed() <-chan struct{}
}

// Carry makes the node replicate p. Call it before [Node.Start]; a tag of
// 0 or one already carried is an error.
func (n *Node) Carry(p Payload) error {
	tag := p.Tag()
	if tag == tagEntries {
		return errors.New("gossip: payload tag 0 is the node's own")
	}
	if slices.ContainsFunc(n.payloads, func(q Payload) bool { return q.Tag() == tag }) {
		return fmt.Errorf("gossip: payload tag %d carried twice", tag)
	}
	n.payloads = append(n.payloads, p)
	slices.SortFunc(n.payloads, func(a, b Payload) int { return int(a.Tag()) - int(b.Tag()) })
	return nil
}

// Members returns the live members, name -> address, this node included.
func (n *Node) Members() map[string]string {
	members := n.liveMembers()
	alive := make(map[string]string, len(members))
	for _, m := range members {
		alive[m.Name] = m.Address()
	}
	return alive
}

// payloadSections returns every payload's non-nil section, by calling part.
func (n *Node) payloadSections(part func(Payload) []byte) []section {
	var out []section
	for _, p := range n.payloads {
		if b := part(p); b != nil {
			out = append(out, section{tag: p.Tag(), body: b})
		}
	}
	return out
}

// carry queues p's own part for every other live member each time it
// changes, until the node stops. Each member's queue has its own
// goroutine (peers.go): a member that does not answer holds up no other.
func (n *Node) carry(p Payload) {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-p.Changed():
			b := p.Local()
			if b == nil {
				continue
			}
			msg := encodeEnvelope(n.cfg.NodeName, nil, section{tag: p.Tag(), body: b})
			for _, m := range n.others() {
				n.queueMsg(m, msg, "payload") // each member's own queue: a dead one delays no other
			}
		}
	}
}

// mergeSections hands each payload section to its payload, and queues its
// reply on the sender's queue. A section no payload carries, or that
// its payload cannot decode, is skipped alone and counted. Merge loop
// only.
func (n *Node) mergeSections(from string, sections []section) {
	for _, s := range sections {
		i := slices.IndexFunc(n.payloads, func(p Payload) bool { return p.Tag() == s.tag })
		if i < 0 {
			n.met.dropped.WithLabelValues("unknown_section").Inc()
			continue
		}
		out, err := n.payloads[i].Merge(from, s.body)
		if err != nil {
			n.met.dropped.WithLabelValues("malformed_section").Inc()
			n.warnLimited("malformed_section", "gossip: a section did not decode; skipped", "tag", s.tag, "from", from, "err", err)
			continue
		}
		if out != nil {
			n.queueReply(from, encodeEnvelope(n.cfg.NodeName, nil, section{tag: s.tag, body: out}))
		}
	}
}

// queueReply queues msg for member to, if it is a live member other than
// us. Non-blocking.
func (n *Node) queueReply(to string, msg []byte) {
	if to == n.cfg.NodeName {
		return
	}
	n.memMu.Lock()
	m, ok := n.members[to]
	n.memMu.Unlock()
	if !ok {
		return
	}
	n.queueMsg(m, msg, "payload")
}
