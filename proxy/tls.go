package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Certificate is a TLS certificate and key read from PEM files, which the
// router's listeners serve and which [Certificate.Reload] re-reads, so
// that a certificate rotated on disk (cert-manager renewing a Kubernetes
// Secret, certbot) is served from the next handshake without a restart,
// as nginx and HAProxy serve a new one after a reload. A pair that does
// not load (half-written, a key that does not match) keeps the last good
// one serving: a rotation in progress never takes the listener down.
type Certificate struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
	mu                sync.Mutex // serialises reloads
	seen              fileStamp  // the files as of the last load, good or bad
}

// fileStamp is what Watch compares to see that the files changed.
type fileStamp struct {
	certMod, keyMod   time.Time
	certSize, keySize int64
}

func stampFiles(certFile, keyFile string) fileStamp {
	var s fileStamp
	if fi, err := os.Stat(certFile); err == nil {
		s.certMod, s.certSize = fi.ModTime(), fi.Size()
	}
	if fi, err := os.Stat(keyFile); err == nil {
		s.keyMod, s.keySize = fi.ModTime(), fi.Size()
	}
	return s
}

// LoadCertificate reads a certificate chain and its private key from PEM
// files; an error names the file pair and what is wrong.
func LoadCertificate(certFile, keyFile string) (*Certificate, error) {
	c := &Certificate{certFile: certFile, keyFile: keyFile}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload re-reads the files. On an error the certificate served stays the
// last good one.
func (c *Certificate) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = stampFiles(c.certFile, c.keyFile)
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("tls certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	c.cur.Store(&pair)
	return nil
}

// changed reports whether the files differ from when they were last read.
func (c *Certificate) changed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return stampFiles(c.certFile, c.keyFile) != c.seen
}

// Watch re-reads the files every interval in which they changed, until
// ctx ends, and logs each reload and each pair that did not load.
func (c *Certificate) Watch(ctx context.Context, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if c.changed() {
				c.ReloadAndLog(log)
			}
		}
	}
}

// ReloadAndLog re-reads the files now (a change seen, SIGHUP), logging
// the outcome.
func (c *Certificate) ReloadAndLog(log *slog.Logger) {
	if err := c.Reload(); err != nil {
		log.Warn("tls certificate not reloaded; serving the last good one", "err", err)
		return
	}
	log.Info("tls certificate reloaded", "cert", c.certFile)
}

// Leaf returns the certificate served now.
func (c *Certificate) Leaf() *tls.Certificate { return c.cur.Load() }

// ServerTLS returns the tls.Config the router's listeners serve c with:
// TLS 1.2 or later, HTTP/1.1 (the proxy's connection handling, its limit
// on connections and its error rewriting are HTTP/1.1's; HTTP/2 is not
// offered).
func (c *Certificate) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.cur.Load(), nil
		},
	}
}

// TLSListener serves ln's connections over TLS with cfg. A client that
// sends plain HTTP to it gets a 400 with an OpenAI-style JSON body
// saying so, as net/http's own TLS server says it in plain text, instead
// of a closed connection.
func TLSListener(ln net.Listener, cfg *tls.Config) net.Listener {
	return &tlsListener{Listener: ln, cfg: cfg}
}

type tlsListener struct {
	net.Listener
	cfg *tls.Config
}

// Accept returns at once; the handshake runs on the connection's first
// read, in its own goroutine, under the server's read deadline.
func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tlsConn{Conn: tls.Server(c, l.cfg)}, nil
}

type tlsConn struct{ *tls.Conn }

// errPlainHTTP is what a plain-HTTP request to a TLS listener gets.
var errPlainHTTP = &apiError{http.StatusBadRequest, "The client sent plain HTTP to the router's TLS listener: use https://.", "invalid_request_error", "http_to_https"}

func (c *tlsConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	var re tls.RecordHeaderError
	if err != nil && errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader[:]) {
		_ = re.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = re.Conn.Write(cannedJSON(errPlainHTTP))
		_ = re.Conn.Close()
	}
	return n, err
}

// looksLikeHTTP reports whether a TLS record header's five bytes are the
// start of an HTTP/1 request line.
func looksLikeHTTP(h []byte) bool {
	for _, m := range []string{"GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "PATCH", "CONNE", "TRACE"} {
		if bytes.HasPrefix(h, []byte(m)) {
			return true
		}
	}
	return false
}

// ClientTLS returns the tls.Config the router dials https endpoints
// with: the system's roots and the PEM certificates in caFile (empty:
// the system's alone), and with cert (nil: none) the client certificate
// it presents to engines that ask for one (vLLM's --ssl-cert-reqs),
// re-read as cert is.
func ClientTLS(caFile string, cert *Certificate) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("upstream CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upstream CA file %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert.cur.Load(), nil
		}
	}
	return cfg, nil
}
