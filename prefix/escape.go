package prefix

import "unicode/utf8"

func appendRune(b []byte, r rune) []byte { return utf8.AppendRune(b, r) }

// appendUnescaped appends raw, the content of a JSON string between its
// quotes, to out with its escapes decoded and every other byte as it is.
// It stops with false at a malformed escape, or once out holds more than
// limit bytes (limit < 0: no limit), so a caller comparing against a short
// string reads no further than it needs.
func appendUnescaped(out, raw []byte, limit int) ([]byte, bool) {
	for i := 0; i < len(raw); {
		if raw[i] != '\\' {
			out = append(out, raw[i])
			i++
		} else {
			r, next, ok := unescape(raw, i)
			if !ok {
				return out, false
			}
			out = appendRune(out, r)
			i = next
		}
		if limit >= 0 && len(out) > limit {
			return out, false
		}
	}
	return out, true
}

// unescape decodes the escape at b[i] == '\\' and returns the rune and the
// index after it, exactly as encoding/json would.
func unescape(b []byte, i int) (r rune, next int, ok bool) {
	if i+1 >= len(b) {
		return 0, 0, false
	}
	switch b[i+1] {
	case '"', '\\', '/':
		return rune(b[i+1]), i + 2, true
	case 'b':
		return '\b', i + 2, true
	case 'f':
		return '\f', i + 2, true
	case 'n':
		return '\n', i + 2, true
	case 'r':
		return '\r', i + 2, true
	case 't':
		return '\t', i + 2, true
	case 'u':
		r = hex4(b, i+2)
		if r < 0 {
			return 0, 0, false
		}
		if r < 0xD800 || r > 0xDFFF {
			return r, i + 6, true
		}
		// A surrogate: join it with a following \u low surrogate, else
		// it stands alone and becomes U+FFFD.
		if r < 0xDC00 && i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if r2 := hex4(b, i+8); r2 >= 0xDC00 && r2 <= 0xDFFF {
				return 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00), i + 12, true
			}
		}
		return utf8.RuneError, i + 6, true
	}
	return 0, 0, false
}

// hex4 parses four hex digits at b[i:], or returns -1.
func hex4(b []byte, i int) rune {
	if i+4 > len(b) {
		return -1
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}
