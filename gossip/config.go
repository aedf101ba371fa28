package gossip

import (
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/prefixring/prefixring/gossip/core"
	"math"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures a [Node]. Zero fields take the defaults documented on
// each; [DefaultConfig] fills them in.
type Config struct {
	// NodeName is this replica's unique name in the cluster. Default: the
	// hostname. A second process with the name of a live member fails to
	// start with [ErrNameConflict]; see DESIGN.md.
	NodeName string
	// BindAddr is the host:port memberlist listens on, UDP and TCP.
	// Default 0.0.0.0:7946.
	BindAddr string
	// AdvertiseAddr is the host:port other replicas reach this one at
	// (host an IP); port 0 advertises the port bound. Default:
	// memberlist's choice (the bind address, or the first private IP when
	// bound to 0.0.0.0).
	AdvertiseAddr string
	// Join lists peers to join: host:port or host (the bind port is
	// assumed), IPs or DNS names such as a headless Service. Names are
	// re-resolved on every attempt. Empty: start a cluster of one.
	Join []string
	// RejoinInterval is how often the replica looks for peers that
	// discovery names and that are not members (a healed partition, a
	// replica started apart), and joins through up to three of them.
	// Default 10s. A first join that fails is retried sooner, from 100 ms
	// doubling up to this.
	RejoinInterval time.Duration
	// Resolver resolves Join names; nil: net.DefaultResolver.
	Resolver Resolver
	// Key is the memberlist keyring key (16, 24 or 32 bytes; AES-128/192/256).
	// With a key, a node without it can neither join nor inject state.
	Key []byte
	// Interval is how often this replica publishes its entry when it
	// changed, in a cluster small enough for PublishRate. Default 10ms:
	// the other replicas' placements reach the bound that much sooner,
	// which the demo's bursts need (docs/study.md, "Gossip's interval").
	Interval time.Duration
	// PublishRate caps the messages a second this replica sends to publish
	// its entry, one to each other member counting one: with N live
	// members a changed entry goes out every Interval times the smallest
	// whole number of Intervals that spans (N-1)/PublishRate (see
	// [Config.PublishEvery]). Default 1000: every 10ms up to 11 replicas,
	// every 50ms at 50. 0 in a Config means the default.
	PublishRate float64
	// Heartbeat is the longest time between two publications of an
	// unchanged entry. Default 1s.
	Heartbeat time.Duration
	// View is what the bound reads as the cluster-wide load:
	// core.ViewOverlay (every replica's last publication, with this
	// replica's placements since its own last publication laid over it),
	// core.ViewShared (every replica's last publication, its own included:
	// all replicas read the same numbers) or core.ViewExact (its own live
	// counters plus the others' publications). Default core.ViewOverlay
	// (see docs/gossip-measures.md and DESIGN.md). core.ViewAligned is
	// the shared view with every publication applied ApplyLag after its
	// stamp, so replicas agree while publications are on the wire.
	View core.ViewMode
	// ApplyLag is how long after its stamp a publication applies in
	// core.ViewAligned (at most this long after its receipt, whatever the
	// owner's clock says); the other views do not read it. It must exceed
	// the delivery delay between replicas, and stay below StaleAfter.
	// Default 250ms.
	ApplyLag time.Duration
	// PushPull is memberlist's full-state anti-entropy interval. Default 5s.
	PushPull time.Duration
	// StaleAfter is how long a replica's entry counts after its stamp
	// without a newer one. It must exceed Heartbeat. Default 5s.
	StaleAfter time.Duration
	// ForgetAfter is when an entry that stopped updating is removed from
	// memory. Default 1m.
	ForgetAfter time.Duration
	// QueueSize bounds the queue between memberlist callbacks and the
	// merge loop; messages beyond it are dropped and counted. Default 1024.
	QueueSize int
	// MaxPacket is the largest message sent as one UDP packet. A larger
	// entry goes out as a delta (no endpoint list), with the full entry
	// sent over TCP when the list changes. Default 1340: memberlist's UDP
	// buffer (1400 bytes) less the keyring's 29 (version, nonce, GCM tag)
	// and room for its framing, so an idle 500-endpoint delta (1,230 B
	// with K and the evidence bits) still goes as one datagram.
	MaxPacket int
	// Copies is how many times each UDP publication is sent: at 20% loss
	// one copy leaves a peer a publication behind a fifth of the time, two
	// 4% of it (chaos's TestLossyGossip). A publication over MaxPacket goes
	// once, over TCP. Default 2.
	Copies int

	// MaxEjectionPercent caps the share of the endpoint set the cluster
	// holds out for failed requests, at least one; 100 turns the cap off
	// (upstream.HealthConfig.MaxEjectionPercent, which a router passes).
	// DefaultConfig: 20; zero: one at a time.
	MaxEjectionPercent int
	// Settings is what every replica of the cluster must share for their
	// counts and keys to add up (the load's unit, the key's settings, the
	// bound...), one canonical, human-readable line ("name=value ...";
	// the router builds it from its config). Replicas exchange its digest
	// and the line in their memberlist metadata, and refuse the entries of
	// a replica whose settings differ: they are neither summed nor voted,
	// and the mismatch is logged, exported and shown in /debug/cluster.
	// Empty: unknown; a replica of unknown settings (or an older build) is
	// counted.
	Settings string

	// Sink receives the cluster's verdict on the endpoint set and health;
	// nil: the node applies verdicts to its balancer itself. A router passes its
	// upstream.Set.
	Sink VerdictSink

	// Clock is the replica's clock: the stamps it publishes and the ages
	// it reads. nil: time.Now. Tests skew it to play a host whose clock is
	// off.
	Clock func() time.Time

	// Transport replaces memberlist's UDP/TCP transport (tests).
	Transport memberlist.NodeAwareTransport
	// Tune adjusts the memberlist configuration last (tests).
	Tune func(*memberlist.Config)
}

// DefaultConfig returns a config with every default filled in.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		NodeName: host, BindAddr: "0.0.0.0:7946", RejoinInterval: 10 * time.Second,
		Interval: 10 * time.Millisecond, PublishRate: 1000, Heartbeat: time.Second, View: core.ViewOverlay, ApplyLag: 250 * time.Millisecond, PushPull: 5 * time.Second,
		StaleAfter: 5 * time.Second, ForgetAfter: time.Minute, QueueSize: 1024, MaxPacket: 1340, Copies: 2,
		MaxEjectionPercent: 20,
	}
}

