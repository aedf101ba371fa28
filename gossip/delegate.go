package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/prefixring/prefixring/workers"
)

// delegate receives memberlist's callbacks. None of them blocks: messages
// are copied onto the node's bounded inbox (dropped and counted when it is
// full; the next delta or push/pull repairs the loss), and membership
// changes only wake the merge loop, which reads membership itself.
type delegate struct{ n *Node }

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

// NodeMeta carries our wire version, for debugging mixed-version clusters.
func (d *delegate) NodeMeta(limit int) []byte { return []byte{wireVersion} }

// NotifyMsg receives a delta or full entry sent by a peer.
func (d *delegate) NotifyMsg(b []byte) {
	d.n.met.received(kindName(b), len(b))
	d.enqueue(b)
}

func (d *delegate) enqueue(b []byte) {
	select {
	case d.n.inbox <- bytes.Clone(b):
	default:
		d.n.met.dropped.WithLabelValues("inbox_full").Inc()
	}
}

// GetBroadcasts returns nothing: entries go to every member directly (see
// DESIGN.md, "Why not piggyback on memberlist's gossip").
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState returns every entry we hold, for push/pull anti-entropy.
func (d *delegate) LocalState(join bool) []byte {
	d.n.mu.Lock()
	entries := d.n.view.Table().Entries()
	d.n.mu.Unlock()
	var ops []workers.Op
	if w := d.n.workers; w != nil {
		w.GC()
		ops = w.Ops()
	}
	m := Message{Entries: entries, Workers: ops}
	d.n.addSketch(&m, join)
	b := EncodePushPull(m)
	d.n.met.sent("pushpull", len(b))
	return b
}

// MergeRemoteState queues a peer's full state like any message.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	d.n.met.received("pushpull", len(buf))
	d.enqueue(buf)
}

// NotifyJoin sends the newcomer our full entry, so it can expand our deltas
// before the next push/pull. memberlist holds its node lock here: no calls
// back into it, only non-blocking hand-offs.
func (d *delegate) NotifyJoin(node *memberlist.Node) {
	d.n.setMember(node, true)
	if node.Name != d.n.cfg.NodeName {
		c := *node
		d.n.queueFull(&c)
		d.n.queueSketch(&c)
	}
	d.n.wake()
}

// NotifyLeave: the loop rebuilds the view without the departed member.
func (d *delegate) NotifyLeave(node *memberlist.Node) {
	d.n.setMember(node, false)
	d.n.wake()
}

// NotifyUpdate keeps our copy of the member current.
func (d *delegate) NotifyUpdate(node *memberlist.Node) { d.n.setMember(node, true) }

// NotifyConflict is called when a member claims a name already taken at
// another address. If the name is ours, [Node.Start] fails.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.n.met.conflicts.Inc()
	if existing.Name == d.n.cfg.NodeName {
		addr := other.Address()
		d.n.conflict.Store(&addr)
	}
	d.n.log.Error("gossip: two members share a name; the later one is ignored",
		"name", existing.Name, "existing", existing.Address(), "other", other.Address())
}

func kindName(b []byte) string {
	if len(b) >= 2 {
		switch b[1] {
		case kindDelta:
			return "delta"
		case kindFull:
			return "full"
		case kindWorkers:
			return "workers"
		case kindSketch:
			return "sketch"
		}
	}
	return "other"
}

// newMemberlistLogger routes memberlist's "[LEVEL] ..." lines to slog.
// Warnings and errors of one kind (the line with its addresses and numbers
// taken out) are logged at most once per logEvery, with how many were
// suppressed meanwhile: memberlist logs one line per bad packet, so garbage
// or a wrong-key peer on the gossip port would otherwise flood the log.
// Every line is counted in prefixring_gossip_log_lines_total.
func newMemberlistLogger(l *slog.Logger, n *Node) *log.Logger {
	return log.New(&logWriter{l: l, n: n, last: map[string]logKind{}}, "", 0)
}

const logEvery = time.Minute

type logKind struct {
	at         time.Time
	suppressed int
}

type logWriter struct {
	l    *slog.Logger
	n    *Node
	mu   sync.Mutex
	last map[string]logKind
}

var logNoise = regexp.MustCompile(`(from=|addr=)?\S*[0-9]\S*`)

func (w *logWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimSpace(p))
	level := slog.LevelDebug
	switch {
	case bytes.HasPrefix(p, []byte("[ERR]")):
		level = slog.LevelError
	case bytes.HasPrefix(p, []byte("[WARN]")):
		level = slog.LevelWarn
	case bytes.HasPrefix(p, []byte("[INFO]")):
		level = slog.LevelInfo
	}
	if level < slog.LevelWarn {
		w.l.Log(context.Background(), level, msg)
		return len(p), nil
	}
	if w.n != nil && w.n.met != nil {
		w.n.met.logLines.WithLabelValues(level.String()).Inc()
	}
	kind := logNoise.ReplaceAllString(msg, "")
	now := time.Now()
	w.mu.Lock()
	k, seen := w.last[kind]
	if seen && now.Sub(k.at) < logEvery {
		k.suppressed++
		w.last[kind] = k
		w.mu.Unlock()
		return len(p), nil
	}
	w.last[kind] = logKind{at: now}
	w.mu.Unlock()
	if k.suppressed > 0 {
		w.l.Log(context.Background(), level, msg, "suppressed_since_last", k.suppressed)
	} else {
		w.l.Log(context.Background(), level, msg)
	}
	return len(p), nil
}
