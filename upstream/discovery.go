package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Resolver is the part of net.Resolver that discovery uses.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// Sink receives a source's endpoint list: the [Set].
type Sink interface {
	SetSource(source string, raw []string) error
}

// DNSSource discovers endpoints from DNS, as a headless Kubernetes Service
// publishes them: "name:port" resolves A/AAAA records, each address
// becoming http://addr:port; "_service._proto.name" (no port) resolves SRV
// records, each target becoming http://target:port.
type DNSSource struct {
	Name     string
	Resolver Resolver
}

// Resolve returns the endpoint URLs the name resolves to now, sorted. A
// record that cannot become an endpoint (an SRV target of ".", an address
// with an IPv6 zone) is left out and named in err, beside the URLs of the
// others, as Go's resolver returns the valid records of an SRV answer with
// the error of the invalid names it filtered out: one bad record must not
// hold up the answer. No URLs and an error: nothing usable.
func (d DNSSource) Resolve(ctx context.Context) ([]string, error) {
	var out []string
	var bad []error
	if strings.HasPrefix(d.Name, "_") {
		_, srvs, err := d.Resolver.LookupSRV(ctx, "", "", d.Name)
		if err != nil {
			if len(srvs) == 0 {
				return nil, err
			}
			bad = append(bad, err)
		}
		for _, s := range srvs {
			host := strings.TrimSuffix(s.Target, ".")
			out = append(out, "http://"+net.JoinHostPort(host, strconv.Itoa(int(s.Port))))
		}
	} else {
		host, port, err := net.SplitHostPort(d.Name)
		if err != nil {
			return nil, fmt.Errorf("endpoints DNS name %q: want host:port or an SRV name: %v", d.Name, err)
		}
		addrs, err := d.Resolver.LookupHost(ctx, host)
		if err != nil {
			if len(addrs) == 0 {
				return nil, err
			}
			bad = append(bad, err)
		}
		for _, a := range addrs {
			out = append(out, "http://"+net.JoinHostPort(a, port))
		}
	}
	out = slices.DeleteFunc(out, func(u string) bool {
		_, _, err := ParseEndpoint(u)
		if err != nil {
			bad = append(bad, err)
		}
		return err != nil
	})
	slices.Sort(out)
	return slices.Compact(out), errors.Join(bad...)
}

// Watch resolves the name every interval until ctx ends, and sets the
// endpoints when the answer changes. A failed or empty lookup keeps the
// last good set: a DNS outage must not empty the fleet. Records that
// cannot become endpoints are logged and left out; the rest are set.
func (d DNSSource) Watch(ctx context.Context, interval time.Duration, set Sink, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		urls, err := d.Resolve(ctx)
		switch {
		case len(urls) == 0 && err != nil:
			log.Warn("endpoint discovery failed; keeping the last set", "name", d.Name, "err", err)
		case len(urls) == 0:
			log.Warn("endpoint discovery found nothing; keeping the last set", "name", d.Name)
		default:
			if err != nil {
				log.Warn("endpoint discovery left out records it cannot use", "name", d.Name, "err", err)
			}
			if err := set.SetSource("dns", urls); err != nil {
				log.Warn("endpoint discovery returned a bad endpoint", "name", d.Name, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
