package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ServerConfig configures the public listener's client side.
type ServerConfig struct {
	// IdleTimeout closes a client's keep-alive connection after this long
	// without a request. Default 75s, nginx's keepalive_timeout: above the
	// 60 s idle timeout of common cloud load balancers (AWS ALB), so the
	// balancer in front, not the router, closes first and never sends a
	// request on a connection the router is closing.
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers. Default 10s.
	ReadHeaderTimeout time.Duration
	// MaxConnections caps concurrent client connections; 0 means no cap.
	// Beyond it the router stops accepting (as HAProxy's maxconn): new
	// connections wait in the kernel's accept queue until one closes.
	// Every open stream holds one. Default 8192.
	MaxConnections int
	// MaxHeaderBytes bounds a request's headers; larger ones get 431.
	// Default 1 MiB (net/http's).
	MaxHeaderBytes int
}

// DefaultServerConfig returns the documented defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{IdleTimeout: 75 * time.Second, ReadHeaderTimeout: 10 * time.Second, MaxConnections: 8192, MaxHeaderBytes: 1 << 20}
}

// Validate reports a configuration the server cannot run with.
func (c ServerConfig) Validate() error {
	var errs []error
	if c.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("client idle timeout %v must be > 0", c.IdleTimeout))
	}
	if c.ReadHeaderTimeout <= 0 {
		errs = append(errs, fmt.Errorf("read header timeout %v must be > 0", c.ReadHeaderTimeout))
	}
	if c.MaxConnections < 0 {
		errs = append(errs, fmt.Errorf("max connections %d must be >= 0", c.MaxConnections))
	}
	if c.MaxHeaderBytes < 1 {
		errs = append(errs, fmt.Errorf("max header bytes %d must be >= 1", c.MaxHeaderBytes))
	}
	return errors.Join(errs...)
}

// Server serves the public listener: the client-side limits, and the
// errors net/http writes on the router's behalf rewritten to OpenAI's
// shape (see cannedConn).
//
// There is deliberately no http.Server.ReadTimeout: it is one deadline for
// the whole request from its first byte, so it cuts a large body that
// arrives slowly but steadily. The body gets an inactivity timeout instead
// (Config.ClientBodyTimeout), set per read and cleared once the body is
// read (TestServerReadTimeoutIsATotalDeadline pins net/http's behaviour).
type Server struct {
	cfg ServerConfig
	srv *http.Server
}

// NewServer returns the public server for handler h.
func NewServer(cfg ServerConfig, h http.Handler, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler:           markResponses(h),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnContext:       withConn,
		ConnState:         trackIdle,
	}
	return &Server{cfg: cfg, srv: srv}, nil
}

// Serve accepts connections on ln until Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(newListener(ln, s.cfg.MaxConnections))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// SetKeepAlivesEnabled(false) makes every connection close after its
// current response: during a drain, clients reconnect elsewhere.
func (s *Server) SetKeepAlivesEnabled(v bool) { s.srv.SetKeepAlivesEnabled(v) }

// Shutdown stops accepting and waits for in-flight requests and streams
// until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes the listener and every connection.
func (s *Server) Close() error { return s.srv.Close() }
