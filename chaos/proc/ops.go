package proc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/prefixring/prefixring/internal/e2eproc"
	"github.com/prefixring/prefixring/loadgen"
)

// AddEngine starts one more engine, which no replica routes yet, and
// returns its index.
func (c *Cluster) AddEngine() (int, error) {
	port, err := freePort(c.engHost)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	i := len(c.ports)
	c.ports = append(c.ports, port)
	c.engines = append(c.engines, nil)
	c.cfg.Engines++
	c.mu.Unlock()
	return i, c.StartEngine(i)
}

// ReplaceEngine replaces engine i as a rolling update does: a new engine
// starts at a new port, every replica's endpoints file swaps the old URL
// for the new one (and SIGHUP re-reads it), and once no replica routes the
// old engine nor holds a request on it, it stops. It returns how long the
// old engine took to drain after the swap.
func (c *Cluster) ReplaceEngine(ctx context.Context, i int) (time.Duration, error) {
	c.mu.Lock()
	old, oldURL := c.engines[i], c.EngineURL(i)
	c.mu.Unlock()
	port, err := freePort(c.engHost)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.ports[i] = port
	c.mu.Unlock()
	if err := c.StartEngine(i); err != nil {
		return 0, err
	}
	if err := c.SetEndpoints(c.EngineURLs()); err != nil {
		return 0, err
	}
	newURL := c.EngineURL(i)
	drained, err := Wait(ctx, time.Minute, func() bool {
		return c.Routed(newURL, true) && c.Routed(oldURL, false) && c.held(oldURL) == 0
	})
	if err != nil {
		return drained, fmt.Errorf("%s not drained: %w", oldURL, err)
	}
	if old != nil {
		old.Stop(5 * time.Second)
	}
	return drained, nil
}

// held is the load every live replica holds on endpoint id, from
// /debug/cluster's own counts (-1 when a replica does not answer).
func (c *Cluster) held(id string) int64 {
	var n int64
	for _, i := range c.Live() {
		v, err := c.View(i)
		if err != nil {
			return -1
		}
		n += v.Local[id]
	}
	return n
}

// Workers calls replica i's workers API: POST registers url, DELETE
// removes it. It returns the status.
func (c *Cluster) Workers(i int, method, worker string) (int, error) {
	target, body := c.Admin(i)+"/workers", io.Reader(nil)
	if method == http.MethodPost {
		body = strings.NewReader(`{"url":"` + worker + `","worker_type":"regular"}`)
	} else {
		target += "/" + url.QueryEscape(worker)
	}
	return c.call(method, target, Token, body)
}

func (c *Cluster) call(method, target, token string, body io.Reader) (int, error) {
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// WorkerURLs lists the workers replica i has registered (GET /workers).
func (c *Cluster) WorkerURLs(i int) ([]string, error) {
	req, _ := http.NewRequest(http.MethodGet, c.Admin(i)+"/workers", nil)
	req.Header.Set("Authorization", "Bearer "+Token)
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v struct {
		Workers []struct {
			URL string `json:"url"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, err
	}
	var out []string
	for _, w := range v.Workers {
		out = append(out, w.URL)
	}
	return out, nil
}

// EndpointChecks is the part of /debug/endpoints the scenarios read.
type EndpointChecks struct {
	ID      string `json:"id"`
	Ejected bool   `json:"ejected"`
}

// Checks reads replica i's /debug/endpoints.
func (c *Cluster) Checks(i int) ([]EndpointChecks, error) {
	var v []EndpointChecks
	err := c.getJSON(c.Admin(i)+"/debug/endpoints", &v)
	return v, err
}

// Key asks replica i how it keys a chat body (POST /debug/key): the
// affinity key, group key and shared characters, which show the replica's
// table of shared prefixes.
func (c *Cluster) Key(i int, body []byte) (string, error) {
	resp, err := c.client.Post(c.Admin(i)+"/debug/key", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		Key, Group  string
		SharedChars int `json:"shared_chars"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.Key == "" {
		return "", fmt.Errorf("POST /debug/key at r%d: %d %v", i, resp.StatusCode, err)
	}
	return fmt.Sprintf("%s/%s/%d", v.Key, v.Group, v.SharedChars), nil
}

// KeysAgree reports whether every live replica keys every body alike.
func (c *Cluster) KeysAgree(bodies [][]byte) bool {
	for _, b := range bodies {
		first := ""
		for _, i := range c.Live() {
			k, err := c.Key(i, b)
			if err != nil {
				return false
			}
			if first == "" {
				first = k
			} else if k != first {
				return false
			}
		}
	}
	return true
}

// Ejections is replica i's prefixring_ejections_total, every reason.
func (c *Cluster) Ejections(i int) (float64, error) {
	return c.scrape(c.Admin(i), "prefixring_ejections_total")
}

// EngineServed is how many requests engine i completed
// (vllm:request_success_total, every label).
func (c *Cluster) EngineServed(i int) (float64, error) {
	return c.scrape(c.EngineURL(i), "vllm:request_success_total")
}

// scrape is the sum of metric name's samples at base's /metrics.
func (c *Cluster) scrape(base, name string) (float64, error) {
	resp, err := c.client.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return metricSum(b, name), err
}

// metricSum adds the values of every sample of the metric name in a
// Prometheus text exposition, whatever their labels (0: none, or text
// that does not parse).
func metricSum(text []byte, name string) float64 {
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return 0
	}
	sum, _ := loadgen.SumMetric(fams, name)
	return sum
}

// Stranger is a `prefixring serve` outside the cluster's trust: gossip
// without a key (--gossip-insecure), joining the replicas' gossip
// addresses, its workers API behind its own token.
type Stranger struct {
	Proc         *e2eproc.Proc
	Admin, Token string
}

// StartStranger starts a stranger in this namespace, on the engines'
// address (with namespaces, the bridge: it reaches every replica's gossip
// port).
func (c *Cluster) StartStranger() (*Stranger, error) {
	h := c.engHost
	var ports [3]int
	for k := range ports {
		p, err := freePort(h)
		if err != nil {
			return nil, err
		}
		ports[k] = p
	}
	var join []string
	for j := range c.cfg.Replicas {
		join = append(join, c.gossipAddr(j))
	}
	s := &Stranger{Admin: fmt.Sprintf("http://%s:%d", h, ports[1]), Token: "the-strangers-own"}
	argv := []string{"serve", "--listen", fmt.Sprintf("%s:%d", h, ports[0]), "--admin-listen", fmt.Sprintf("%s:%d", h, ports[1]),
		"--gossip-bind", fmt.Sprintf("%s:%d", h, ports[2]), "--join", strings.Join(join, ","), "--node-name", "stranger",
		"--gossip-insecure", "--endpoints", strings.Join(c.InitialURLs(), ","), "--admin-token", s.Token}
	p, _, err := e2eproc.Launch(c.cfg.Bin, "stranger", argv, c.cfg.Log, servingRe)
	if p != nil {
		c.push(func() { p.Stop(5 * time.Second) })
	}
	s.Proc = p
	return s, err
}
