package chaos

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/prefixring/prefixring/internal/memhttp"
)

// paths are the network paths from replicas to engines that a scenario
// cut: a replica with a bad path to an engine that serves the others (a
// broken route, a full conntrack table, a misconfigured NetworkPolicy).
type paths struct {
	mu  sync.Mutex
	cut map[int]map[string]bool // replica -> engine host:port
	trs map[int]*http.Transport // each replica's transport, by index
}

// replicaTransport is replica i's transport to the engines: the cluster's,
// with dials over a path CutPath cut refused.
func (c *Cluster) replicaTransport(i int) *http.Transport {
	tr := c.transport()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if c.paths.isCut(i, addr) {
			return nil, memhttp.ErrRefused
		}
		return c.HTTP.DialContext(ctx, network, addr)
	}
	c.paths.mu.Lock()
	if c.paths.trs == nil {
		c.paths.trs = map[int]*http.Transport{}
	}
	c.paths.trs[i] = tr
	c.paths.mu.Unlock()
	return tr
}

// CutPath cuts (or, with cut false, heals) the path from replica i to the
// engine at url: replica i's requests and probes there are refused, while
// every other replica reaches it. Its idle connections there are dropped;
// requests in flight finish.
func (c *Cluster) CutPath(i int, url string, cut bool) {
	addr := strings.TrimPrefix(url, "http://")
	c.paths.mu.Lock()
	if c.paths.cut == nil {
		c.paths.cut = map[int]map[string]bool{}
	}
	if c.paths.cut[i] == nil {
		c.paths.cut[i] = map[string]bool{}
	}
	c.paths.cut[i][addr] = cut
	tr := c.paths.trs[i]
	c.paths.mu.Unlock()
	if tr != nil {
		tr.CloseIdleConnections()
	}
}

func (p *paths) isCut(i int, addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut[i][addr]
}
