package prefix

import "bytes"

// scanner walks a JSON body without building values. It is deliberately
// lax outside the fields the key reads: skip finds the end of a value by
// counting brackets and string quotes only, so it never costs more than one
// pass, and checking the rest of the body is the upstream's job.
type scanner struct {
	b []byte
	i int
}

// utf8BOM is the byte order mark a body may open with: Python's json.loads,
// which vLLM and SGLang parse bodies with, reads bytes that start with one
// (encoding/json refuses them), so such a body is no error here either.
var utf8BOM = []byte("\xef\xbb\xbf")

// newScanner returns a scanner at the start of body, past a byte order
// mark at its very start (Python reads none after white space).
func newScanner(body []byte) scanner {
	s := scanner{b: body}
	if bytes.HasPrefix(body, utf8BOM) {
		s.i = len(utf8BOM)
	}
	return s
}

// peek skips white space and returns the next byte, or 0 at the end.
func (s *scanner) peek() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// member advances to the next member of an object whose '{' has been
// consumed; n counts the members seen so far. It returns the raw key (escapes
// not decoded) with s.i at the value, or ok=false after the closing '}'.
func (s *scanner) member(n *int) (key []byte, ok bool, err error) {
	c := s.peek()
	if c == '}' {
		s.i++
		return nil, false, nil
	}
	if *n > 0 {
		if c != ',' {
			return nil, false, errSyntax
		}
		s.i++
		c = s.peek()
	}
	*n++
	if c != '"' {
		return nil, false, errSyntax
	}
	end := stringEnd(s.b, s.i+1)
	if end < 0 {
		return nil, false, errSyntax
	}
	key = s.b[s.i+1 : end]
	s.i = end + 1
	if s.peek() != ':' {
		return nil, false, errSyntax
	}
	s.i++
	if s.peek() == 0 {
		return nil, false, errSyntax
	}
	return key, true, nil
}

// element advances to the next element of an array whose '[' has been
// consumed, like member.
func (s *scanner) element(n *int) (ok bool, err error) {
	c := s.peek()
	if c == ']' {
		s.i++
		return false, nil
	}
	if *n > 0 {
		if c != ',' {
			return false, errSyntax
		}
		s.i++
		c = s.peek()
	}
	*n++
	if c == 0 {
		return false, errSyntax
	}
	return true, nil
}

// stringEnd returns the index of the quote that closes the string whose
// content starts at p (p must not be inside an escape), or -1. It jumps from
// quote to quote with IndexByte, which is what makes skipping long prompts
// cost memory bandwidth rather than a byte-at-a-time loop.
func stringEnd(b []byte, p int) int {
	for {
		q := bytes.IndexByte(b[p:], '"')
		if q < 0 {
			return -1
		}
		q += p
		k := q
		for k > p && b[k-1] == '\\' {
			k--
		}
		if (q-k)%2 == 0 {
			return q
		}
		p = q + 1
	}
}

// skip moves past the value at s.i.
func (s *scanner) skip() error {
	if s.i >= len(s.b) {
		return errSyntax
	}
	switch s.b[s.i] {
	case '"':
		end := stringEnd(s.b, s.i+1)
		if end < 0 {
			return errSyntax
		}
		s.i = end + 1
		return nil
	case '{', '[':
		return s.skipNested(0)
	}
	if len(s.literal()) == 0 {
		return errSyntax
	}
	return nil
}

// skipNested moves past the end of a container; depth is how many levels
// deep s.i already is (0 when s.i is at the opening bracket). Brackets are
// counted, not matched: a mismatch is the upstream's error to report.
func (s *scanner) skipNested(depth int) error {
	b := s.b
	for i := s.i; i < len(b); i++ {
		switch b[i] {
		case '"':
			end := stringEnd(b, i+1)
			if end < 0 {
				return errSyntax
			}
			i = end
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth <= 0 {
				s.i = i + 1
				return nil
			}
		}
	}
	return errSyntax
}

// literal consumes a number, true, false or null and returns its text.
func (s *scanner) literal() []byte {
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ':', '"', '{', '[', ' ', '\t', '\n', '\r':
			return s.b[start:s.i]
		}
		s.i++
	}
	return s.b[start:s.i]
}

// isNull reports whether the value at s.i is null, consuming it if so.
func (s *scanner) isNull() bool {
	if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		save := s.i
		if string(s.literal()) == "null" {
			return true
		}
		s.i = save
	}
	return false
}

// emptyArray reports whether the array at s.i (at its '[') has no
// elements, consuming it if so.
func (s *scanner) emptyArray() bool {
	save := s.i
	s.i++
	if s.peek() == ']' {
		s.i++
		return true
	}
	s.i = save
	return false
}

// keyIs reports whether a raw object key decodes to want. Keys with escapes
// ("mod\u0065l") are decoded so that they match like encoding/json does.
func keyIs(raw []byte, want string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == want
	}
	var buf [32]byte
	out, ok := appendUnescaped(buf[:0], raw, len(want))
	return ok && string(out) == want
}
