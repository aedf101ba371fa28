// Command bareproxy stands in for haproxy in scripts/vshaproxy: it reads the
// config's bind and server lines and proxies round-robin with Go's net/http
// alone (httputil.ReverseProxy, a Transport with the router's pool size and
// idle timeout), with no key, pick, retry, metrics or health checks. It is
// the control of docs/vs-haproxy.md, "Where the path goes (stop 33)": how
// much of prefixring's longer path a bare Go proxy shares.
//
//	go build -o /tmp/bare/haproxy ./scripts/prototypes/bareproxy
//	go run ./scripts/vshaproxy -haproxy /tmp/bare/haproxy -workloads multi-turn \
//	  -runs 4 -requests 300 -systems haproxy-rr-x1 -out out/bare-rr
//
// It answers -v and the config check (-c) as haproxy does, and is not meant
// for anything else.
package main

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	var cfg string
	for i, a := range os.Args {
		if a == "-v" || a == "-vv" {
			println("bareproxy (Go net/http stand-in for haproxy)")
			os.Exit(0)
		}
		if a == "-c" {
			os.Exit(0)
		}
		if a == "-f" && i+1 < len(os.Args) {
			cfg = os.Args[i+1]
		}
	}
	f, err := os.Open(cfg)
	if err != nil {
		panic(err)
	}
	var bind string
	var servers []*url.URL
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "bind" {
			bind = fs[1]
		}
		if len(fs) >= 3 && fs[0] == "server" {
			servers = append(servers, &url.URL{Scheme: "http", Host: fs[2]})
		}
	}
	var next atomic.Uint64
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, MaxIdleConnsPerHost: 512, IdleConnTimeout: 4 * time.Second, DisableCompression: true}
	rp := &httputil.ReverseProxy{Transport: tr, Rewrite: func(pr *httputil.ProxyRequest) {
		u := servers[next.Add(1)%uint64(len(servers))]
		pr.SetURL(u)
		pr.Out.Host = pr.In.Host
	}}
	srv := &http.Server{Addr: bind, Handler: rp}
	panic(srv.ListenAndServe())
}
