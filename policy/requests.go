package policy

import "github.com/prefixring/prefixring/ring"

// RequestCounts is the in-flight requests per endpoint, whatever the
// balancer's load signal; *ring.Inflight implements it.
type RequestCounts interface {
	Requests(id string) int64
}

// inflightOf is how a policy finds the request counts of its endpoints;
// *ring.Balancer implements it.
type inflightOf interface {
	Inflight() *ring.Inflight
}

// requestLoads is eps whose candidates' loads are in-flight request
// counts. The tree policies' thresholds (radix's 64 requests and 1.5,
// score's Beta a request) are per request, as in SGLang and in eval, where
// the baselines run under the requests signal; serve's balancer counts
// prompt tokens by default (--load-signal tokens), and 64 tokens of
// imbalance is one short prompt. The counts are this replica's own, as a
// gateway counts its own requests and as eval's replicas do.
type requestLoads struct {
	Endpoints
	counts RequestCounts
}

// byRequests returns eps with request counts for loads where eps can
// count requests, else eps unchanged.
func byRequests(eps Endpoints) Endpoints {
	if b, ok := eps.(inflightOf); ok {
		return requestLoads{Endpoints: eps, counts: b.Inflight()}
	}
	return eps
}

// Candidates implements Endpoints.
func (r requestLoads) Candidates(exclude []string, dst []ring.Candidate) []ring.Candidate {
	n := len(dst)
	dst = r.Endpoints.Candidates(exclude, dst)
	for i := n; i < len(dst); i++ {
		dst[i].Load = r.counts.Requests(dst[i].ID)
	}
	return dst
}