// PublishEvery is how many Intervals apart this replica publishes a
// changed entry among members live ones, itself included: the fewest
// that keep its publications, one message to each other member, within
// PublishRate a second. At least 1.
func (c Config) PublishEvery(members int) int {
	if members <= 2 || !(c.PublishRate > 0) || c.Interval <= 0 {
		return 1
	}
	spacing := time.Duration(math.Round(float64(members-1) / c.PublishRate * float64(time.Second)))
	return max(1, int((spacing+c.Interval-1)/c.Interval))
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	if c.NodeName == "" {
		c.NodeName = d.NodeName
	}
	if c.BindAddr == "" {
		c.BindAddr = d.BindAddr
	}
	set(&c.RejoinInterval, d.RejoinInterval)
	set(&c.Interval, d.Interval)
	if c.PublishRate == 0 {
		c.PublishRate = d.PublishRate
	}
	set(&c.Heartbeat, d.Heartbeat)
	set(&c.PushPull, d.PushPull)
	set(&c.ApplyLag, d.ApplyLag)
	set(&c.StaleAfter, d.StaleAfter)
	set(&c.ForgetAfter, d.ForgetAfter)
	if c.View == "" {
		c.View = d.View
	}
	if c.QueueSize == 0 {
		c.QueueSize = d.QueueSize
	}
	if c.MaxPacket == 0 {
		c.MaxPacket = d.MaxPacket
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Copies == 0 {
		c.Copies = d.Copies
	}
	return c
}

// Validate reports a configuration the node cannot use. Zero fields are
// checked after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("gossip: node name is empty and the hostname is unknown"))
	}
	if _, _, err := splitHostPort(c.BindAddr); err != nil {
		errs = append(errs, fmt.Errorf("gossip: bind address: %w", err))
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			errs = append(errs, fmt.Errorf("gossip: advertise address: %w", err))
		}
	}
	if c.Key != nil {
		if err := memberlist.ValidateKey(c.Key); err != nil {
			errs = append(errs, fmt.Errorf("gossip: key: %w", err))
		}
	}
	if c.Interval < time.Millisecond || c.Heartbeat < c.Interval {
		errs = append(errs, fmt.Errorf("gossip: need 1ms <= interval (%v) <= heartbeat (%v)", c.Interval, c.Heartbeat))
	}
	if !(c.PublishRate > 0) || math.IsInf(c.PublishRate, 0) {
		errs = append(errs, fmt.Errorf("gossip: publish rate %v must be a positive number of messages a second", c.PublishRate))
	}
	if _, err := core.ParseViewMode(string(c.View)); err != nil {
		errs = append(errs, err)
	}
	if c.View == core.ViewAligned && (c.ApplyLag < time.Millisecond || c.ApplyLag >= c.StaleAfter) {
		errs = append(errs, fmt.Errorf("gossip: need 1ms <= apply lag (%v) < stale-after (%v)", c.ApplyLag, c.StaleAfter))
	}
	if c.StaleAfter <= c.Heartbeat || c.ForgetAfter < c.StaleAfter {
		errs = append(errs, fmt.Errorf("gossip: need heartbeat (%v) < stale-after (%v) <= forget-after (%v)",
			c.Heartbeat, c.StaleAfter, c.ForgetAfter))
	}
	if c.PushPull <= 0 || c.RejoinInterval <= 0 || c.QueueSize < 1 || c.MaxPacket < 256 || c.Copies < 1 || c.Copies > 4 {
		errs = append(errs, errors.New("gossip: push/pull and rejoin intervals, queue size and max packet (>= 256) must be positive, copies 1-4"))
	}
	if c.MaxEjectionPercent < 0 || c.MaxEjectionPercent > 100 {
		errs = append(errs, fmt.Errorf("gossip: max ejection percent %d must be within 0..100", c.MaxEjectionPercent))
	}
	return errors.Join(errs...)
}

