package proxy

// A request with both Content-Length and Transfer-Encoding is framed by
// Transfer-Encoding in net/http, which drops Content-Length before any
// handler sees it, and keeps the connection. RFC 9112 §6.1: the server
// MUST close the connection after responding to such a request, since a
// proxy in front that framed it by Content-Length reads the rest of the
// stream differently (request smuggling). So the public listener's
// connections watch each request head as it is read (headScan), and
// markResponses answers a request that had both with Connection: close.
//
// A head is scanned from the moment the connection waits for a request
// (net/http's StateIdle, or a new connection) until its blank line: the
// head of a request pipelined behind another, read while the other's
// handler ran, is not seen. net/http reads a pipelined request's head only
// after the previous response, except what its buffered reader pulled in
// with the previous body; clients and proxies that pipeline are rare, and
// such a request is still framed by Transfer-Encoding alone.

// headScan finds the Content-Length and Transfer-Encoding fields of one
// request head, fed its bytes in order, in any number of pieces.
type headScan struct {
	col      int   // bytes of the current line so far ('\r' not counted at its start)
	viable   uint8 // fields the current line may still name (bit i: headFields[i])
	seen     uint8
	started  bool // a line with content was read: a blank line now ends the head
	finished bool
}

var headFields = [2]string{"content-length:", "transfer-encoding:"}

const allFields = 1<<len(headFields) - 1

func (s *headScan) feed(b []byte) {
	for _, c := range b {
		if s.finished {
			return
		}
		switch {
		case c == '\n':
			s.finished = s.col == 0 && s.started // blank lines before the request line do not
			s.started = s.started || s.col > 0
			s.col, s.viable = 0, allFields
			continue
		case c == '\r' && s.col == 0:
			continue
		}
		lower := c
		if 'A' <= c && c <= 'Z' {
			lower += 'a' - 'A'
		}
		for i, f := range headFields {
			bit := uint8(1) << i
			if s.viable&bit == 0 {
				continue
			}
			if s.col >= len(f) || f[s.col] != lower {
				s.viable &^= bit
			} else if s.col == len(f)-1 {
				s.seen |= bit
			}
		}
		s.col++
	}
}

// ambiguous reports a head with both fields.
func (s *headScan) ambiguous() bool { return s.seen == allFields }

// reset readies the scan for the next request's head. The zero headScan
// is ready too: its first line (the request line) starts with no field
// viable.
func (s *headScan) reset() { *s = headScan{} }
