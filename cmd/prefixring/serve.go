package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/proxy"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/upstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"
)

func serveFlags() []cli.Flag {
	pd, hd, rd := proxy.DefaultConfig(), upstream.DefaultHealthConfig(), ring.DefaultConfig()
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: ":8080", EnvVars: env("listen"), Usage: "address the router serves the OpenAI API, /metrics and /debug on"},
		&cli.StringSliceFlag{Name: "endpoints", EnvVars: env("endpoints"), Usage: "inference server base URLs, comma-separated (e.g. http://10.0.0.7:8000)"},
		&cli.StringFlag{Name: "endpoints-dns", EnvVars: env("endpoints-dns"), Usage: "discover endpoints from DNS: host:port (A/AAAA records, e.g. a headless Service) or an SRV name _svc._tcp.host"},
		&cli.DurationFlag{Name: "dns-interval", Value: 10 * time.Second, EnvVars: env("dns-interval"), Usage: "how often --endpoints-dns is re-resolved"},
		&cli.Float64Flag{Name: "load-factor", Value: rd.LoadFactor, EnvVars: env("load-factor"), Usage: "c in the bound: an endpoint takes a request while, with it, it holds at most ceil(c*(total+1)/n) in flight"},
		&cli.Int64Flag{Name: "min-bound", Value: rd.MinBound, EnvVars: env("min-bound"), Usage: "every endpoint may hold this many requests whatever the bound says (keeps keys home at low load; 0: the textbook bound)"},
		&cli.IntFlag{Name: "prefix-chars", Value: prefix.DefaultConfig().MaxChars, EnvVars: env("prefix-chars"), Usage: "how much prompt text (characters) the affinity key reads"},
		&cli.StringFlag{Name: "session-header", Value: pd.SessionHeader, EnvVars: env("session-header"), Usage: "request header whose value, when present, is the affinity key (empty: off)"},
		&cli.Int64Flag{Name: "max-body-bytes", Value: pd.MaxBodyBytes, EnvVars: env("max-body-bytes"), Usage: "largest request body accepted; larger ones get 413"},
		&cli.IntFlag{Name: "max-retries", Value: pd.MaxRetries, EnvVars: env("max-retries"), Usage: "other endpoints tried when one fails before answering"},
		&cli.DurationFlag{Name: "health-interval", Value: hd.Interval, EnvVars: env("health-interval"), Usage: "interval of active health probes"},
		&cli.DurationFlag{Name: "health-timeout", Value: hd.Timeout, EnvVars: env("health-timeout"), Usage: "timeout of one health probe"},
		&cli.StringFlag{Name: "health-path", Value: hd.Path, EnvVars: env("health-path"), Usage: "path probed on each endpoint"},
		&cli.IntFlag{Name: "failure-threshold", Value: hd.FailureThreshold, EnvVars: env("failure-threshold"), Usage: "consecutive failures (probes or requests) that eject an endpoint"},
		&cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second, EnvVars: env("drain-timeout"), Usage: "on SIGTERM, how long in-flight requests and streams may finish"},
		&cli.StringFlag{Name: "pprof-listen", EnvVars: env("pprof-listen"), Usage: "serve Go's profiler (/debug/pprof/) on this address, e.g. 127.0.0.1:6060 (empty: off; never expose it publicly)"},
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
	endpoints *upstream.Endpoints
	health    *upstream.Health
	handler   http.Handler
	draining  atomic.Bool
	cluster   *clusterWiring // gossip; passes the balancer through when off
}

func newReplica(c *cli.Context, log *slog.Logger) (*replica, error) {
	rc := ring.DefaultConfig()
	rc.LoadFactor, rc.MinBound = c.Float64("load-factor"), c.Int64("min-bound")
	bal, err := ring.NewBalancer(rc)
	if err != nil {
		return nil, err
	}
	kc := prefix.DefaultConfig()
	kc.MaxChars = c.Int("prefix-chars")
	keyer, err := prefix.New(kc)
	if err != nil {
		return nil, err
	}
	r := &replica{log: log, reg: prometheus.NewRegistry(), balancer: bal}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := proxy.NewMetrics(r.reg, bal.Status)
	if r.cluster, err = newClusterWiring(c, bal, r.reg, log); err != nil {
		return nil, err
	}

	hc := upstream.DefaultHealthConfig()
	hc.Interval, hc.Timeout = c.Duration("health-interval"), c.Duration("health-timeout")
	hc.Path, hc.FailureThreshold = c.String("health-path"), c.Int("failure-threshold")
	if r.health, err = upstream.NewHealth(hc, r.cluster.HealthSink, nil, upstream.NewMetrics(r.reg), log); err != nil {
		return nil, err
	}
	r.endpoints = upstream.NewEndpoints(
		func(ids []string) {
			if err := r.cluster.SetEndpoints(ids); err != nil {
				log.Error("endpoint set rejected", "err", err)
			}
		},
		func(ids []string) { r.health.SetTargets(r.endpoints, ids) },
		func(ids []string) { log.Info("endpoints", "count", len(ids), "ids", strings.Join(ids, ",")) },
	)

	pc := proxy.DefaultConfig()
	pc.MaxBodyBytes, pc.MaxRetries = c.Int64("max-body-bytes"), c.Int("max-retries")
	pc.SessionHeader = c.String("session-header")
	router, err := proxy.NewRouter(pc, proxy.Deps{
		Picker: r.cluster.Picker, Keyer: keyer, Targets: r.endpoints, Observer: r.health, Metrics: metrics, Log: log,
	})
	if err != nil {
		return nil, err
	}
	r.handler = proxy.Mux(router, proxy.Ops{
		Gatherer: r.reg, Status: bal.Status, LoadFactor: rc.LoadFactor, Draining: r.draining.Load,
		Extra: r.cluster.Extra,
	})
	return r, nil
}

func serve(c *cli.Context) error {
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	static, dns := c.StringSlice("endpoints"), c.String("endpoints-dns")
	if (len(static) == 0) == (dns == "") {
		return errors.New("give exactly one of --endpoints or --endpoints-dns")
	}
	r, err := newReplica(c, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	bg, cancelBG := context.WithCancel(context.Background())
	defer cancelBG()

	if len(static) > 0 {
		if err := r.endpoints.Set(static); err != nil {
			return err
		}
	} else {
		src := upstream.DNSSource{Name: dns, Resolver: net.DefaultResolver}
		go src.Watch(bg, c.Duration("dns-interval"), r.endpoints, log)
	}
	go r.health.Run(bg)
	if addr := c.String("pprof-listen"); addr != "" {
		go servePprof(bg, addr, log)
	}
	if err := r.cluster.start(ctx, log); err != nil {
		return err
	}
	defer r.cluster.leave(log)

	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r.handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	log.Info("serving", "listen", ln.Addr().String())

	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// Drain: fail readiness, stop accepting, let in-flight requests and
	// streams finish up to the deadline.
	r.draining.Store(true)
	log.Info("draining", "timeout", c.Duration("drain-timeout"))
	sctx, cancel := context.WithTimeout(context.Background(), c.Duration("drain-timeout"))
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("drain deadline passed; closing remaining connections", "err", err)
		srv.Close()
	}
	log.Info("stopped")
	return nil
}

// servePprof serves the profiler on its own listener, apart from the API.
func servePprof(ctx context.Context, addr string, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	context.AfterFunc(ctx, func() { srv.Close() })
	log.Info("profiler", "listen", addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("profiler stopped", "err", err)
	}
}
