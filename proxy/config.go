package proxy

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config configures the request path.
type Config struct {
	// MaxBodyBytes bounds a request body; larger bodies get 413. Default
	// 32 MiB: a 128K-token prompt is about 0.5 MiB of text, so this leaves
	// room for token-id prompts, images as data URLs and long tool lists.
	MaxBodyBytes int64
	// MaxRetries is how many other endpoints a request may try after the
	// first fails before answering. Default 2.
	MaxRetries int
	// SessionHeader, when present on a request, keys it by its value
	// instead of its prompt (session affinity). Default X-Session-ID; empty
	// turns it off.
	SessionHeader string
	// DialTimeout bounds connecting to an upstream. Default 2s.
	DialTimeout time.Duration
	// MaxIdleConnsPerHost is the keep-alive pool per upstream. Default 512.
	MaxIdleConnsPerHost int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		MaxBodyBytes:        32 << 20,
		MaxRetries:          2,
		SessionHeader:       "X-Session-ID",
		DialTimeout:         2 * time.Second,
		MaxIdleConnsPerHost: 512,
	}
}

// Validate reports a configuration the router cannot run with.
func (c Config) Validate() error {
	var errs []error
	if c.MaxBodyBytes < 1 {
		errs = append(errs, fmt.Errorf("max body bytes %d must be >= 1", c.MaxBodyBytes))
	}
	if c.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("max retries %d must be >= 0", c.MaxRetries))
	}
	if c.DialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("dial timeout %v must be > 0", c.DialTimeout))
	}
	if c.MaxIdleConnsPerHost < 1 {
		errs = append(errs, fmt.Errorf("max idle conns per host %d must be >= 1", c.MaxIdleConnsPerHost))
	}
	if !validHeaderName(c.SessionHeader) {
		errs = append(errs, fmt.Errorf("session header %q is not a header name", c.SessionHeader))
	}
	return errors.Join(errs...)
}

// validHeaderName reports whether s is empty (off) or an HTTP token: the
// characters RFC 9110 allows in a field name.
func validHeaderName(s string) bool {
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}
