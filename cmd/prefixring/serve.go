package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/proxy"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/upstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"
)

func serveFlags() []cli.Flag {
	pd, sd, hd, rd := proxy.DefaultConfig(), proxy.DefaultServerConfig(), upstream.DefaultHealthConfig(), ring.DefaultConfig()
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: ":8080", EnvVars: env("listen"), Usage: "address the router serves the OpenAI API, /healthz and /readyz on"},
		&cli.StringFlag{Name: "admin-listen", Value: ":9090", EnvVars: env("admin-listen"), Usage: "address of the admin listener: /metrics, /debug/ring, /debug/cluster, /healthz, /readyz (and /debug/pprof/ with --pprof); reachable by Prometheus, never expose it publicly; empty: off"},
		&cli.BoolFlag{Name: "pprof", EnvVars: env("pprof"), Usage: "serve Go's profiler under /debug/pprof/ on the admin listener"},
		&cli.StringSliceFlag{Name: "endpoints", EnvVars: env("endpoints"), Usage: "inference server roots, comma-separated (http://10.0.0.7:8000; a trailing /v1 is dropped), each optionally labelled (gpu-a=http://10.0.0.7:8000: the label is what clients and logs see)"},
		&cli.StringFlag{Name: "endpoints-dns", EnvVars: env("endpoints-dns"), Usage: "discover endpoints from DNS: host:port (A/AAAA records, e.g. a headless Service) or an SRV name _svc._tcp.host; routed together with --endpoints"},
		&cli.DurationFlag{Name: "dns-interval", Value: 10 * time.Second, EnvVars: env("dns-interval"), Usage: "how often --endpoints-dns is re-resolved"},
		&cli.StringFlag{Name: "endpoints-file", EnvVars: env("endpoints-file"), Usage: "read endpoints from this file, one per line in --endpoints' syntax ('#' comments), re-read every --endpoints-file-interval; routed together with the other sources; a missing, bad or empty file keeps the last good set"},
		&cli.DurationFlag{Name: "endpoints-file-interval", Value: 5 * time.Second, EnvVars: env("endpoints-file-interval"), Usage: "how often --endpoints-file is re-read"},
		&cli.StringFlag{Name: "workers-api", Value: "admin", EnvVars: env("workers-api"), Usage: "where to serve the SGLang-gateway-compatible workers API (GET/POST/DELETE /workers, as dstack drives it): admin (the admin listener), public (the admin and the API listener: a dstack router replica group reaches the router only through its service port), or off; registered workers are routed with the other sources and gossiped to every replica"},
		&cli.StringFlag{Name: "admin-token", EnvVars: env("admin-token"), Usage: "bearer token the workers API requires (Authorization: Bearer ...); without one (and without --admin-token-file) the workers API answers loopback clients only"},
		&cli.StringFlag{Name: "admin-token-file", EnvVars: env("admin-token-file"), Usage: "read --admin-token from this file (a mounted Secret); surrounding whitespace is dropped"},
		&cli.StringFlag{Name: "policy", Value: policy.Default, EnvVars: env("policy"), Usage: "routing policy: chwbl (prefix affinity with bounded loads, gossiped), or one to compare it with: " + strings.Join(policy.Names[1:], ", ")},
		&cli.StringFlag{Name: "load-signal", Value: string(rd.Signal), EnvVars: env("load-signal"), Usage: "unit of load the bound counts and gossip shares: tokens (a request weighs its prompt's estimated tokens, body bytes / 4, until the first byte of its answer: the prefill queued on an endpoint) or requests (every request weighs 1 until it ends); every replica must use the same"},
		&cli.Float64Flag{Name: "load-factor", Value: rd.LoadFactor, EnvVars: env("load-factor"), Usage: "c in the bound: an endpoint takes a request while, with it, it holds at most ceil(c*(total+w)/n) load, w the request's weight"},
		&cli.Int64Flag{Name: "min-bound", Value: rd.MinBound, EnvVars: env("min-bound"), Usage: "every endpoint may hold this much load whatever the bound says, in the load signal's unit (default: " + fmt.Sprint(rd.MinBound) + " tokens, or " + fmt.Sprint(ring.DefaultMinRequests) + " requests under --load-signal requests; 0: the textbook bound)"},
		&cli.IntFlag{Name: "prefix-chars", Value: prefix.DefaultConfig().MaxChars, EnvVars: env("prefix-chars"), Usage: "how much of each part of a chat (tools, system messages, first user message) the affinity key reads, in characters"},
		&cli.IntFlag{Name: "prompt-chars", Value: prefix.DefaultConfig().PromptChars, EnvVars: env("prompt-chars"), Usage: "how much of a completions prompt the affinity key reads after the shared prefix it skips, in characters"},
		&cli.IntFlag{Name: "shared-chars", Value: prefix.DefaultConfig().SharedChars, EnvVars: env("shared-chars"), Usage: "the longest shared prefix (a system prompt, RAG preamble, few-shot block at the top of a prompt) the key skips, in characters"},
		&cli.Float64Flag{Name: "group-spread", Value: rd.GroupSpread, EnvVars: env("group-spread"), Usage: "keep a shared prefix (system prompt, tools, shared preamble) on as few endpoints as hold its traffic to 1/this of each one's fair share (a group with share s of the requests goes to ceil(this*n*s) of n endpoints; needs --sketch); 0: off"},
		&cli.BoolFlag{Name: "sketch", Value: true, EnvVars: env("sketch"), Usage: "learn shared prefixes from the traffic (a prefix continued in --sketch-fanout ways) and key past them; gossiped, so every replica keys alike"},
		&cli.IntFlag{Name: "sketch-fanout", Value: 4, EnvVars: env("sketch-fanout"), Usage: "distinct continuations that make a prompt prefix shared"},
		&cli.DurationFlag{Name: "sketch-epoch", Value: 10 * time.Minute, EnvVars: env("sketch-epoch"), Usage: "the sketch forgets a prefix not seen for two epochs"},
		&cli.StringFlag{Name: "session-header", Value: pd.SessionHeader, EnvVars: env("session-header"), Usage: "request header whose value, when present, is the affinity key (empty: off)"},
		&cli.BoolFlag{Name: "routing-headers", Value: pd.RoutingHeaders, EnvVars: env("routing-headers"), Usage: "add X-Prefixring-Endpoint (the endpoint's host:port, never its URL) and X-Prefixring-Decision to responses"},
		&cli.Int64Flag{Name: "max-body-bytes", Value: pd.MaxBodyBytes, EnvVars: env("max-body-bytes"), Usage: "largest request body accepted; larger ones get 413"},
		&cli.DurationFlag{Name: "client-body-timeout", Value: pd.ClientBodyTimeout, EnvVars: env("client-body-timeout"), Usage: "longest wait for the next bytes of a request body; a client stalling longer gets 408"},
		&cli.DurationFlag{Name: "client-idle-timeout", Value: sd.IdleTimeout, EnvVars: env("client-idle-timeout"), Usage: "close a client's keep-alive connection idle this long (keep it above the idle timeout of a load balancer in front)"},
		&cli.IntFlag{Name: "max-connections", Value: sd.MaxConnections, EnvVars: env("max-connections"), Usage: "most concurrent client connections (each open stream holds one); beyond it new connections wait to be accepted; 0: no cap"},
		&cli.IntFlag{Name: "max-retries", Value: pd.MaxRetries, EnvVars: env("max-retries"), Usage: "other endpoints tried when one fails (connection error, timeout, 502/503/504) before anything reached the client"},
		&cli.DurationFlag{Name: "retry-timeout", Value: pd.RetryTimeout, EnvVars: env("retry-timeout"), Usage: "retry budget from the first try: after it no new try starts, so a request that already used an endpoint's time is not replayed"},
		&cli.DurationFlag{Name: "upstream-timeout", Value: pd.UpstreamTimeout, EnvVars: env("upstream-timeout"), Usage: "longest wait for an upstream's response headers (a non-streamed completion's come when it is complete; queues can hold requests for minutes); then 504"},
		&cli.DurationFlag{Name: "health-interval", Value: hd.Interval, EnvVars: env("health-interval"), Usage: "interval of active health probes"},
		&cli.DurationFlag{Name: "health-timeout", Value: hd.Timeout, EnvVars: env("health-timeout"), Usage: "timeout of one health probe"},
		&cli.StringFlag{Name: "health-path", Value: hd.Path, EnvVars: env("health-path"), Usage: "path probed on each endpoint"},
		&cli.IntFlag{Name: "failure-threshold", Value: hd.FailureThreshold, EnvVars: env("failure-threshold"), Usage: "consecutive failed probes, or consecutive failed requests (connection errors, timeouts, 5xx), that eject an endpoint"},
		&cli.DurationFlag{Name: "ejection-time", Value: hd.BaseEjection, EnvVars: env("ejection-time"), Usage: "an endpoint ejected for failed requests stays out at least this long, times the ejections in a row (as Envoy's outlier detection); one ejected by its probes returns at its first passing probe"},
		&cli.DurationFlag{Name: "max-ejection-time", Value: hd.MaxEjection, EnvVars: env("max-ejection-time"), Usage: "cap of --ejection-time times the ejections in a row"},
		&cli.DurationFlag{Name: "drain-delay", Value: 5 * time.Second, EnvVars: env("drain-delay"), Usage: "on SIGTERM, how long /readyz fails while the router still serves new requests, so load balancers (a Kubernetes Service) stop sending before it stops accepting"},
		&cli.DurationFlag{Name: "drain-timeout", Value: 20 * time.Second, EnvVars: env("drain-timeout"), Usage: "after --drain-delay, how long in-flight requests and streams may finish (keep delay + timeout below Kubernetes' terminationGracePeriodSeconds, 30s by default)"},
		&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: env("log-level"), Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: env("log-format"), Usage: "text or json"},
	}
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:   "serve",
		Usage:  "route OpenAI-compatible requests to inference servers by prompt prefix",
		Flags:  append(serveFlags(), gossipFlags()...),
		Action: serve,
	}
}

