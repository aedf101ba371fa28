package workers

import "sync"

// Tag is the tag of the worker set's section in a gossip message.
const Tag = 1

// Share replicates a [Set] through gossip: it implements the gossip node's
// payload (Tag, Local, State, Merge, Changed). An op made through
// [Set.Add] or [Set.Remove] on this replica fires Changed, and the node
// sends Local (the ops this replica made since its last send: one op an
// add or a removal, whatever the set holds) to every live member;
// push/pull carries every op whenever the set holds any. A merged op is
// not re-sent: the replica that made it sent it to everyone, and push/pull
// repairs a loss, so a restarted replica has the set back from its first
// push/pull.
type Share struct {
	set     *Set
	changed chan struct{}
	mu      sync.Mutex
	sent    uint64 // the newest stamp of this replica's ops that Local sent
}

// NewShare returns the share of s; it registers with s.OnChange, so call
// it before s is used.
func NewShare(s *Set) *Share {
	sh := &Share{set: s, changed: make(chan struct{}, 1)}
	s.OnChange(func(local bool) {
		if local {
			select {
			case sh.changed <- struct{}{}:
			default: // a send is already due; it will carry this change too
			}
		}
	})
	return sh
}

// Tag is the set's section tag, [Tag].
func (sh *Share) Tag() byte { return Tag }

// Changed fires when this replica's API changed the set.
func (sh *Share) Changed() <-chan struct{} { return sh.changed }

// Local is what this replica sends every member when its API changed the
// set: its own ops stamped after the last Local's (stamps of one replica's
// ops only grow), so an add or a removal costs one op of gossip. nil:
// nothing new.
func (sh *Share) Local() []byte {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var fresh []Op
	top := sh.sent
	for _, op := range sh.set.Ops() {
		if op.Origin == sh.set.node && op.Stamp > sh.sent {
			fresh = append(fresh, op)
			top = max(top, op.Stamp)
		}
	}
	sh.sent = top
	if len(fresh) == 0 {
		return nil
	}
	return AppendOps(nil, fresh)
}

// State is the set's part of a push/pull: every op held, tombstones past
// their time to live dropped first; nil when it holds none.
func (sh *Share) State(join bool) []byte {
	sh.set.GC()
	return sh.ops()
}

func (sh *Share) ops() []byte {
	ops := sh.set.Ops()
	if len(ops) == 0 {
		return nil
	}
	return AppendOps(nil, ops)
}

// Merge merges the ops a peer sent. It never replies.
func (sh *Share) Merge(from string, b []byte) (reply []byte, err error) {
	ops, err := DecodeOps(b)
	if err != nil {
		return nil, err
	}
	sh.set.Merge(ops)
	return nil, nil
}
