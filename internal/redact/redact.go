// Package redact keeps credentials out of the errors that quote a URL:
// those errors are logged and answered to API callers.
package redact

import "strings"

// Userinfo returns raw with any userinfo replaced by "***": all from the
// authority's start to the last '@', since a password may hold any
// character a parser would stop at. It works on the text, so it hides a
// password in a URL no parser accepts.
func Userinfo(raw string) string {
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return raw
	}
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	return raw[:start] + "***" + raw[at:]
}
