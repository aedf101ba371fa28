package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

// adminToken reads --admin-token or --admin-token-file. Errors never quote
// the token.
func adminToken(c *cli.Context) (string, error) {
	raw, file := c.String("admin-token"), c.String("admin-token-file")
	// Surrounding whitespace (a Secret's trailing newline) could never
	// match: an Authorization header's value is read without it. A token
	// of only whitespace is refused, not read as none: none opens the API
	// to local callers instead.
	tok := strings.TrimSpace(raw)
	switch {
	case raw != "" && file != "":
		return "", errors.New("give --admin-token or --admin-token-file, not both")
	case raw != "" && tok == "":
		return "", errors.New("--admin-token is only whitespace")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--admin-token-file: %w", err)
		}
		if tok = strings.TrimSpace(string(b)); tok == "" {
			return "", fmt.Errorf("--admin-token-file %s is empty", file)
		}
	}
	return tok, nil
}
