package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/prefixring/prefixring/proxy"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/upstream"
	"github.com/prefixring/prefixring/workers"
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

// newWorkersAPI builds the registered-worker set (shared by gossip when it
// is on) and the API that writes it, or nil with --workers-api off. The
// set's members are the endpoint source "workers".
func newWorkersAPI(c *cli.Context, bal *ring.Balancer, set *upstream.Set, cw *clusterWiring, log *slog.Logger) (api *proxy.WorkersAPI, public bool, err error) {
	mode := c.String("workers-api")
	switch mode {
	case "off":
		return nil, false, nil
	case "admin", "public":
	default:
		return nil, false, fmt.Errorf("--workers-api %q: want admin, public or off", mode)
	}
	tok, err := adminToken(c)
	if err != nil {
		return nil, false, err
	}
	node := "local"
	if cw.node != nil {
		node = cw.node.Name()
	} else if h, err := os.Hostname(); err == nil {
		node = h
	}
	reg := workers.NewSet(node, nil, 0)
	reg.OnChange(func(local bool) {
		members := reg.Members()
		if err := set.SetSource("workers", members); err != nil {
			log.Warn("registered workers not applied", "err", err)
			return
		}
		log.Info("registered workers changed", "workers", len(members), "here", local)
	})
	if cw.node != nil {
		cw.node.ShareWorkers(reg)
	}
	if tok == "" {
		log.Info("workers API without --admin-token: it answers loopback clients only")
	}
	status := func(u string) (bool, int64) {
		ep, _, err := upstream.ParseEndpoint(u)
		if err != nil {
			return false, 0
		}
		st, ok := set.Snapshot().Get(ep.ID)
		return ok && st.Healthy, bal.Inflight().Load(ep.ID)
	}
	return &proxy.WorkersAPI{Registry: reg, Status: status, Token: tok}, mode == "public", nil
}
