package proxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prefixring/prefixring/internal/testcert"
	"github.com/prefixring/prefixring/proxy"
)

func commonName(t *testing.T, c *proxy.Certificate) string {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Leaf().Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.Subject.CommonName
}

// serveTLS serves h with cfg behind TLSListener on 127.0.0.1 with a new
// certificate of common name "one" in dir, stopped when the test ends;
// it returns the certificate, the listener's address and a pool that
// trusts the certificate.
func serveTLS(t *testing.T, dir string, cfg proxy.ServerConfig, h http.Handler) (*proxy.Certificate, string, *x509.CertPool) {
	t.Helper()
	certFile, keyFile, pool := testcert.Write(t, dir, "one")
	c, err := proxy.LoadCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.NewServer(cfg, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(proxy.TLSListener(ln, c.ServerTLS())) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return c, ln.Addr().String(), pool
}

// A certificate rotated on disk is served after Reload; a pair that does
// not load (a half-written file, a key of another certificate) is an
// error that keeps the last good one.
func TestCertificateReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := testcert.Write(t, dir, "one")
	c, err := proxy.LoadCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if cn := commonName(t, c); cn != "one" {
		t.Fatalf("serving %q, want one", cn)
	}
	testcert.Write(t, dir, "two")
	if err := c.Reload(); err != nil || commonName(t, c) != "two" {
		t.Fatalf("after rotation: err %v, serving %q; want two", err, commonName(t, c))
	}
	good, _ := os.ReadFile(certFile)
	if err := os.WriteFile(certFile, good[:len(good)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Reload(); err == nil || !strings.Contains(err.Error(), certFile) || commonName(t, c) != "two" {
		t.Fatalf("half-written certificate: err %v, serving %q; want an error naming the file, two still served", err, commonName(t, c))
	}
	other, _ := testcert.New(t, "three")
	if err := os.WriteFile(certFile, other, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Reload(); err == nil || commonName(t, c) != "two" {
		t.Fatalf("a key of another certificate: err %v, serving %q; want an error, two still served", err, commonName(t, c))
	}
	if _, err := proxy.LoadCertificate(certFile, keyFile); err == nil {
		t.Fatal("LoadCertificate took a certificate and a key that do not match")
	}
	if _, err := proxy.LoadCertificate(filepath.Join(dir, "missing.pem"), keyFile); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("a missing certificate file: err %v, want one naming it", err)
	}
}

// Watch reloads the files once they change, at its next check, and keeps
// serving the last good pair while they do not load.
func TestCertificateWatch(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := testcert.Write(t, dir, "one")
	synctest.Test(t, func(t *testing.T) {
		c, err := proxy.LoadCertificate(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go c.Watch(ctx, 10*time.Second, slog.New(slog.DiscardHandler))
		rotate := func(cn string, at time.Time) {
			testcert.Write(t, dir, cn)
			for _, f := range []string{certFile, keyFile} {
				if err := os.Chtimes(f, at, at); err != nil {
					t.Fatal(err)
				}
			}
		}
		rotate("two", time.Unix(1e9, 0))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if cn := commonName(t, c); cn != "one" {
			t.Fatalf("before the first check: serving %q, want one", cn)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if cn := commonName(t, c); cn != "two" {
			t.Fatalf("after the first check: serving %q, want two", cn)
		}
		if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if cn := commonName(t, c); cn != "two" {
			t.Fatalf("with a bad key file: serving %q, want two still", cn)
		}
		rotate("three", time.Unix(2e9, 0))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if cn := commonName(t, c); cn != "three" {
			t.Fatalf("after the key was mended: serving %q, want three", cn)
		}
	})
}

// The router's server behind TLSListener answers HTTPS clients, with the
// certificate rotated between two connections, and answers plain HTTP
// with a 400 in OpenAI's error shape.
func TestTLSListener(t *testing.T) {
	dir := t.TempDir()
	c, addr, pool := serveTLS(t, dir, proxy.DefaultServerConfig(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	url := "https://" + addr + "/"
	get := func(pool *x509.CertPool) (*http.Response, error) {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		defer client.CloseIdleConnections()
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	resp, err := get(pool)
	if err != nil || resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.NegotiatedProtocol == "h2" {
		t.Fatalf("https: %v, %+v; want 200 over TLS, HTTP/1.1", err, resp)
	}
	_, _, pool2 := testcert.Write(t, dir, "two")
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := get(pool); err == nil {
		t.Fatal("a client trusting only the old certificate still connected after the rotation")
	}
	if resp, err := get(pool2); err != nil || resp.StatusCode != 200 {
		t.Fatalf("https with the new certificate: %v, %+v", err, resp)
	}

	plain, err := http.Get("http://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Body.Close()
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.NewDecoder(plain.Body).Decode(&body); err != nil || plain.StatusCode != 400 || body.Error.Code != "http_to_https" {
		t.Fatalf("plain HTTP to the TLS listener: %d, code %q, decode %v; want 400 http_to_https", plain.StatusCode, body.Error.Code, err)
	}
}

// A client that opens a connection to the TLS listener and never starts
// its handshake holds its connection slot only until the header timeout:
// the handshake runs under the server's read deadline, so a silent
// connection cannot keep the router's one slot from an HTTPS client.
func TestTLSHandshakeIsBoundedByTheHeaderTimeout(t *testing.T) {
	cfg := proxy.DefaultServerConfig()
	cfg.ReadHeaderTimeout, cfg.MaxConnections = 200*time.Millisecond, 1
	_, addr, pool := serveTLS(t, t.TempDir(), cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_ = silent.SetReadDeadline(time.Now().Add(30 * time.Second)) // a guard: the server closes it long before
	var ne net.Error
	if _, err := io.Copy(io.Discard, silent); errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a silent connection still open after 30 s (%v); want the server to close it at its header timeout", err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + addr + "/")
	if err != nil {
		t.Fatalf("an HTTPS client after the silent one: %v", err)
	}
	resp.Body.Close()
}

// httpsEngine starts an https server whose certificate pool trusts and
// which, with clients non-nil, requires a client certificate those
// roots sign.
func httpsEngine(t *testing.T, clients *x509.CertPool) (url, caFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile, _ := testcert.Write(t, dir, "engine")
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	if clients != nil {
		s.TLS.ClientAuth, s.TLS.ClientCAs = tls.RequireAndVerifyClientCert, clients
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s.URL, certFile
}

// ClientTLS trusts the CA file's authorities beside the system's and
// presents the client certificate to an engine that requires one; each
// part left out fails as the engine or Go's verification says.
func TestClientTLS(t *testing.T) {
	clientCert, clientKey, clients := testcert.Write(t, t.TempDir(), "router")
	url, caFile := httpsEngine(t, clients)
	cert, err := proxy.LoadCertificate(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	get := func(caFile string, cert *proxy.Certificate) error {
		cfg, err := proxy.ClientTLS(caFile, cert)
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		defer c.CloseIdleConnections()
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := get(caFile, cert); err != nil {
		t.Fatalf("with the CA and the client certificate: %v", err)
	}
	var unknown x509.UnknownAuthorityError
	if err := get("", cert); !errors.As(err, &unknown) {
		t.Fatalf("without the CA file: %v, want an unknown authority", err)
	}
	if err := get(caFile, nil); err == nil {
		t.Fatal("without a client certificate the engine answered")
	}
	bad := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.ClientTLS(bad, nil); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("a CA file with no certificate: %v, want an error naming it", err)
	}
}
