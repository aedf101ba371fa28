package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// The log limiter. memberlist logs one line per bad packet, and a peer
// controls part of the line (a label, a node name), so a stranger on the
// gossip port could otherwise write as many ERROR lines as it sends
// packets. Lines are limited by class, a short fixed prefix of the message
// (see logClass): one line per class per logEvery, the rest counted and
// reported with the class's next line. The classes are bounded: at most
// maxLogClasses, beyond which every new class shares one, and a class
// silent for a window is forgotten (its held-back count logged then).
const (
	logEvery      = time.Minute
	maxLogClasses = 64
	maxClassLen   = 48
	otherClass    = "other"
)

// limiter lets one log line of each class through per logEvery, and counts
// the ones it holds back.
type limiter struct {
	mu   sync.Mutex
	last map[string]logKind
}

type logKind struct {
	at         time.Time
	suppressed int
}

// heldBack is a forgotten class's count of lines held back, to be logged.
type heldBack struct {
	class string
	n     int
}

func newLimiter() *limiter { return &limiter{last: map[string]logKind{}} }

// allow reports whether a line of class may be logged now, and how many
// were held back since the last one that was. It forgets the classes
// silent for a window, returning those that held lines back.
func (l *limiter) allow(class string, now time.Time) (ok bool, suppressed int, expired []heldBack) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, seen := l.last[class]
	if !seen && len(l.last) >= maxLogClasses {
		class = otherClass
		k, seen = l.last[class]
	}
	if seen && now.Sub(k.at) < logEvery {
		k.suppressed++
		l.last[class] = k
		ok = false
	} else {
		l.last[class] = logKind{at: now}
		ok, suppressed = true, k.suppressed
	}
	for c, k := range l.last {
		if now.Sub(k.at) >= logEvery {
			if k.suppressed > 0 {
				expired = append(expired, heldBack{c, k.suppressed})
			}
			delete(l.last, c)
		}
	}
	return ok, suppressed, expired
}

// size is the number of classes held.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.last)
}

// logHeldBack logs the counts of forgotten classes.
func logHeldBack(l *slog.Logger, expired []heldBack) {
	for _, h := range expired {
		l.Warn("gossip: log lines held back", "class", h.class, "suppressed", h.n)
	}
}

// warnLimited logs a warning of kind at most once per logEvery.
func (n *Node) warnLimited(kind, msg string, args ...any) {
	ok, suppressed, expired := n.logs.allow(kind, time.Now())
	logHeldBack(n.log, expired)
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	n.log.Warn(msg, args...)
}

// newMemberlistLogger routes memberlist's "[LEVEL] ..." lines to slog.
// Warnings and errors are limited by class (see the top of this file).
// Every line is counted in prefixring_gossip_log_lines_total.
func newMemberlistLogger(l *slog.Logger, n *Node) *log.Logger {
	return log.New(&logWriter{l: l, n: n, limits: newLimiter()}, "", 0)
}

type logWriter struct {
	l      *slog.Logger
	n      *Node
	limits *limiter
}

func (w *logWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimSpace(p))
	level := slog.LevelDebug
	switch {
	case strings.HasPrefix(msg, "[ERR]"):
		level = slog.LevelError
	case strings.HasPrefix(msg, "[WARN]"):
		level = slog.LevelWarn
	case strings.HasPrefix(msg, "[INFO]"):
		level = slog.LevelInfo
	}
	if level < slog.LevelWarn {
		w.l.Log(context.Background(), level, msg)
		return len(p), nil
	}
	if w.n != nil && w.n.met != nil {
		w.n.met.logLines.WithLabelValues(level.String()).Inc()
	}
	ok, suppressed, expired := w.limits.allow(logClass(msg), time.Now())
	logHeldBack(w.l, expired)
	switch {
	case !ok:
	case suppressed > 0:
		w.l.Log(context.Background(), level, msg, "suppressed_since_last", suppressed)
	default:
		w.l.Log(context.Background(), level, msg)
	}
	return len(p), nil
}

// logClass is a memberlist line's class: its level and its message up to
// the first part that may vary (a quote, a colon, a '=', a bracket or a
// digit: labels, node names, addresses, errors), at most maxClassLen bytes.
func logClass(msg string) string {
	level, rest := "", msg
	if strings.HasPrefix(rest, "[") {
		if i := strings.IndexByte(rest, ']'); i > 0 && i < 8 {
			level, rest = rest[1:i], rest[i+1:]
		}
	}
	rest = strings.TrimPrefix(strings.TrimSpace(rest), "memberlist: ")
	if i := strings.IndexAny(rest, ":\"'=([{0123456789"); i >= 0 {
		rest = rest[:i]
	}
	if len(rest) > maxClassLen {
		rest = strings.ToValidUTF8(rest[:maxClassLen], "")
	}
	return strings.TrimSpace(level + " " + strings.TrimSpace(rest))
}
