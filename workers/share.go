package workers

// Tag is the tag of the worker set's section in a gossip message.
const Tag = 1

// Share replicates a [Set] through gossip: it implements the gossip node's
// payload (Tag, Local, State, Merge, Changed). An op made through
// [Set.Add] or [Set.Remove] on this replica fires Changed, and the node
// sends Local (every op held, tombstones included) to every live member;
// push/pull carries the same ops whenever the set holds any. A merged op
// is not re-sent: the replica that made it sent it to everyone, and
// push/pull repairs a loss, so a restarted replica has the set back from
// its first push/pull.
type Share struct {
	set     *Set
	changed chan struct{}
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
// set, and a member that joins: every op held.
func (sh *Share) Local() []byte { return sh.ops() }

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
