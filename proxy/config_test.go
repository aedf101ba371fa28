package proxy

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tweak := range map[string]func(*Config){
		"body limit":     func(c *Config) { c.MaxBodyBytes = 0 },
		"retries":        func(c *Config) { c.MaxRetries = -1 },
		"history":        func(c *Config) { c.CompletionHistory = -1 },
		"dial timeout":   func(c *Config) { c.DialTimeout = 0 },
		"idle conns":     func(c *Config) { c.MaxIdleConnsPerHost = 0 },
		"header space":   func(c *Config) { c.SessionHeader = "X Session" },
		"header colon":   func(c *Config) { c.SessionHeader = "X-Session:" },
		"header newline": func(c *Config) { c.SessionHeader = "X-S\nInjected" },
	} {
		c := DefaultConfig()
		tweak(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
	c := DefaultConfig()
	c.SessionHeader = ""
	if err := c.Validate(); err != nil {
		t.Errorf("empty session header (off) rejected: %v", err)
	}
}

// TestConfigValidateBodyBudget: the body budget must cover what reading one
// body of MaxBodyBytes reserves at its peak, and a refusal says how much
// that is. For 1 MiB a chunked body's buffer doubles from 64 KiB to 1 MiB,
// and a body of exactly 1 MiB fills that, so it grows once more, to the
// 2 MiB class, to see its end: 1 MiB old plus 2 MiB new, held at once
// while the bytes are copied.
func TestConfigValidateBodyBudget(t *testing.T) {
	c := DefaultConfig()
	c.MaxBodyBytes, c.MaxBufferedBodyBytes = 1<<20, 3<<20
	if err := c.Validate(); err != nil {
		t.Fatalf("budget of 3 MiB for 1 MiB bodies: %v", err)
	}
	c.MaxBufferedBodyBytes = 3<<20 - 1
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "max buffered body bytes 3145727 must be >= 3145728") {
		t.Fatalf("budget below the peak of one 1 MiB body: got %v, want a refusal naming the minimum 3145728", err)
	}
}