func newLogger(c *cli.Context) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, fmt.Errorf("--log-level: %v", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.String("log-format") {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", c.String("log-format"))
}

// replica is one router's wiring, built from flags.
type replica struct {
	log       *slog.Logger
	reg       *prometheus.Registry
	balancer  *ring.Balancer
	endpoints *upstream.Set
	transport *http.Transport
	public    *proxy.Server
	admin     http.Handler
	draining  atomic.Bool
	cluster   *clusterWiring // gossip; passes the balancer through when off
	keying    *proxy.Keying
}

// ringConfig reads the bound's flags.
func ringConfig(c *cli.Context) (ring.Config, error) {
	rc := ring.DefaultConfig()
	var err error
	if rc.Signal, err = ring.ParseSignal(c.String("load-signal")); err != nil {
		return rc, fmt.Errorf("--load-signal: %w", err)
	}
	rc.LoadFactor, rc.GroupSpread = c.Float64("load-factor"), c.Float64("group-spread")
	switch {
	case c.IsSet("min-bound"):
		rc.MinBound = c.Int64("min-bound")
	case rc.Signal == ring.SignalRequests:
		rc.MinBound = ring.DefaultMinRequests
	}
	return rc, rc.Validate()
}

// newKeying reads the key's flags.
func newKeying(c *cli.Context) (*proxy.Keying, error) {
	kc := prefix.DefaultConfig()
	kc.MaxChars, kc.PromptChars, kc.SharedChars = c.Int("prefix-chars"), c.Int("prompt-chars"), c.Int("shared-chars")
	var sk *prefix.Sketch
	if c.Bool("sketch") {
		sk = prefix.NewSketch(c.Int("sketch-fanout"), 0)
	}
	return proxy.NewKeying(kc, sk)
}

func newReplica(c *cli.Context, log *slog.Logger) (*replica, error) {
	rc, err := ringConfig(c)
	if err != nil {
		return nil, err
	}
	bal, err := ring.NewBalancer(rc)
	if err != nil {
		return nil, err
	}
	keying, err := newKeying(c)
	if err != nil {
		return nil, err
	}
	r := &replica{log: log, reg: prometheus.NewRegistry(), balancer: bal, keying: keying}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := proxy.NewMetrics(r.reg, bal.Status)

	hc := upstream.DefaultHealthConfig()
	hc.Interval, hc.Timeout = c.Duration("health-interval"), c.Duration("health-timeout")
	hc.Path, hc.FailureThreshold = c.String("health-path"), c.Int("failure-threshold")
	hc.BaseEjection, hc.MaxEjection = c.Duration("ejection-time"), c.Duration("max-ejection-time")
	um := upstream.NewMetrics(r.reg)
	if r.endpoints, err = upstream.NewSet(hc, upstream.Options{Metrics: um, Log: log}); err != nil {
		return nil, err
	}
	if r.cluster, err = newClusterWiring(c, bal, r.endpoints, keying, r.reg, log); err != nil {
		return nil, err
	}
	r.endpoints.Subscribe(func(old, cur *upstream.Snapshot) {
		applySnapshot(bal, old, cur, log)
		for _, id := range removed(old, cur) {
			metrics.ForgetEndpoint(id)
			um.ForgetEndpoint(id)
		}
	})

	pc := proxy.DefaultConfig()
	pc.MaxBodyBytes, pc.MaxRetries = c.Int64("max-body-bytes"), c.Int("max-retries")
	pc.SessionHeader, pc.RoutingHeaders = c.String("session-header"), c.Bool("routing-headers")
	pc.ClientBodyTimeout, pc.RetryTimeout = c.Duration("client-body-timeout"), c.Duration("retry-timeout")
	pc.UpstreamTimeout = c.Duration("upstream-timeout")
	pc.Blocks = policy.ReadsBlocks(c.String("policy"))
	r.transport = proxy.NewTransport(pc)
	picker, err := policy.New(c.String("policy"), r.cluster.Picker, bal, uint64(time.Now().UnixNano()))
	if err != nil {
		return nil, err
	}
	deps := proxy.Deps{
		Picker: picker, Keyer: keying, Targets: r.endpoints, Observer: r.endpoints, Metrics: metrics, Log: log,
		Transport: r.transport,
	}
	if keying.Sketching() {
		deps.Sketch = keying
	}
	router, err := proxy.NewRouter(pc, deps)
	if err != nil {
		return nil, err
	}
	ops := proxy.Ops{
		Gatherer: r.reg, Status: bal.Status, LoadFactor: rc.LoadFactor, Draining: r.draining.Load,
		Extra: r.cluster.Extra, Pprof: c.Bool("pprof"), Degraded: r.cluster.degraded,
	}
	if ops.Workers, ops.PublicWorkers, err = newWorkersAPI(c, bal, r.endpoints, r.cluster, log); err != nil {
		return nil, err
	}
	ops.Extra["GET /debug/endpoints"] = jsonHandler(func() any { return r.endpoints.Health() })
	ops.Extra["GET /debug/pick"] = pickHandler(bal)
	sc := proxy.DefaultServerConfig()
	sc.IdleTimeout, sc.MaxConnections = c.Duration("client-idle-timeout"), c.Int("max-connections")
	if r.public, err = proxy.NewServer(sc, proxy.Public(router, ops), log); err != nil {
		return nil, err
	}
	r.admin = proxy.Admin(ops)
	return r, nil
}

func serve(c *cli.Context) error {
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	static, dns, file := c.StringSlice("endpoints"), c.String("endpoints-dns"), c.String("endpoints-file")
	if len(static) == 0 && dns == "" && file == "" && c.String("workers-api") != "public" {
		return errors.New("no endpoints: give --endpoints, --endpoints-dns, --endpoints-file, or --workers-api public to start empty and take workers registered through /workers")
	}
	r, err := newReplica(c, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	bg, cancelBG := context.WithCancel(context.Background())
	defer cancelBG()

	if err := r.endpoints.SetSource("static", static); err != nil {
		return fmt.Errorf("--endpoints: %w", err)
	}
	if dns != "" {
		src := upstream.DNSSource{Name: dns, Resolver: net.DefaultResolver}
		go src.Watch(bg, c.Duration("dns-interval"), r.endpoints, log)
	}
	if file != "" {
		src := upstream.FileSource{Path: file}
		if _, err := src.Load(); err != nil {
			return fmt.Errorf("--endpoints-file: %w", err)
		}
		go src.Watch(bg, c.Duration("endpoints-file-interval"), r.endpoints, log)
	}
	go r.endpoints.Run(bg)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	err = r.endpoints.WaitDispatched(wctx)
	wcancel()
	if err != nil {
		return fmt.Errorf("endpoints not applied: %w", err)
	}
	if err := r.cluster.start(ctx, log); err != nil {
		return err
	}
	defer r.cluster.leave(log)
	if r.keying.Sketching() {
		go runSketch(bg, r.keying, c.Duration("sketch-epoch"), r.cluster.node == nil)
	}

	stopAdmin, err := serveAdmin(c.String("admin-listen"), r.admin, log)
	if err != nil {
		return err
	}
	defer stopAdmin()
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- r.public.Serve(ln) }()
	log.Info("serving", "listen", ln.Addr().String())

	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	r.drain(c.Duration("drain-delay"), c.Duration("drain-timeout"), done, log)
	return nil
}

// sketchRefresh is how often a replica without gossip rebuilds its table of
// shared prefixes from its own sketch (with gossip, each publication does).
const sketchRefresh = time.Second

// runSketch starts a new sketch epoch every epoch and, alone, rebuilds the
// table of shared prefixes from the sketch every sketchRefresh, until ctx
// ends.
func runSketch(ctx context.Context, k *proxy.Keying, epoch time.Duration, alone bool) {
	rotate := time.NewTicker(epoch)
	defer rotate.Stop()
	var refresh <-chan time.Time
	if alone {
		t := time.NewTicker(sketchRefresh)
		defer t.Stop()
		refresh = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-rotate.C:
			k.Rotate()
		case <-refresh:
			k.SetCommon(k.Local())
		}
	}
}

