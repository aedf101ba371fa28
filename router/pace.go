package router

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/prefixring/prefixring/internal/wire"
	"github.com/prefixring/prefixring/ring"
)

// paceTag is the tag of the pace sums' section in a gossip message.
const paceTag = 3

// paceShare carries each replica's pace evidence through gossip: every
// gossip interval a replica sends its own faded sums per endpoint
// (ring.Pace.Sums) to every member, and pools the sums it hears into its
// own (ring.Pace.SetPeer), so that every replica judges an engine by all
// replicas' answers, as a count of requests in flight is every
// replica's. With three replicas each saw a third of a slow engine's
// answers and needed eight of its own before it read the engine slow
// (docs/study.md, "One pace for every replica").
//
// The sums are soft state: each message carries a replica's whole
// evidence and replaces the last, and what a departed replica sent fades
// with the pace's half-life as its own samples would. So there is no
// push/pull section: a joining member has every peer's sums within an
// interval. A record is taken from a member with this replica's settings
// only (gossip.Node.MatchingMembers), and only if it is newer than the
// last from that member (its sender's clock, in nanoseconds: a restarted
// replica's first record is newer than its predecessor's last).
type paceShare struct {
	pace    *ring.Pace
	name    string
	members func() map[string]string
	now     func() time.Time
	changed chan struct{}

	mu   sync.Mutex
	last map[string]int64 // the newest record's stamp merged per member
}

func newPaceShare(p *ring.Pace, name string, members func() map[string]string, now func() time.Time) *paceShare {
	return &paceShare{pace: p, name: name, members: members, now: now, changed: make(chan struct{}, 1), last: map[string]int64{}}
}

func (s *paceShare) Tag() byte                { return paceTag }
func (s *paceShare) Changed() <-chan struct{} { return s.changed }
func (s *paceShare) State(join bool) []byte   { return nil }

// Local is this replica's sums now, stamped with its clock.
func (s *paceShare) Local() []byte {
	at := s.now()
	return encodePace(s.name, at.UnixNano(), s.pace.Sums(at))
}

// Merge pools a member's sums; it never replies.
func (s *paceShare) Merge(from string, b []byte) ([]byte, error) {
	node, stamp, sums, err := decodePace(b)
	if err != nil {
		return nil, err
	}
	if node != from || node == s.name {
		return nil, nil
	}
	members := s.members()
	if _, ok := members[node]; !ok {
		return nil, nil
	}
	s.mu.Lock()
	newer := stamp > s.last[node]
	if newer {
		s.last[node] = stamp
	}
	if len(s.last) > 2*len(members)+8 {
		// Members come and go (pods of past rollouts): keep the stamps
		// of the present ones only. One that comes back sends newer.
		for n := range s.last {
			if _, ok := members[n]; !ok {
				delete(s.last, n)
			}
		}
	}
	s.mu.Unlock()
	if newer {
		s.pace.SetPeer(node, sums, s.now())
	}
	return nil, nil
}

// run asks the node to send the sums every interval until ctx ends.
func (s *paceShare) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			select {
			case s.changed <- struct{}{}:
			default: // the last one is not sent yet
			}
		}
	}
}

// maxPaceEndpoints bounds a record's endpoints when decoding.
const maxPaceEndpoints = 1 << 16

// encodePace is a record: the node, its stamp, and per endpoint its
// id and the nine sums (three kinds × seconds, weight, count) as IEEE
// 754 bits.
func encodePace(node string, stamp int64, sums map[string]ring.PaceSums) []byte {
	b := wire.AppendString(nil, node)
	b = binary.AppendVarint(b, stamp)
	b = binary.AppendUvarint(b, uint64(len(sums)))
	for id, ps := range sums {
		b = wire.AppendString(b, id)
		for _, c := range ps {
			for _, v := range []float64{c.Seconds, c.Weight, c.N} {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
			}
		}
	}
	return b
}

var errPaceRecord = errors.New("pace record: a sum that is not a finite, non-negative number (but a log's)")

func decodePace(b []byte) (node string, stamp int64, sums map[string]ring.PaceSums, err error) {
	r := wire.NewReader(b)
	node = r.String()
	stamp = r.Varint()
	n := r.Count(maxPaceEndpoints)
	if !r.Room(n, 1+9*8) {
		return "", 0, nil, r.Err()
	}
	sums = make(map[string]ring.PaceSums, min(n, 1024))
	for range n {
		if r.Err() != nil {
			break
		}
		id := r.String()
		var ps ring.PaceSums
		for c := range ps {
			ps[c].Seconds = math.Float64frombits(r.U64())
			ps[c].Weight = math.Float64frombits(r.U64())
			ps[c].N = math.Float64frombits(r.U64())
			if !validPaceSample(ps[c], c == ring.PaceWholeLogs) {
				r.Fail(errPaceRecord)
			}
		}
		sums[id] = ps
	}
	if err := r.Done(); err != nil {
		return "", 0, nil, err
	}
	return node, stamp, sums, nil
}

// validPaceSample: every sum finite, weight and count not negative, and
// seconds not negative but in the logs' kind (a log of a time under a
// second is).
func validPaceSample(s ring.PaceSample, logs bool) bool {
	for _, v := range []float64{s.Seconds, s.Weight, s.N} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return s.Weight >= 0 && s.N >= 0 && (logs || s.Seconds >= 0)
}
