package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/proxy"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/router"
	"github.com/prefixring/prefixring/upstream"
	"github.com/prefixring/prefixring/workers"
	"github.com/urfave/cli/v2"
)

func serveFlags() []cli.Flag {
	pd, sd, hd, rd := proxy.DefaultConfig(), proxy.DefaultServerConfig(), upstream.DefaultHealthConfig(), ring.DefaultConfig()
	kd := upstream.DefaultKVConfig()
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: ":8080", EnvVars: env("listen"), Usage: "address the router serves the OpenAI API, /healthz and /readyz on"},
		&cli.StringFlag{Name: "admin-listen", Value: ":9090", EnvVars: env("admin-listen"), Usage: "address of the admin listener: /metrics, /debug/ring, /debug/cluster, /healthz, /readyz (and /debug/pprof/ with --pprof); reachable by Prometheus, never expose it publicly; empty: off"},
		&cli.BoolFlag{Name: "pprof", EnvVars: env("pprof"), Usage: "serve Go's profiler under /debug/pprof/ on the admin listener"},
		&cli.StringFlag{Name: "tls-cert-file", EnvVars: env("tls-cert-file"), Usage: "serve the API listener over TLS (HTTP/1.1, TLS 1.2 or later) with this PEM certificate chain; with --tls-key-file; re-read when it changes (checked every --tls-reload-interval) and on SIGHUP, a pair that does not load keeping the last good one"},
		&cli.StringFlag{Name: "tls-key-file", EnvVars: env("tls-key-file"), Usage: "the PEM private key of --tls-cert-file"},
		&cli.BoolFlag{Name: "admin-tls", EnvVars: env("admin-tls"), Usage: "serve the admin listener over TLS too, with --tls-cert-file's certificate (Prometheus then scrapes with scheme https)"},
		&cli.DurationFlag{Name: "tls-reload-interval", Value: 10 * time.Second, EnvVars: env("tls-reload-interval"), Usage: "how often the TLS certificate and key files (--tls-cert-file's, --upstream-cert-file's) are checked for a change"},
		&cli.StringFlag{Name: "upstream-ca-file", EnvVars: env("upstream-ca-file"), Usage: "PEM certificates of authorities the router trusts, beside the system's, when it dials https endpoints (a cluster's private CA); read at start"},
		&cli.StringFlag{Name: "upstream-cert-file", EnvVars: env("upstream-cert-file"), Usage: "PEM client certificate the router presents to https endpoints that ask for one (vLLM's --ssl-cert-reqs); with --upstream-key-file; re-read as --tls-cert-file is"},
		&cli.StringFlag{Name: "upstream-key-file", EnvVars: env("upstream-key-file"), Usage: "the PEM private key of --upstream-cert-file"},
		&cli.StringSliceFlag{Name: "endpoints", EnvVars: env("endpoints"), Usage: "inference server roots, comma-separated (http://10.0.0.7:8000; a trailing /v1 is dropped), each optionally labelled (gpu-a=http://10.0.0.7:8000: the label is what clients and logs see)"},
		&cli.StringFlag{Name: "endpoints-dns", EnvVars: env("endpoints-dns"), Usage: "discover endpoints from DNS: host:port (A/AAAA records, e.g. a headless Service) or an SRV name _svc._tcp.host; routed together with --endpoints"},
		&cli.DurationFlag{Name: "dns-interval", Value: 10 * time.Second, EnvVars: env("dns-interval"), Usage: "how often --endpoints-dns is re-resolved"},
		&cli.StringFlag{Name: "endpoints-file", EnvVars: env("endpoints-file"), Usage: "read endpoints from this file, one per line in --endpoints' syntax ('#' comments), re-read every --endpoints-file-interval; routed together with the other sources; a missing, bad or empty file keeps the last good set"},
		&cli.DurationFlag{Name: "endpoints-file-interval", Value: 5 * time.Second, EnvVars: env("endpoints-file-interval"), Usage: "how often --endpoints-file is re-read"},
		&cli.StringFlag{Name: "workers-api", Value: "admin", EnvVars: env("workers-api"), Usage: "where to serve the SGLang-gateway-compatible workers API (GET/POST/DELETE /workers, as dstack drives it): admin (the admin listener), public (the admin and the API listener: a dstack router replica group reaches the router only through its service port), or off; registered workers are routed with the other sources and gossiped to every replica"},
		&cli.StringFlag{Name: "admin-token", EnvVars: env("admin-token"), Usage: "bearer token the workers API requires (Authorization: Bearer ...; surrounding whitespace is dropped); without one (and without --admin-token-file) the workers API answers only direct local callers: from loopback, with no forwarding header (Forwarded, X-Forwarded-*, X-Real-IP, Via, CDN client-IP headers), over HTTP/1.1 or later, and with Host localhost, a loopback address or dstack on the admin listener, Host dstack (dstack's calls) on the API listener"},
		&cli.IntFlag{Name: "max-workers", Value: workers.DefaultMaxWorkers, EnvVars: env("max-workers"), Usage: "most workers the workers API registers (an add past it: 409); adds heard from peers past it are dropped and counted"},
		&cli.StringSliceFlag{Name: "workers-allow-cidr", EnvVars: env("workers-allow-cidr"), Usage: "only register workers at IP addresses in these CIDRs (repeatable, comma-separated); with it a worker URL must name an IP address, not a host name; default: any address but the link-local ones"},
		&cli.BoolFlag{Name: "workers-allow-link-local", EnvVars: env("workers-allow-link-local"), Usage: "let workers be at link-local (169.254.0.0/16, fe80::/10: cloud metadata services), metadata, unspecified (0.0.0.0, ::), broadcast or multicast addresses, refused by default"},
		&cli.StringFlag{Name: "admin-token-file", EnvVars: env("admin-token-file"), Usage: "read --admin-token from this file (a mounted Secret); surrounding whitespace is dropped"},
		&cli.StringFlag{Name: "policy", Value: policy.Default, EnvVars: env("policy"), Usage: "routing policy: chwbl (prefix affinity with bounded loads, gossiped), or one to compare it with: " + strings.Join(policy.Names[1:], ", ")},
		&cli.StringFlag{Name: "load-signal", Value: string(rd.Signal), EnvVars: env("load-signal"), Usage: "unit of load the bound counts and gossip shares: tokens (a request weighs its prompt's estimated tokens, body bytes / 4, until the first byte of its answer: the prefill queued on an endpoint) or requests (every request weighs 1 until it ends); every replica must use the same"},
		&cli.Float64Flag{Name: "load-factor", Value: rd.LoadFactor, EnvVars: env("load-factor"), Usage: "c in the bound: an endpoint takes a request while, with it, it holds at most ceil(c*(total+w)/n) load, w the request's weight"},
		&cli.Int64Flag{Name: "min-bound", Value: rd.MinBound, EnvVars: env("min-bound"), Usage: "every endpoint may hold this much load whatever the bound says, in the load signal's unit (default: " + fmt.Sprint(rd.MinBound) + " tokens, or " + fmt.Sprint(ring.DefaultMinRequests) + " requests under --load-signal requests; 0: the textbook bound; a chat request its key alone places, and a later turn of any chat, have none)"},
		&cli.IntFlag{Name: "prefix-chars", Value: prefix.DefaultConfig().MaxChars, EnvVars: env("prefix-chars"), Usage: "how much of each part of a chat (tools, system messages, first user message) the affinity key reads, in characters (a multiple of 256 with --sketch)"},
		&cli.IntFlag{Name: "prompt-chars", Value: prefix.DefaultConfig().PromptChars, EnvVars: env("prompt-chars"), Usage: "how much of a completions prompt the affinity key reads after the shared prefix it skips, in characters (a multiple of 256 with --sketch)"},
		&cli.IntFlag{Name: "completion-history", Value: pd.CompletionHistory, EnvVars: env("completion-history"), Usage: "keys whose last completions prompt the router remembers, to weigh a completion at its home by what that prompt did not cover (as a chat turn by its text after the last answer); 0: off, a completion weighs its whole prompt"},
		&cli.IntFlag{Name: "shared-chars", Value: prefix.DefaultConfig().SharedChars, EnvVars: env("shared-chars"), Usage: "the longest shared prefix (a system prompt, RAG preamble, few-shot block at the top of a prompt) the key skips, in characters"},
		&cli.Float64Flag{Name: "group-spread", Value: rd.GroupSpread, EnvVars: env("group-spread"), Usage: "keep a shared prefix (system prompt, tools, shared preamble) on as few endpoints as hold its traffic to 1/this of each one's fair share (a group with share s of the requests goes to about this*n*s of n endpoints; a shared part under 1024 tokens goes where each key places it; needs --sketch); 0: off"},
		&cli.Float64Flag{Name: "group-memory", Value: rd.GroupMemory, EnvVars: env("group-memory"), Usage: "where every engine's KV capacity is known, let the copies of a shared prefix take at most this share of the memory its traffic earns: a group with share s of the requests and a shared part of L tokens goes to at most this*s*C/L endpoints, C the fleet's KV capacity (so all groups' copies together take at most this share of it); 0: no cap"},
		&cli.BoolFlag{Name: "sketch", Value: true, EnvVars: env("sketch"), Usage: "learn shared prefixes from the traffic (a prefix continued in --sketch-fanout ways) and key past them; gossiped, so every replica keys alike"},
		&cli.IntFlag{Name: "sketch-fanout", Value: 4, EnvVars: env("sketch-fanout"), Usage: "distinct continuations that make a prompt prefix shared"},
		&cli.DurationFlag{Name: "sketch-epoch", Value: 10 * time.Minute, EnvVars: env("sketch-epoch"), Usage: "the sketch forgets a prefix not seen for two epochs"},
		&cli.DurationFlag{Name: "sketch-interval", Value: time.Second, EnvVars: env("sketch-interval"), Usage: "how often this replica publishes its shared-prefix sketch summary to the gossip cluster when it changed (with --sketch)"},
		&cli.StringFlag{Name: "session-header", Value: pd.SessionHeader, EnvVars: env("session-header"), Usage: "request header whose value, when present, is the affinity key (empty: off)"},
		&cli.BoolFlag{Name: "routing-headers", Value: pd.RoutingHeaders, EnvVars: env("routing-headers"), Usage: "add X-Prefixring-Endpoint (the endpoint's label, else an opaque name; never its URL) and X-Prefixring-Decision to responses"},
		&cli.BoolFlag{Name: "routing-headers-address", Value: pd.EndpointAddress, EnvVars: env("routing-headers-address"), Usage: "X-Prefixring-Endpoint shows an unlabelled endpoint's host:port instead of an opaque name"},
		&cli.Int64Flag{Name: "max-body-bytes", Value: pd.MaxBodyBytes, EnvVars: env("max-body-bytes"), Usage: "largest request body accepted; larger ones get 413"},
		&cli.DurationFlag{Name: "client-body-timeout", Value: pd.ClientBodyTimeout, EnvVars: env("client-body-timeout"), Usage: "longest wait for the next bytes of a request body; a client stalling longer gets 408"},
		&cli.Int64Flag{Name: "max-buffered-body-bytes", Value: pd.MaxBufferedBodyBytes, EnvVars: env("max-buffered-body-bytes"), Usage: "budget for the request bodies all requests hold in memory together; a request past it gets 503 with Retry-After; at least what one body of --max-body-bytes holds at its peak (1.5 to 3 times it, and at least 64 KiB: the error names the minimum)"},
		&cli.DurationFlag{Name: "client-body-deadline", Value: pd.ClientBodyDeadline, EnvVars: env("client-body-deadline"), Usage: "longest a request body may take to arrive in all (beside --client-body-timeout's wait for each read); then 408"},
		&cli.DurationFlag{Name: "client-idle-timeout", Value: sd.IdleTimeout, EnvVars: env("client-idle-timeout"), Usage: "close a client's keep-alive connection idle this long (keep it above the idle timeout of a load balancer in front)"},
		&cli.IntFlag{Name: "max-connections", Value: sd.MaxConnections, EnvVars: env("max-connections"), Usage: "most concurrent client connections (each open stream holds one); beyond it new connections wait to be accepted; 0: no cap"},
		&cli.IntFlag{Name: "max-retries", Value: pd.MaxRetries, EnvVars: env("max-retries"), Usage: "other endpoints tried when one fails (connection error, timeout, 502/503/504) before anything reached the client"},
		&cli.DurationFlag{Name: "retry-timeout", Value: pd.RetryTimeout, EnvVars: env("retry-timeout"), Usage: "retry budget from the first try: after it no new try starts, so a request that already used an endpoint's time is not replayed"},
		&cli.DurationFlag{Name: "upstream-timeout", Value: pd.UpstreamTimeout, EnvVars: env("upstream-timeout"), Usage: "longest wait for an upstream's response headers (a non-streamed completion's come when it is complete; queues can hold requests for minutes); then 504"},
		&cli.DurationFlag{Name: "stream-idle-timeout", Value: pd.StreamIdleTimeout, EnvVars: env("stream-idle-timeout"), Usage: "end a response whose upstream sent nothing this long after its headers (Envoy's stream_idle_timeout); a stream ends with an error event"},
		&cli.DurationFlag{Name: "client-write-timeout", Value: pd.ClientWriteTimeout, EnvVars: env("client-write-timeout"), Usage: "longest one write to a client may wait (nginx's send_timeout); a client that stops reading is disconnected and its upstream released"},
		&cli.DurationFlag{Name: "health-interval", Value: hd.Interval, EnvVars: env("health-interval"), Usage: "interval of active health probes"},
		&cli.DurationFlag{Name: "health-timeout", Value: hd.Timeout, EnvVars: env("health-timeout"), Usage: "timeout of one health probe"},
		&cli.StringFlag{Name: "health-path", Value: hd.Path, EnvVars: env("health-path"), Usage: "path probed on each endpoint"},
		&cli.IntFlag{Name: "failure-threshold", Value: hd.FailureThreshold, EnvVars: env("failure-threshold"), Usage: "consecutive failed probes, or consecutive failed requests (connection errors, timeouts, 5xx), that eject an endpoint"},
		&cli.DurationFlag{Name: "ejection-time", Value: hd.BaseEjection, EnvVars: env("ejection-time"), Usage: "an endpoint ejected for failed requests stays out at least this long, times the ejections in a row (as Envoy's outlier detection); one ejected by its probes returns at its first passing probe"},
		&cli.DurationFlag{Name: "max-ejection-time", Value: hd.MaxEjection, EnvVars: env("max-ejection-time"), Usage: "cap of --ejection-time times the ejections in a row"},
		&cli.IntFlag{Name: "max-ejection-percent", Value: hd.MaxEjectionPercent, EnvVars: env("max-ejection-percent"), Usage: "most endpoints, in percent, that failed requests may eject at once (at least one); 100: no cap"},
		&cli.DurationFlag{Name: "served-window", Value: hd.ServedWindow, EnvVars: env("served-window"), Usage: "with gossip: a replica whose requests an endpoint answered this recently vouches for it, so another replica's failed requests alone do not eject it cluster-wide; failed requests no replica contradicts do"},
		&cli.IntFlag{Name: "panic-threshold", Value: hd.PanicThreshold, EnvVars: env("panic-threshold"), Usage: "below this percent of healthy endpoints, route to all of them rather than answer 503; 0: off"},
		&cli.BoolFlag{Name: "kv-average", EnvVars: env("kv-average"), Usage: "bound K (prompt tokens held in KV) by c times the average on engines whose KV capacity is unknown, as CHWBL bounds load; off: only a known capacity bounds K (docs/study.md, \"K's bound\")"},
		&cli.Int64Flag{Name: "kv-min-bound", EnvVars: env("kv-min-bound"), Usage: "with --kv-average, every engine may hold this many KV tokens whatever the average (0: the textbook bound)"},
		&cli.Float64Flag{Name: "kv-capacity-factor", EnvVars: env("kv-capacity-factor"), Value: ring.DefaultKVCapacityFactor, Usage: "bound K (prompt tokens held in KV, a group's shared part once) on an engine of known KV capacity at this many times the capacity: lower, an engine whose requests fill its memory makes fewer wait and spills more (docs/study.md, \"K's bound\")"},
		&cli.Float64Flag{Name: "pace-threshold", EnvVars: env("pace-threshold"), Value: rd.Pace.Threshold, Usage: "an engine whose answers take this many times the fleet's median (streamed: time to first token per prompt token; sent whole: time per answer) has its load read at its pace, so its keys spill while it is slow (docs/routing.md, \"Slow engines\"); 0 turns it off, else at least 1.5"},
		&cli.Float64Flag{Name: "kv-load-factor", EnvVars: env("kv-load-factor"), Value: ring.DefaultKVLoadFactor, Usage: "where every engine's KV capacity is known, an engine may also hold this many times its capacity's share of the fleet's K, so that a fleet whose memory is full everywhere keeps requests home (docs/study.md, \"K's bound\")"},
		&cli.StringSliceFlag{Name: "kv-capacity", EnvVars: env("kv-capacity"), Usage: "engines' KV cache capacity in tokens, which bounds the prompt tokens the ring keeps in flight on each (K); wins over --kv-scrape: TOKENS for every endpoint, or ENDPOINT=TOKENS for one, ENDPOINT its URL or label, comma-separated (http://10.0.0.7:8000=396000,gpu-b=200000)"},
		&cli.BoolFlag{Name: "kv-scrape", Value: kd.Scrape, EnvVars: env("kv-scrape"), Usage: "learn each engine's KV cache capacity from it: vLLM's vllm:cache_config_info or SGLang's sglang:max_total_num_tokens (--enable-metrics) at --kv-metrics-path, else llama-server's /props (n_ctx × total_slots); read when an endpoint appears and every --kv-scrape-interval, never on a request's path; an endpoint whose capacity stays unknown has no K bound"},
		&cli.DurationFlag{Name: "kv-scrape-interval", Value: kd.Interval, EnvVars: env("kv-scrape-interval"), Usage: "how often --kv-scrape re-reads each engine's KV capacity (it changes only when an engine restarts with other settings)"},
		&cli.StringFlag{Name: "kv-metrics-path", Value: kd.MetricsPath, EnvVars: env("kv-metrics-path"), Usage: "path of the engines' Prometheus metrics that --kv-scrape reads"},
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

