package router

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/prefixring/prefixring/gossip"
	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/proxy"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/upstream"
	"github.com/prefixring/prefixring/workers"
)

// Options are what a replica takes from its host rather than from its
// configuration. Every field may be left zero.
type Options struct {
	// Log receives every component's logs; nil: discarded.
	Log *slog.Logger
	// Registry receives every metric and serves /metrics; nil: a new one
	// with Go's runtime and process collectors.
	Registry *prometheus.Registry
	// Transport carries requests and health probes to the endpoints; nil:
	// a transport built from the proxy configuration for requests, and
	// upstream's default for probes.
	Transport *http.Transport
	// Listener and AdminListener replace listening on Config.Listen and
	// Config.AdminListen (an in-memory network, a port picked by a test).
	// The replica closes them.
	Listener, AdminListener net.Listener
	// Resolver resolves Config.Sources.DNS; nil: net.DefaultResolver.
	Resolver upstream.Resolver
	// Seed drives the random policies; 0: the clock.
	Seed uint64
	// Hostname names this replica's worker registrations when gossip is
	// off; empty: os.Hostname.
	Hostname string
	// Reload receives the signals (SIGHUP) that ask the replica to re-read
	// what it can: the endpoints file and the TLS certificate, at once.
	// Without either, a signal is logged as ignored. nil: none.
	Reload <-chan os.Signal
}

// Replica is one router replica. Build it with [New], run it with
// [Replica.Run].
type Replica struct {
	cfg       Config
	opts      Options
	log       *slog.Logger
	reg       *prometheus.Registry
	balancer  *ring.Balancer
	endpoints *upstream.Set
	transport *http.Transport
	keying    *prefix.Live
	node      *gossip.Node  // nil: gossip off
	share     *prefix.Share // the sketch's share through gossip; nil without gossip or sketch
	paceShare *paceShare    // the pace sums' share through gossip; nil without gossip or pace
	workers   *workers.Set  // nil: workers API off
	public    *proxy.Server
	admin     http.Handler
	cert      *proxy.Certificate // nil: plain HTTP
	upCert    *proxy.Certificate // the client certificate for https endpoints; nil: none

	draining atomic.Bool
	started  chan struct{}
	abort    chan struct{}
	stopOnce sync.Once
}

// New assembles a replica. It starts nothing and listens on nothing:
// [Replica.Run] does.
func New(cfg Config, opts Options) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Replica{cfg: cfg, opts: opts, log: log, reg: opts.Registry, transport: opts.Transport,
		started: make(chan struct{}), abort: make(chan struct{})}
	var err error
	if cfg.TLS.Enabled() {
		if r.cert, err = proxy.LoadCertificate(cfg.TLS.CertFile, cfg.TLS.KeyFile); err != nil {
			return nil, err
		}
	}
	if r.reg == nil {
		r.reg = prometheus.NewRegistry()
		r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	var upTLS *tls.Config
	if cfg.UpstreamTLS.Enabled() {
		if cfg.UpstreamTLS.CertFile != "" {
			if r.upCert, err = proxy.LoadCertificate(cfg.UpstreamTLS.CertFile, cfg.UpstreamTLS.KeyFile); err != nil {
				return nil, fmt.Errorf("upstream client certificate: %w", err)
			}
		}
		if upTLS, err = proxy.ClientTLS(cfg.UpstreamTLS.CAFile, r.upCert); err != nil {
			return nil, err
		}
	}
	if r.transport == nil {
		r.transport = proxy.NewTransport(cfg.Proxy)
		r.transport.TLSClientConfig = upTLS
	}
	rc := cfg.Ring
	if !cfg.Sketch.Enabled {
		// Groups' shares come from the sketch. Without it every share is
		// unknown, and an unknown share is a rare group's: each system
		// prompt would stay on one engine for good.
		rc.GroupSpread = 0
	}
	if r.balancer, err = ring.NewBalancer(rc); err != nil {
		return nil, err
	}
	if r.keying, err = newKeying(cfg); err != nil {
		return nil, err
	}
	metrics := proxy.NewMetrics(r.reg, r.balancer.Status)
	um := upstream.NewMetrics(r.reg)
	so := upstream.Options{Metrics: um, Log: log, KV: cfg.KV}
	switch {
	case opts.Transport != nil:
		so.Transport = opts.Transport
	case upTLS != nil: // probes and KV scrapes dial https endpoints as requests do
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = upTLS
		so.Transport = t
	}
	if r.endpoints, err = upstream.NewSet(cfg.Health, so); err != nil {
		return nil, err
	}
	if err := r.startGossip(); err != nil {
		return nil, err
	}
	r.endpoints.Subscribe(func(old, cur *upstream.Snapshot) {
		metrics.SetEndpoints(cur.IDs()) // before any request can reach a new one
		applySnapshot(r.balancer, old, cur, log)
		for _, id := range removed(old, cur) {
			metrics.ForgetEndpoint(id)
			um.ForgetEndpoint(id)
		}
	})
	return r, r.assemble(metrics)
}