// ParseKey decodes a base64 key as Consul and Serf take it and checks its
// length. The empty string means no key.
func ParseKey(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("gossip: key is not base64: %w", err)
	}
	if err := memberlist.ValidateKey(k); err != nil {
		return nil, fmt.Errorf("gossip: key: %w", err)
	}
	return k, nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}

func (c Config) resolver() Resolver {
	if c.Resolver != nil {
		return c.Resolver
	}
	return net.DefaultResolver
}

// memberlistConfig builds memberlist's configuration; d is the delegate.
func (c Config) memberlistConfig(d *delegate) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.NodeName
	mc.BindAddr, mc.BindPort, _ = splitHostPort(c.BindAddr)
	if c.AdvertiseAddr != "" {
		mc.AdvertiseAddr, mc.AdvertisePort, _ = splitHostPort(c.AdvertiseAddr)
	} else {
		mc.AdvertisePort = mc.BindPort
	}
	mc.PushPullInterval = c.PushPull
	mc.SecretKey = c.Key
	// A replica restarted under its name with a new IP may take the name
	// over once the old process has been dead this long.
	mc.DeadNodeReclaimTime = c.StaleAfter
	mc.Delegate, mc.Events, mc.Conflict = d, d, d
	mc.Logger = newMemberlistLogger(d.n.log, d.n)
	if c.Transport != nil {
		mc.Transport = c.Transport
	}
	if c.Tune != nil {
		c.Tune(mc)
	}
	return mc
}
