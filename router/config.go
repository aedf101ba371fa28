package router

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prefixring/prefixring/gossip"
	"github.com/prefixring/prefixring/policy"
	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/proxy"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/upstream"
	"github.com/prefixring/prefixring/workers"
)

// Config is everything that shapes a replica, as `prefixring serve`'s flags
// set it. The zero value is not useful; start from [DefaultConfig].
type Config struct {
	// Listen is the API listener's address (OpenAI API, /healthz,
	// /readyz); ignored when [Options.Listener] is set.
	Listen string
	// AdminListen is the admin listener's address (/metrics, /debug/*,
	// the workers API); empty: no admin listener. Ignored when
	// [Options.AdminListener] is set.
	AdminListen string
	// Pprof serves Go's profiler under /debug/pprof/ on the admin listener.
	Pprof bool
	// TLS, when its files are set, serves the API listener (and with
	// TLS.Admin the admin listener) over TLS.
	TLS TLSConfig
	// UpstreamTLS is how the replica dials https endpoints: which
	// authorities it trusts beside the system's, and the client
	// certificate it presents.
	UpstreamTLS UpstreamTLSConfig

	// Policy names the routing policy ([policy.Names]).
	Policy string
	Ring   ring.Config
	Key    prefix.Config
	Sketch SketchConfig
	Proxy  proxy.Config
	Server proxy.ServerConfig
	Health upstream.HealthConfig
	// KV is how the endpoints' KV capacities, which bound K, are learned:
	// scraped from the engines and an operator's overrides.
	KV upstream.KVConfig
	// Sources are where the endpoints come from, besides the workers API.
	Sources Sources
	// Gossip, when set, makes the replica a member of a gossip cluster;
	// nil: it balances on its own counts. Gossip steers where prompts go
	// (every member's counts and endpoint votes are believed), so it needs
	// Gossip.Key unless GossipInsecure says otherwise.
	Gossip *gossip.Config
	// GossipInsecure lets gossip run without a key, for experiments on one
	// host: any process that reaches the gossip port can then join and
	// steer routing. It is logged at start, shown in /debug/cluster and
	// exported as prefixring_gossip_insecure.
	GossipInsecure bool
	// GossipStrictSettings makes /readyz fail while a live gossip member's
	// settings differ from this replica's (see [Replica.SettingsSummary]).
	// Default false: the replica refuses the mismatched member's counts and
	// votes, says so (log, prefixring_gossip_settings_mismatch, /debug/cluster,
	// /readyz's "degraded"), and stays ready, routing on its own counts and
	// its matching peers'. A rolling change of a setting always passes
	// through a mixed fleet, and failing readiness there would take every
	// replica of one side (or all, each seeing the other side) out of
	// service at once: a worse outage than looser balancing.
	GossipStrictSettings bool
	// Workers is the workers API.
	Workers WorkersConfig

	// DrainDelay is how long /readyz fails, while new requests are still
	// served, before the listener closes (a Kubernetes Service needs that
	// long to take the pod out of its endpoints).
	DrainDelay time.Duration
	// DrainTimeout is how long in-flight requests and streams may finish
	// after the listener closed.
	DrainTimeout time.Duration
}

// SketchConfig shapes the shared-prefix sketch the key learns from.
type SketchConfig struct {
	// Enabled learns shared prefixes from the traffic and keys past them.
	Enabled bool
	// Fanout is how many distinct continuations make a prefix shared.
	Fanout int
	// Epoch: the sketch forgets a prefix not seen for two epochs.
	Epoch time.Duration
	// Interval is how often a replica with gossip takes its summary and
	// publishes it if it changed (prefix.Share.Tick). Default 1s.
	Interval time.Duration
}

// Sources are the endpoint sources; all are routed together.
type Sources struct {
	// Static are endpoint roots (http://10.0.0.7:8000, optionally
	// label=URL).
	Static []string
	// DNS is host:port (A/AAAA) or an SRV name, re-resolved every
	// DNSInterval.
	DNS         string
	DNSInterval time.Duration
	// File holds one endpoint a line, re-read every FileInterval.
	File         string
	FileInterval time.Duration
}

// ErrGossipKeyMissing refuses gossip without a key: any process that
// reaches an unencrypted gossip port joins the cluster and can take over
// routing (register its own server, vote the operator's endpoints out).
var ErrGossipKeyMissing = errors.New("gossip needs a key (--gossip-key or --gossip-key-file: base64 of 16, 24 or 32 random bytes, the same on every replica); for a local experiment only, --gossip-insecure runs without one")

// Workers API modes.
const (
	WorkersOff    = "off"
	WorkersAdmin  = "admin"
	WorkersPublic = "public"
)

// WorkersConfig is the SGLang-gateway-compatible workers API.
type WorkersConfig struct {
	// Mode is WorkersAdmin (the admin listener), WorkersPublic (the API
	// listener too) or WorkersOff.
	Mode string
	// Token, when set, is the bearer token every call needs; empty: only
	// loopback clients are served.
	Token string
	// Policy bounds the registered workers' URLs and number.
	Policy workers.Policy
}

