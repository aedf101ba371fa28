package proxy

import "testing"

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