// assemble builds the HTTP path and the admin routes over the balancer,
// the endpoint set and the gossip node.
func (r *Replica) assemble(metrics *proxy.Metrics) error {
	cfg := r.cfg
	var chwbl policy.Picker = r.balancer
	if r.node != nil {
		chwbl = r.node
	}
	seed := r.opts.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	picker, err := policy.New(cfg.Policy, chwbl, r.balancer, seed)
	if err != nil {
		return err
	}
	pc := cfg.Proxy
	pc.Blocks = policy.ReadsBlocks(cfg.Policy)
	deps := proxy.Deps{Picker: picker, Keys: r.keying, Targets: r.endpoints, Observer: r.endpoints,
		Metrics: metrics, Log: r.log, Transport: r.transport}
	if r.keying.Sketching() {
		deps.Sketch = r.keying
	}
	rt, err := proxy.NewRouter(pc, deps)
	if err != nil {
		return err
	}
	ops := proxy.Ops{
		Gatherer: r.reg, Status: r.balancer.Status, LoadFactor: cfg.Ring.LoadFactor, Draining: r.draining.Load,
		Extra: r.debugRoutes(), Pprof: cfg.Pprof, Degraded: r.degraded, Unready: r.unready,
	}
	if ops.Workers, err = r.workersAPI(); err != nil {
		return err
	}
	ops.PublicWorkers = cfg.Workers.Mode == WorkersPublic
	if r.public, err = proxy.NewServer(cfg.Server, proxy.Public(rt, ops), r.log); err != nil {
		return err
	}
	r.admin = proxy.Admin(ops)
	return nil
}

// Balancer is the replica's balancer: its endpoints, loads and bound.
func (r *Replica) Balancer() *ring.Balancer { return r.balancer }

// Endpoints is the replica's endpoint set and health.
func (r *Replica) Endpoints() *upstream.Set { return r.endpoints }

// Node is the replica's gossip node, nil with gossip off.
func (r *Replica) Node() *gossip.Node { return r.node }

// Keys returns the keyer requests are keyed with (its table of shared
// prefixes is the one gossip merges).
func (r *Replica) Keys() *prefix.Live { return r.keying }

// Workers is the registered-worker set, nil with the workers API off.
func (r *Replica) Workers() *workers.Set { return r.workers }

// Registry is where the replica's metrics are.
func (r *Replica) Registry() *prometheus.Registry { return r.reg }

// Started is closed once the replica serves: its endpoints applied, its
// gossip node joined, its listeners accepting.
func (r *Replica) Started() <-chan struct{} { return r.started }

// Close stops the replica at once, as a crash would to its peers: the
// listeners and every connection close, the gossip node stops without
// leaving, nothing drains. [Replica.Run] then returns.
func (r *Replica) Close() { r.stopOnce.Do(func() { close(r.abort) }) }

// Run runs the replica until ctx ends, then drains it: /readyz fails at
// once while requests are still served for Config.DrainDelay, then the
// listener closes and in-flight requests get Config.DrainTimeout to
// finish, and the node leaves the cluster. It returns when everything it
// started has stopped.
func (r *Replica) Run(ctx context.Context) error {
	bg, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		r.transport.CloseIdleConnections()
	}()
	if err := r.startSources(bg, &wg); err != nil {
		r.closeListeners()
		return err
	}
	if err := r.join(ctx); err != nil {
		r.closeListeners()
		return err
	}
	if r.paceShare != nil {
		wg.Go(func() { r.paceShare.run(bg, ring.PacePublishEvery) })
	}
	if r.keying.Sketching() {
		wg.Go(func() { runSketch(bg, r.keying, r.share, r.cfg.Sketch) })
	}
	stopAdmin, err := r.serveAdmin(&wg)
	if err != nil {
		r.closeListeners()
		r.closeNode(false)
		return err
	}
	defer stopAdmin()
	ln, err := r.listener(r.opts.Listener, r.cfg.Listen)
	if err != nil {
		r.closeNode(false)
		return err
	}
	if r.cert != nil {
		ln = proxy.TLSListener(ln, r.cert.ServerTLS())
		wg.Go(func() { r.cert.Watch(bg, r.cfg.TLS.Interval, r.log) })
	}
	if r.upCert != nil {
		wg.Go(func() { r.upCert.Watch(bg, r.cfg.TLS.Interval, r.log) })
	}
	done := make(chan error, 1)
	wg.Go(func() { done <- r.public.Serve(ln) })
	r.log.Info("serving", "listen", ln.Addr().String(), "tls", r.cert != nil)
	close(r.started)

	select {
	case err := <-done:
		r.closeNode(false)
		return err
	case <-r.abort:
		r.public.Close()
		r.closeNode(false)
		return nil
	case <-ctx.Done():
	}
	r.drain(done)
	select {
	case <-r.abort: // Close cut the drain short: stop as it says, as a crash would
		r.closeNode(false)
	default:
		r.closeNode(true)
	}
	return nil
}

