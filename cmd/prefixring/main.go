// Command prefixring routes OpenAI-compatible inference requests to the
// server most likely to hold their prompt prefix in its KV cache.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "prefixring:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:  "prefixring",
		Usage: "prefix-affinity router for fleets of LLM inference servers",
		Description: "Every flag can also be set through the environment variable named in its help: " +
			"PREFIXRING_ and the flag name in upper case, dashes as underscores, for serve (--load-factor: " +
			"PREFIXRING_LOAD_FACTOR); for the other commands the command's name comes first " +
			"(sim --kv-blocks: PREFIXRING_SIM_KV_BLOCKS, eval --seed: PREFIXRING_EVAL_SEED). " +
			"A variable set empty counts as not set.",
		Before: dropEmptyEnv,
		Commands: []*cli.Command{
			serveCommand(),
			simCommand(),
			loadCommand(),
			evalCommand(),
			chaosCommand(),
		},
	}
}

// env names the environment variable of a flag: --load-factor reads
// PREFIXRING_LOAD_FACTOR.
func env(flag string) []string {
	b := []byte("PREFIXRING_" + flag)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return []string{string(b)}
}

// dropEmptyEnv unsets every flag's variable that is set empty, before any
// command reads its flags. urfave/cli counts a variable that exists as the
// flag given, even empty, and reads its empty value over the default; but
// Compose (VAR: with no value) and Kubernetes (value: "") leave variables
// empty that nobody meant to set. Only empty counts: a value of whitespace
// is still read, so a secret of only whitespace stays refused.
func dropEmptyEnv(c *cli.Context) error {
	for _, cmd := range c.App.Commands {
		for _, f := range cmd.Flags {
			ev, ok := f.(interface{ GetEnvVars() []string })
			if !ok {
				continue
			}
			for _, v := range ev.GetEnvVars() {
				if s, set := os.LookupEnv(v); set && s == "" {
					if err := os.Unsetenv(v); err != nil {
						return fmt.Errorf("unset empty %s: %w", v, err)
					}
				}
			}
		}
	}
	return nil
}
