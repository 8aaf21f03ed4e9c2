package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/http/server"
)

type serveCmd struct {
	runtimeFlags
	host      string
	port      int
	authToken string
	grace     time.Duration
	maxBody   int64
}

func newServe() *cobra.Command {
	s := &serveCmd{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Start the HTTP server on a directory of specs",
		Long: `Start the standalone HTTP server.

The server loads DIR/agents/*.yaml and DIR/runtime.yaml (--specs), serves the
routes of docs/api.md, and stops gracefully on SIGINT or SIGTERM: it stops
accepting connections, lets requests in flight finish within --shutdown-grace,
then cancels what is left and shuts the runtime down.

With --auth-token (or SVC_AUTH_TOKEN) every route but /healthz, /health and
/readyz needs "Authorization: Bearer <token>".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return s.run(cmd) },
	}
	fs := cmd.Flags()
	s.register(fs, "examples/specs")
	fs.StringVar(&s.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&s.port, "port", 8420, "port to listen on (0: any free port)")
	fs.StringVar(&s.authToken, "auth-token", envOr("SVC_AUTH_TOKEN", ""), "bearer token required on every route but the health checks (default $SVC_AUTH_TOKEN)")
	fs.DurationVar(&s.grace, "shutdown-grace", 30*time.Second, "how long requests in flight may take to finish on shutdown")
	fs.Int64Var(&s.maxBody, "max-body-bytes", 1<<20, "largest request body accepted")
	return cmd
}

func (s *serveCmd) run(cmd *cobra.Command) error {
	log, err := s.logger()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer func() { _ = log.Sync() }()
	rt, set, err := s.buildRuntime(cmd.Flags(), log, nil)
	if err != nil {
		return err
	}
	h, err := server.NewStandalone(rt, server.StandaloneConfig{
		AuthToken: s.authToken, Logger: log,
		RouterOptions: []server.Option{server.WithMaxBodyBytes(s.maxBody)},
	})
	if err != nil {
		_ = rt.Close()
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(s.host, strconv.Itoa(s.port)))
	if err != nil {
		_ = rt.Close()
		return &exitError{code: 1, err: fmt.Errorf("listen: %w", err)}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	// The runtime's Shutdown releases what it holds; the server calls it
	// once connections have drained (or the grace period ran out).
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	names, _ := rt.Agents(ctx)
	log.Info("svc serving", zap.String("url", "http://"+ln.Addr().String()), zap.String("specs", set.Dir),
		zap.Strings("agents", names), zap.Stringer("options", rt.Options()), zap.Bool("auth", s.authToken != ""))

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		_ = rt.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Give the signals back: a second SIGINT or SIGTERM during the grace
	// period kills the process instead of being swallowed.
	stop()
	log.Info("svc shutting down", zap.Duration("grace", s.grace))
	graceCtx, cancel := context.WithTimeout(context.Background(), s.grace)
	defer cancel()
	serr := srv.Shutdown(graceCtx)
	rerr := rt.Shutdown(graceCtx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if serr != nil || rerr != nil {
		return &exitError{code: 1, err: fmt.Errorf("shutdown within --shutdown-grace %s: %w", s.grace, errors.Join(serr, rerr))}
	}
	log.Info("svc stopped")
	return nil
}