// drain stops the replica gracefully: /readyz fails at once while new
// requests are still served for delay (a Kubernetes Service needs that long
// to take the pod out of its endpoints; connections close after their
// current response, so clients reconnect elsewhere), then the listener
// closes and in-flight requests and streams get up to timeout to finish.
func (r *replica) drain(delay, timeout time.Duration, done <-chan error, log *slog.Logger) {
	r.draining.Store(true)
	r.public.SetKeepAlivesEnabled(false)
	log.Info("draining: not ready, still serving", "delay", delay, "timeout", timeout)
	select {
	case <-time.After(delay):
	case err := <-done:
		log.Error("listener stopped during the drain delay", "err", err)
	}
	log.Info("draining: listener closed, finishing in-flight requests")
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := r.public.Shutdown(sctx); err != nil {
		log.Warn("drain deadline passed; closing remaining connections", "err", err)
		r.public.Close()
	}
	r.transport.CloseIdleConnections()
	log.Info("stopped")
}

// pickHandler answers where each of the keys in ?key=K1,K2,... (decimal
// uint64 affinity keys) would go now, through the bound as the replica
// reads it, without keeping a request there (and without counting one in
// the metrics): chaos runs compare the replicas' answers.
func pickHandler(bal *ring.Balancer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		picks := map[string]string{}
		for _, f := range strings.Split(r.URL.Query().Get("key"), ",") {
			if f == "" {
				continue
			}
			k, err := strconv.ParseUint(f, 10, 64)
			if err != nil || len(picks) >= 10000 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
					"message": fmt.Sprintf("key %q: want up to 10000 comma-separated decimal uint64 keys", f),
					"type":    "invalid_request_error", "param": "key", "code": "invalid_key"}})
				return
			}
			l, err := bal.Acquire(ring.Request{Key: k, Keyed: true})
			if err != nil {
				picks[f] = ""
				continue
			}
			l.Release()
			picks[f] = l.Endpoint
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"picks": picks})
	})
}

