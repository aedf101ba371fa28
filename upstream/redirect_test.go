package upstream

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// redirectingNet answers every request to the worker with a redirect to
// the cloud metadata service and records every host the router reached.
type redirectingNet struct {
	mu    sync.Mutex
	hosts []string
}

func (f *redirectingNet) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.hosts = append(f.hosts, r.URL.Host)
	f.mu.Unlock()
	if r.URL.Host == "10.0.0.7:8000" {
		h := http.Header{"Location": {"http://169.254.169.254/latest/meta-data/iam/security-credentials/"}}
		return &http.Response{StatusCode: http.StatusFound, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("role")), Request: r}, nil
}

// TestProbesAndScrapesFollowNoRedirect: an endpoint (a registered worker,
// say) that answers its health probe or its KV scrape with a redirect
// must not lead the router to another address, such as the cloud
// metadata service that the worker policy refuses to register; and a
// redirect is no healthy answer.
func TestProbesAndScrapesFollowNoRedirect(t *testing.T) {
	rn := &redirectingNet{}
	s, err := NewSet(fastHealth(), Options{Transport: rn, KV: DefaultKVConfig()})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("http://10.0.0.7:8000")
	probeErr := s.probeOne(context.Background(), u)
	_, _, scrapeErr := s.scrapeOne(context.Background(), u)
	rn.mu.Lock()
	defer rn.mu.Unlock()
	for _, h := range rn.hosts {
		if h != "10.0.0.7:8000" {
			t.Fatalf("the router followed a redirect: it reached %v", rn.hosts)
		}
	}
	if probeErr == nil {
		t.Error("a probe answered with a redirect counted as healthy")
	}
	if scrapeErr == nil {
		t.Error("a scrape answered with a redirect gave a capacity")
	}
}