// startSources feeds the endpoint set from its sources and waits until
// their first snapshot reached the balancer.
func (r *Replica) startSources(bg context.Context, wg *sync.WaitGroup) error {
	s := r.cfg.Sources
	if err := r.endpoints.SetSource("static", s.Static); err != nil {
		return fmt.Errorf("static endpoints: %w", err)
	}
	if s.DNS != "" {
		res := r.opts.Resolver
		if res == nil {
			res = net.DefaultResolver
		}
		src := upstream.DNSSource{Name: s.DNS, Resolver: res}
		wg.Go(func() { src.Watch(bg, s.DNSInterval, r.endpoints, r.log) })
	}
	reread := make(chan struct{}, 1)
	if s.File != "" {
		src := upstream.FileSource{Path: s.File, Reread: reread}
		eps, err := src.Load()
		if err != nil {
			return fmt.Errorf("endpoints file: %w", err)
		}
		// Applied before the first dispatch is awaited, so the replica
		// serves with the file's endpoints from its first request.
		if len(eps) > 0 {
			if err := r.endpoints.SetSource("file", eps); err != nil {
				return fmt.Errorf("endpoints file: %w", err)
			}
		}
		wg.Go(func() { src.Watch(bg, s.FileInterval, r.endpoints, r.log) })
	}
	if r.opts.Reload != nil {
		wg.Go(func() { r.reload(bg, reread) })
	}
	wg.Go(func() { r.endpoints.Run(bg) })
	wctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if err := r.endpoints.WaitDispatched(wctx); err != nil {
		return fmt.Errorf("endpoints not applied: %w", err)
	}
	return nil
}

// reload answers each reload signal until ctx ends: the endpoints file
// and the TLS certificate are re-read at once; without either, the signal
// is logged as ignored (it no longer kills the router, as SIGHUP's default
// action would, cutting streams in flight).
func (r *Replica) reload(ctx context.Context, reread chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-r.opts.Reload:
			for _, c := range []*proxy.Certificate{r.cert, r.upCert} {
				if c != nil {
					r.log.Info("signal: re-reading a TLS certificate", "signal", sig)
					c.ReloadAndLog(r.log)
				}
			}
			if r.cfg.Sources.File == "" {
				if r.cert == nil && r.upCert == nil {
					r.log.Info("signal ignored: no endpoints file or TLS certificate to re-read", "signal", sig)
				}
				continue
			}
			r.log.Info("signal: re-reading the endpoints file", "signal", sig, "path", r.cfg.Sources.File)
			select {
			case reread <- struct{}{}:
			default: // a re-read is already due
			}
		}
	}
}

// listener is ln, or a new one on addr.
func (r *Replica) listener(ln net.Listener, addr string) (net.Listener, error) {
	if ln != nil {
		return ln, nil
	}
	return net.Listen("tcp", addr)
}

// closeListeners closes the injected listeners Run never served.
func (r *Replica) closeListeners() {
	for _, ln := range []net.Listener{r.opts.Listener, r.opts.AdminListener} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// serveAdmin serves the admin routes (nowhere without an admin listener)
// and returns the function that stops them.
func (r *Replica) serveAdmin(wg *sync.WaitGroup) (stop func(), err error) {
	if r.opts.AdminListener == nil && r.cfg.AdminListen == "" {
		return func() {}, nil
	}
	ln, err := r.listener(r.opts.AdminListener, r.cfg.AdminListen)
	if err != nil {
		if r.opts.Listener != nil {
			_ = r.opts.Listener.Close()
		}
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	if r.cfg.TLS.Admin {
		ln = proxy.TLSListener(ln, r.cert.ServerTLS())
	}
	srv := &http.Server{Handler: r.admin, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(r.log.Handler(), slog.LevelWarn)}
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error("admin listener stopped", "err", err)
		}
	})
	r.log.Info("admin", "listen", ln.Addr().String(), "tls", r.cfg.TLS.Admin)
	return func() { _ = srv.Close() }, nil
}

// drain stops the replica gracefully: /readyz fails at once while new
// requests are still served for the drain delay (a Kubernetes Service
// needs that long to take the pod out of its endpoints; connections close
// after their current response, so clients reconnect elsewhere), then the
// listener closes and in-flight requests and streams get up to the drain
// timeout to finish.
func (r *Replica) drain(done <-chan error) {
	delay, timeout := r.cfg.DrainDelay, r.cfg.DrainTimeout
	r.draining.Store(true)
	r.public.SetKeepAlivesEnabled(false)
	r.log.Info("draining: not ready, still serving", "delay", delay, "timeout", timeout)
	t := time.NewTimer(delay)
	select {
	case <-t.C:
	case err := <-done:
		r.log.Error("listener stopped during the drain delay", "err", err)
	case <-r.abort:
	}
	t.Stop()
	r.log.Info("draining: listener closed, finishing in-flight requests")
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		select {
		case <-r.abort:
			cancel()
		case <-sctx.Done():
		}
	}()
	if err := r.public.Shutdown(sctx); err != nil {
		r.log.Warn("drain deadline passed; closing remaining connections", "err", err)
		r.public.Close()
	}
	r.log.Info("stopped")
}

// hostname is this replica's name for its worker registrations.
func (r *Replica) hostname() string {
	if r.node != nil {
		return r.node.Name()
	}
	if r.opts.Hostname != "" {
		return r.opts.Hostname
	}
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "local"
}