// DefaultConfig is `prefixring serve` without flags.
func DefaultConfig() Config {
	return Config{
		Listen: ":8080", AdminListen: ":9090", Policy: policy.Default,
		Ring: ring.DefaultConfig(), Key: prefix.DefaultConfig(),
		Sketch: SketchConfig{Enabled: true, Fanout: 4, Epoch: 10 * time.Minute, Interval: time.Second},
		Proxy:  proxy.DefaultConfig(), Server: proxy.DefaultServerConfig(), Health: upstream.DefaultHealthConfig(),
		KV:         upstream.DefaultKVConfig(),
		Sources:    Sources{DNSInterval: 10 * time.Second, FileInterval: 5 * time.Second},
		TLS:        TLSConfig{Interval: 10 * time.Second},
		Workers:    WorkersConfig{Mode: WorkersAdmin, Policy: workers.DefaultPolicy()},
		DrainDelay: 5 * time.Second, DrainTimeout: 20 * time.Second,
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	s := c.Sources
	switch {
	case len(s.Static) == 0 && s.DNS == "" && s.File == "" && c.Workers.Mode != WorkersPublic:
		return errors.New("no endpoints: give static endpoints, a DNS name, an endpoints file, or the public workers API to start empty and take workers registered through /workers")
	case s.DNS != "" && s.DNSInterval <= 0:
		return fmt.Errorf("DNS interval %v: must be positive", s.DNSInterval)
	case s.File != "" && s.FileInterval <= 0:
		return fmt.Errorf("endpoints file interval %v: must be positive", s.FileInterval)
	case c.Sketch.Enabled && (c.Sketch.Fanout < 2 || c.Sketch.Epoch <= 0 || c.Sketch.Interval <= 0):
		return fmt.Errorf("sketch fanout %d, epoch %v, interval %v: want a fanout of at least 2 and a positive epoch and interval",
			c.Sketch.Fanout, c.Sketch.Epoch, c.Sketch.Interval)
	case c.DrainDelay < 0 || c.DrainTimeout < 0:
		return fmt.Errorf("drain delay %v, timeout %v: must not be negative", c.DrainDelay, c.DrainTimeout)
	}
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	switch u := c.UpstreamTLS; {
	case (u.CertFile == "") != (u.KeyFile == ""):
		return fmt.Errorf("upstream tls: give both a client certificate file and a key file (got certificate %q, key %q)", u.CertFile, u.KeyFile)
	case u.CertFile != "" && c.TLS.Interval <= 0:
		return fmt.Errorf("tls: reload interval %v must be positive", c.TLS.Interval)
	}
	switch c.Workers.Mode {
	case WorkersOff:
	case WorkersAdmin, WorkersPublic:
		if err := c.Workers.Policy.Validate(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("workers API %q: want admin, public or off", c.Workers.Mode)
	}
	if !slices.Contains(policy.Names, c.Policy) {
		return fmt.Errorf("unknown policy %q (known: %s)", c.Policy, strings.Join(policy.Names, ", "))
	}
	if err := c.Ring.Validate(); err != nil {
		return err
	}
	if err := c.Proxy.Validate(); err != nil {
		return err
	}
	if err := c.Server.Validate(); err != nil {
		return err
	}
	if err := c.KV.Validate(); err != nil {
		return err
	}
	if c.Gossip == nil {
		return nil
	}
	if c.Gossip.Key == nil && !c.GossipInsecure {
		return ErrGossipKeyMissing
	}
	return c.Gossip.Validate()
}

// TLSConfig is how the replica's listeners serve TLS.
type TLSConfig struct {
	// CertFile and KeyFile are the PEM certificate chain and private key
	// the API listener serves; both empty: plain HTTP.
	CertFile, KeyFile string
	// Admin serves the admin listener over TLS too, with the same
	// certificate: its bearer token (--admin-token) then never crosses the
	// network in the clear.
	Admin bool
	// Interval is how often the files are checked for a change (a
	// rotated certificate); SIGHUP re-reads them at once.
	Interval time.Duration
}

// Enabled reports whether the API listener serves TLS.
func (c TLSConfig) Enabled() bool { return c.CertFile != "" }

// Validate reports a TLS configuration the replica cannot serve.
func (c TLSConfig) Validate() error {
	switch {
	case (c.CertFile == "") != (c.KeyFile == ""):
		return fmt.Errorf("tls: give both a certificate file and a key file (got certificate %q, key %q)", c.CertFile, c.KeyFile)
	case c.Admin && !c.Enabled():
		return errors.New("tls: the admin listener's TLS needs a certificate and key file")
	case c.Enabled() && c.Interval <= 0:
		return fmt.Errorf("tls: reload interval %v must be positive", c.Interval)
	}
	return nil
}

// UpstreamTLSConfig is the client side of TLS to https endpoints. Its
// certificate pair is re-read as [TLSConfig]'s is (every TLSConfig.Interval
// when changed, and on SIGHUP); the CA file is read at start.
type UpstreamTLSConfig struct {
	// CAFile holds PEM certificates of authorities trusted beside the
	// system's (a cluster's private CA); empty: the system's alone.
	CAFile string
	// CertFile and KeyFile are the client certificate and key presented
	// to endpoints that ask for one; both empty: none.
	CertFile, KeyFile string
}

// Enabled reports whether anything differs from Go's defaults.
func (c UpstreamTLSConfig) Enabled() bool { return c.CAFile != "" || c.CertFile != "" }