// ringConfig reads the bound's flags.
func ringConfig(c *cli.Context) (ring.Config, error) {
	rc := ring.DefaultConfig()
	var err error
	if rc.Signal, err = ring.ParseSignal(c.String("load-signal")); err != nil {
		return rc, fmt.Errorf("--load-signal: %w", err)
	}
	rc.LoadFactor, rc.GroupSpread, rc.GroupMemory = c.Float64("load-factor"), c.Float64("group-spread"), c.Float64("group-memory")
	rc.KVAverage, rc.KVMinBound = c.Bool("kv-average"), c.Int64("kv-min-bound")
	rc.KVCapacityFactor, rc.KVLoadFactor = c.Float64("kv-capacity-factor"), c.Float64("kv-load-factor")
	rc.Pace = rc.Pace.WithThreshold(c.Float64("pace-threshold"))
	switch {
	case c.IsSet("min-bound"):
		rc.MinBound = c.Int64("min-bound")
	case rc.Signal == ring.SignalRequests:
		rc.MinBound = ring.DefaultMinRequests
	}
	return rc, rc.Validate()
}

// routerConfig turns serve's flags into the replica's configuration;
// warnings name flags given that have no effect.
func routerConfig(c *cli.Context) (cfg router.Config, warnings []string, err error) {
	cfg = router.DefaultConfig()
	if err := checkRanges(c, within("load-factor", 1, ring.MaxLoadFactor), atLeast("min-bound", 0),
		atLeast("group-spread", 0), atLeast("group-memory", 0), atLeast("kv-min-bound", 0),
		within("kv-capacity-factor", 0, ring.MaxLoadFactor),
		kvLoadFactorRange(),
		paceThresholdRange(),
		atLeast("completion-history", 0), atLeast("max-body-bytes", 1), atLeast("max-retries", 0), atLeast("retry-timeout", 0),
		positive("client-body-timeout"), positive("client-body-deadline"), positive("upstream-timeout"),
		positive("stream-idle-timeout"), positive("client-write-timeout"), positive("client-idle-timeout"),
		atLeast("max-connections", 0), positive("health-interval"), positive("health-timeout"),
		atLeast("failure-threshold", 1), atLeast("ejection-time", 0), atLeast("max-ejection-time", 0),
		within("max-ejection-percent", 0, 100), within("panic-threshold", 0, 100),
		flagRange{"served-window", func(v float64) bool { return v >= float64(time.Millisecond) }, "at least 1ms"},
		atLeast("drain-delay", 0), atLeast("drain-timeout", 0),
	); err != nil {
		return cfg, nil, err
	}
	// Ranges that hold only where their flag acts, as the configuration
	// checks them.
	var acting []flagRange
	if c.String("endpoints-dns") != "" {
		acting = append(acting, positive("dns-interval"))
	}
	if c.String("endpoints-file") != "" {
		acting = append(acting, positive("endpoints-file-interval"))
	}
	if c.Bool("sketch") {
		acting = append(acting, atLeast("sketch-fanout", 2), positive("sketch-epoch"), positive("sketch-interval"))
	}
	if c.Bool("kv-scrape") {
		acting = append(acting, positive("kv-scrape-interval"))
	}
	if c.String("tls-cert-file") != "" || c.String("upstream-cert-file") != "" {
		acting = append(acting, positive("tls-reload-interval"))
	}
	if err := checkRanges(c, acting...); err != nil {
		return cfg, nil, err
	}
	if base, most := c.Duration("ejection-time"), c.Duration("max-ejection-time"); most < base {
		return cfg, nil, fmt.Errorf("--max-ejection-time %v must be at least --ejection-time %v", most, base)
	}
	if cfg.Ring, err = ringConfig(c); err != nil {
		return cfg, nil, err
	}
	cfg.Listen, cfg.AdminListen, cfg.Pprof, cfg.Policy = c.String("listen"), c.String("admin-listen"), c.Bool("pprof"), c.String("policy")
	cfg.TLS = router.TLSConfig{CertFile: c.String("tls-cert-file"), KeyFile: c.String("tls-key-file"), Admin: c.Bool("admin-tls"),
		Interval: c.Duration("tls-reload-interval")}
	cfg.UpstreamTLS = router.UpstreamTLSConfig{CAFile: c.String("upstream-ca-file"), CertFile: c.String("upstream-cert-file"), KeyFile: c.String("upstream-key-file")}
	switch {
	case (cfg.UpstreamTLS.CertFile == "") != (cfg.UpstreamTLS.KeyFile == ""):
		return cfg, nil, errors.New("--upstream-cert-file and --upstream-key-file go together: give both or neither")
	case (cfg.TLS.CertFile == "") != (cfg.TLS.KeyFile == ""):
		return cfg, nil, errors.New("--tls-cert-file and --tls-key-file go together: give both or neither")
	case cfg.TLS.Admin && cfg.TLS.CertFile == "":
		return cfg, nil, errors.New("--admin-tls serves --tls-cert-file's certificate: give --tls-cert-file and --tls-key-file")
	}
	cfg.Key.MaxChars, cfg.Key.PromptChars, cfg.Key.SharedChars = c.Int("prefix-chars"), c.Int("prompt-chars"), c.Int("shared-chars")
	cfg.Sketch = router.SketchConfig{Enabled: c.Bool("sketch"), Fanout: c.Int("sketch-fanout"), Epoch: c.Duration("sketch-epoch"),
		Interval: c.Duration("sketch-interval")}
	if cfg.Sketch.Enabled {
		// The key's window after a skipped shared prefix ends on a chunk
		// boundary; said here by flag, where prefix.Config.Validate can
		// only name its fields.
		for _, f := range []string{"prefix-chars", "prompt-chars"} {
			if n := c.Int(f); n%prefix.ChunkChars != 0 {
				return cfg, nil, fmt.Errorf("--%s %d must be a multiple of %d with --sketch (on by default)", f, n, prefix.ChunkChars)
			}
		}
	}

	pc := &cfg.Proxy
	pc.MaxBodyBytes, pc.MaxRetries = c.Int64("max-body-bytes"), c.Int("max-retries")
	pc.CompletionHistory = c.Int("completion-history")
	pc.SessionHeader, pc.RoutingHeaders = c.String("session-header"), c.Bool("routing-headers")
	pc.EndpointAddress = c.Bool("routing-headers-address")
	pc.ClientBodyTimeout, pc.RetryTimeout = c.Duration("client-body-timeout"), c.Duration("retry-timeout")
	pc.UpstreamTimeout = c.Duration("upstream-timeout")
	pc.MaxBufferedBodyBytes, pc.ClientBodyDeadline = c.Int64("max-buffered-body-bytes"), c.Duration("client-body-deadline")
	pc.StreamIdleTimeout, pc.ClientWriteTimeout = c.Duration("stream-idle-timeout"), c.Duration("client-write-timeout")
	cfg.Server.IdleTimeout, cfg.Server.MaxConnections = c.Duration("client-idle-timeout"), c.Int("max-connections")

	hc := &cfg.Health
	hc.Interval, hc.Timeout = c.Duration("health-interval"), c.Duration("health-timeout")
	hc.Path, hc.FailureThreshold = c.String("health-path"), c.Int("failure-threshold")
	hc.BaseEjection, hc.MaxEjection = c.Duration("ejection-time"), c.Duration("max-ejection-time")
	hc.MaxEjectionPercent, hc.PanicThreshold = c.Int("max-ejection-percent"), c.Int("panic-threshold")
	hc.ServedWindow = c.Duration("served-window")

	if cfg.KV, err = kvConfig(c); err != nil {
		return cfg, nil, err
	}
	cfg.Sources = router.Sources{
		Static: c.StringSlice("endpoints"),
		DNS:    c.String("endpoints-dns"), DNSInterval: c.Duration("dns-interval"),
		File: c.String("endpoints-file"), FileInterval: c.Duration("endpoints-file-interval"),
	}
	cfg.DrainDelay, cfg.DrainTimeout = c.Duration("drain-delay"), c.Duration("drain-timeout")
	if cfg.Gossip, warnings, err = gossipConfig(c); err != nil {
		return cfg, nil, err
	}
	cfg.GossipInsecure = c.Bool("gossip-insecure")
	cfg.GossipStrictSettings = c.Bool("gossip-strict-settings")
	if cfg.Ring.GroupSpread > 0 && !cfg.Sketch.Enabled && c.IsSet("group-spread") {
		warnings = append(warnings, "--group-spread has no effect with --sketch=false (groups come from the sketch)")
	}
	if c.IsSet("group-memory") && cfg.Ring.GroupMemory > 0 && (cfg.Ring.GroupSpread <= 0 || !cfg.Sketch.Enabled) {
		warnings = append(warnings, "--group-memory has no effect without --group-spread and the sketch (it caps a group's spread)")
	}
	cfg.Workers.Mode = c.String("workers-api")
	if cfg.Workers.Token, err = adminToken(c); err != nil {
		return cfg, nil, err
	}
	cfg.Workers.Policy.MaxWorkers = c.Int("max-workers")
	cfg.Workers.Policy.AllowLinkLocal = c.Bool("workers-allow-link-local")
	for _, s := range c.StringSlice("workers-allow-cidr") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return cfg, nil, fmt.Errorf("--workers-allow-cidr %q: %v", s, err)
		}
		cfg.Workers.Policy.AllowCIDRs = append(cfg.Workers.Policy.AllowCIDRs, p.Masked())
	}
	warnings = append(warnings, adminWarnings(c, cfg)...)
	if !slices.Contains(policy.Names, cfg.Policy) {
		return cfg, nil, fmt.Errorf("--policy: unknown policy %q (known: %s)", cfg.Policy, strings.Join(policy.Names, ", "))
	}
	switch cfg.Workers.Mode {
	case router.WorkersAdmin, router.WorkersPublic, router.WorkersOff:
	default:
		return cfg, nil, fmt.Errorf("--workers-api %q: want admin, public or off", cfg.Workers.Mode)
	}
	if s := cfg.Sources; len(s.Static) == 0 && s.DNS == "" && s.File == "" && cfg.Workers.Mode != router.WorkersPublic {
		return cfg, nil, errors.New("no endpoints: give --endpoints, --endpoints-dns or --endpoints-file, or --workers-api public to start empty and take workers registered through /workers")
	}
	// Past the ranges above, what these refuse is a flag's: the workers
	// policy's is --max-workers' range, the proxy's relates
	// --max-buffered-body-bytes to --max-body-bytes (or is
	// --session-header's, not a number).
	if err := cfg.Workers.Policy.Validate(); err != nil && cfg.Workers.Mode != router.WorkersOff {
		return cfg, nil, fmt.Errorf("--max-workers: %w", err)
	}
	if err := cfg.Proxy.Validate(); err != nil {
		return cfg, nil, fmt.Errorf("--max-buffered-body-bytes, --max-body-bytes or --session-header: %w", err)
	}
	return cfg, warnings, cfg.Validate()
}

