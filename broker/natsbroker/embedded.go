package natsbroker

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/internal/flow"
)

// DefaultListen is where an embedded server takes clients unless told.
const DefaultListen = "127.0.0.1:4222"

// EmbeddedConfig configures the nats-server that `svc serve --broker
// embedded` runs in process.
type EmbeddedConfig struct {
	// DataDir holds the JetStream file store (in DataDir/nats), so queued
	// tasks survive a restart. Required.
	DataDir string
	// Listen is the client address, host:port (DefaultListen when empty;
	// port 0 picks a free one). Workers on other hosts need a non-loopback
	// host; the server has no authentication, so expose it only on a
	// network you trust.
	Listen string
	// Logger receives the server's log (notices at info, warnings, errors);
	// nil is silent.
	Logger *zap.Logger
	// ReadyTimeout bounds the wait for the server to accept clients;
	// default 10s.
	ReadyTimeout time.Duration
}

// Embedded is a running in-process nats-server with JetStream.
type Embedded struct {
	srv *server.Server
	url string
}

// StartEmbedded starts a nats-server with JetStream on cfg.Listen and waits
// until it accepts clients. Open its ClientURL with Connect (or broker.Open)
// in this process, and point workers at it.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.DataDir == "" {
		return nil, flow.Refused("natsbroker", "the embedded server needs a data directory")
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, flow.Refused("natsbroker", "listen address %q: %w", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, flow.Refused("natsbroker", "listen address %q: bad port", cfg.Listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if host == "" {
		host = "0.0.0.0"
	}
	store := filepath.Join(cfg.DataDir, "nats")
	if err := os.MkdirAll(store, 0o750); err != nil {
		return nil, svc.PermanentBrokerError("natsbroker", "", err)
	}
	opts := &server.Options{
		ServerName: "svc-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   store,
		MaxPayload: svc.MaxPayloadBytes,
		NoSigs:     true, // the host process owns the signals
		NoLog:      cfg.Logger == nil,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, svc.PermanentBrokerError("natsbroker", "embedded server", err)
	}
	if cfg.Logger != nil {
		srv.SetLogger(zapLogger{cfg.Logger.Named("nats-server").Sugar()}, false, false)
	}
	srv.Start()
	if !srv.ReadyForConnections(cfg.ReadyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, svc.TransientBrokerError("natsbroker", "", fmt.Errorf("embedded server not ready on %s within %v (is the port taken?)", cfg.Listen, cfg.ReadyTimeout))
	}
	e := &Embedded{srv: srv}
	url := srv.ClientURL()
	if a, ok := srv.Addr().(*net.TCPAddr); ok {
		h := host
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
			h = "127.0.0.1"
		}
		url = "nats://" + net.JoinHostPort(h, strconv.Itoa(a.Port))
	}
	e.url = url
	return e, nil
}

// ClientURL is the nats:// URL of the server, for clients in this process
// (with a wildcard listen host it names the loopback address).
func (e *Embedded) ClientURL() string { return e.url }

// Server is the nats-server itself.
func (e *Embedded) Server() *server.Server { return e.srv }

// Shutdown stops the server and waits until it has, or until ctx ends. Close
// the clients of this process first. It may be called more than once.
func (e *Embedded) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return svc.TransientBrokerError("natsbroker", "embedded server shutdown", ctx.Err())
	}
}

// zapLogger routes the server's log to zap.
type zapLogger struct{ l *zap.SugaredLogger }

func (z zapLogger) Noticef(f string, v ...any) { z.l.Debugf(f, v...) } // the server's banner: the app logs its own line
func (z zapLogger) Warnf(f string, v ...any)   { z.l.Warnf(f, v...) }
func (z zapLogger) Fatalf(f string, v ...any)  { z.l.Errorf(f, v...) } // never exit the host process
func (z zapLogger) Errorf(f string, v ...any)  { z.l.Errorf(f, v...) }
func (z zapLogger) Debugf(f string, v ...any)  { z.l.Debugf(f, v...) }
func (z zapLogger) Tracef(f string, v ...any)  { z.l.Debugf(f, v...) }
