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
	tok, file := c.String("admin-token"), c.String("admin-token-file")
	switch {
	case tok != "" && file != "":
		return "", errors.New("give --admin-token or --admin-token-file, not both")
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