// adminWarnings name the flags given that shape what this replica does not
// run: the workers API (off, or on an admin listener turned off), the
// profiler or the admin listener's TLS without an admin listener,
// --gossip-insecure beside a key.
func adminWarnings(c *cli.Context, cfg router.Config) (warnings []string) {
	served := cfg.Workers.Mode == router.WorkersPublic || (cfg.Workers.Mode == router.WorkersAdmin && cfg.AdminListen != "")
	if !served {
		for _, f := range []string{"admin-token", "admin-token-file", "max-workers", "workers-allow-cidr", "workers-allow-link-local"} {
			if c.IsSet(f) {
				warnings = append(warnings, "--"+f+" has no effect: the workers API is not served (--workers-api off, or admin with --admin-listen empty)")
			}
		}
	}
	if cfg.Pprof && cfg.AdminListen == "" {
		warnings = append(warnings, "--pprof has no effect with --admin-listen empty")
	}
	if cfg.TLS.Admin && cfg.AdminListen == "" {
		warnings = append(warnings, "--admin-tls has no effect with --admin-listen empty")
	}
	if cfg.GossipInsecure && cfg.Gossip != nil && cfg.Gossip.Key != nil {
		warnings = append(warnings, "--gossip-insecure has no effect with a gossip key: gossip is encrypted")
	}
	return warnings
}

// kvConfig reads the KV capacity flags.
func kvConfig(c *cli.Context) (upstream.KVConfig, error) {
	kc := upstream.DefaultKVConfig()
	kc.Scrape, kc.Interval, kc.MetricsPath = c.Bool("kv-scrape"), c.Duration("kv-scrape-interval"), c.String("kv-metrics-path")
	var err error
	if kc.Capacity, err = upstream.ParseKVCapacities(c.StringSlice("kv-capacity")); err != nil {
		return kc, fmt.Errorf("--kv-capacity: %w", err)
	}
	return kc, kc.Validate()
}

func serve(c *cli.Context) error {
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	cfg, warnings, err := routerConfig(c)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		log.Warn(w)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	r, err := router.New(cfg, router.Options{Log: log, Reload: hup})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return r.Run(ctx)
}