// jsonHandler serves what v returns as JSON.
func jsonHandler(v func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v())
	})
}

// applySnapshot hands the endpoint set and its health to the balancer in
// one update (on the set's dispatch goroutine: a ring rebuild never holds up
// a probe, a source or the gossip loop) and logs what changed.
func applySnapshot(bal *ring.Balancer, old, cur *upstream.Snapshot, log *slog.Logger) {
	eps := make([]ring.Endpoint, len(cur.Endpoints))
	for i, e := range cur.Endpoints {
		eps[i] = ring.Endpoint{ID: e.ID, Healthy: e.Healthy}
	}
	if err := bal.Update(eps); err != nil {
		log.Error("endpoint set rejected", "err", err)
		return
	}
	if !slices.Equal(old.IDs(), cur.IDs()) {
		log.Info("endpoints", "count", len(cur.Endpoints), "ids", strings.Join(cur.IDs(), ","))
	}
	for _, e := range cur.Endpoints {
		if was, ok := old.Get(e.ID); ok && was.Healthy != e.Healthy {
			log.Info("endpoint routed", "endpoint", e.ID, "healthy", e.Healthy)
		}
	}
}

// removed lists the endpoints of old that cur no longer routes to.
func removed(old, cur *upstream.Snapshot) []string {
	var out []string
	for _, e := range old.Endpoints {
		if _, ok := cur.Get(e.ID); !ok {
			out = append(out, e.ID)
		}
	}
	return out
}

// serveAdmin serves the admin routes on addr (none when addr is empty) and
// returns the function that stops them.
func serveAdmin(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--admin-listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener stopped", "err", err)
		}
	}()
	log.Info("admin", "listen", ln.Addr().String())
	return func() { srv.Close() }, nil
}
