package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/spec"
	"github.com/svc-dev/svc/supervisor"
)

type serveCmd struct {
	runtimeFlags
	host      string
	port      int
	authToken string
	grace     time.Duration
	maxBody   int64
	storeSpec string
	dataDir   string
	metrics   bool

	sseHeartbeat time.Duration
	sseQueue     int

	eventsSpec    string
	eventsMaxRows int
	eventsMaxAge  time.Duration

	reload        bool
	reloadDirs    []string
	reloadInclude []string
	reloadExclude []string
}

func newServe() *cobra.Command {
	s := &serveCmd{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Start the HTTP server on a directory of specs",
		Long: `Start the standalone HTTP server.

The server loads DIR/agents/*.yaml, DIR/groups/*.yaml and DIR/runtime.yaml
(--specs), serves the routes of docs/api.md, and stops gracefully on SIGINT or
SIGTERM: it stops accepting connections, lets requests in flight finish within
--shutdown-grace, then cancels what is left and shuts the runtime down.

With --reload it watches the specs directory (and each --reload-dir) for
changes to the files --reload-include matches and --reload-exclude does not,
and swaps in the new agents and groups at once, without a restart: runs in
flight finish on the definitions they started with. A change that does not
validate is logged with its file and line, and the previous definitions stay.
Runtime options (runtime.yaml) apply at the next start.

With --auth-token (or SVC_AUTH_TOKEN) every route but /healthz, /health and
/readyz needs "Authorization: Bearer <token>".

Every runtime event goes to the log, to GET /events/stream (svc status), and
to the event store (--events) that the rollup routes read: GET /events,
/usage, /tools, /runtime/stats and /runs/{trace_id}/tree. With --metrics,
GET /metrics serves the runtime, HTTP and Go metrics in the Prometheus
format; when OTEL_EXPORTER_OTLP_ENDPOINT (or ..._METRICS_ENDPOINT) is set,
metrics are also pushed over OTLP (OTEL_EXPORTER_OTLP_PROTOCOL grpc or
http/protobuf).`,
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
	fs.StringVar(&s.storeSpec, "store", "", "where submitted runs are kept: memory, sqlite:PATH, pebble:PATH or redis://HOST:PORT (default: a SQLite file under --data-dir)")
	fs.StringVar(&s.dataDir, "data-dir", "./.svc", "directory of the default run and event stores")
	fs.StringVar(&s.eventsSpec, "events", "", "where runtime events are kept for the rollup routes: memory, sqlite:PATH or none (default: a SQLite file under --data-dir)")
	fs.IntVar(&s.eventsMaxRows, "events-max-rows", 1_000_000, "keep at most this many events, the newest (0: no limit)")
	fs.DurationVar(&s.eventsMaxAge, "events-max-age", 7*24*time.Hour, "drop events older than this (0: no limit)")
	fs.DurationVar(&s.sseHeartbeat, "sse-heartbeat", sse.DefaultHeartbeatInterval, "how long GET /events/stream may stay idle before a heartbeat comment")
	fs.IntVar(&s.sseQueue, "sse-queue-size", sse.DefaultQueueSize, "events waiting per /events/stream subscriber before new ones are dropped (and counted)")
	fs.BoolVar(&s.metrics, "metrics", false, "serve GET /metrics in the Prometheus format (behind --auth-token like other routes) (default false)")
	fs.BoolVar(&s.reload, "reload", false, "watch the spec files and swap in changed agents and groups without a restart (default false)")
	fs.StringSliceVar(&s.reloadDirs, "reload-dir", nil, "another directory to watch with --reload; repeatable (default: none, the --specs directory is always watched)")
	fs.StringSliceVar(&s.reloadInclude, "reload-include", spec.DefaultWatchInclude, "glob of the files --reload watches, matched against the base name and the path relative to the watched directory; repeatable")
	fs.StringSliceVar(&s.reloadExclude, "reload-exclude", nil, "glob of files --reload ignores even though --reload-include matches them; repeatable (default: none)")
	return cmd
}

// checkReloadFlags refuses reload flags without --reload, and bad globs,
// before anything starts: both are mistakes in the command line.
func (s *serveCmd) checkReloadFlags(fs *pflag.FlagSet) error {
	if !s.reload {
		for _, name := range []string{"reload-dir", "reload-include", "reload-exclude"} {
			if fs.Changed(name) {
				return fmt.Errorf("--%s needs --reload", name)
			}
		}
		return nil
	}
	for _, p := range append(slices.Clone(s.reloadInclude), s.reloadExclude...) {
		if _, err := filepath.Match(p, ""); err != nil {
			return fmt.Errorf("--reload-include/--reload-exclude %q: %w", p, err)
		}
	}
	return nil
}

// watch starts the watcher of --reload. Each change that loads swaps the
// runtime's agents and groups; one that does not is logged, and the
// runtime keeps what it has.
func (s *serveCmd) watch(ctx context.Context, fs *pflag.FlagSet, rt *supervisor.Runtime, log *zap.Logger) (*spec.Watcher, error) {
	cfg := spec.WatchConfig{
		Dir:     s.specs,
		Env:     s.env,
		Dirs:    s.reloadDirs,
		Include: s.reloadInclude,
		Exclude: s.reloadExclude,
	}
	started := rt.Options()
	return spec.Watch(ctx, cfg, func(set *spec.Set, err error) {
		if err != nil {
			log.Error("specs reload failed; still serving the previous definitions", zap.String("specs", s.specs), zap.Error(err))
			return
		}
		if err := rt.Replace(set.Agents, set.Groups); err != nil {
			log.Error("specs reload refused by the runtime; still serving the previous definitions", zap.String("specs", s.specs), zap.Error(err))
			return
		}
		if o := s.options(fs, set); o != started {
			log.Warn("runtime options changed in runtime.yaml; they apply at the next start", zap.Stringer("options", o), zap.Stringer("running", started))
		}
		log.Info("specs reloaded", zap.String("specs", s.specs), zap.Int("agents", len(set.Agents)), zap.Int("groups", len(set.Groups)))
	})
}

func (s *serveCmd) run(cmd *cobra.Command) error {
	log, err := s.logger()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if err := s.checkReloadFlags(cmd.Flags()); err != nil {
		return &exitError{code: 2, err: err}
	}
	if s.sseHeartbeat <= 0 || s.sseQueue <= 0 {
		return &exitError{code: 2, err: errors.New("--sse-heartbeat and --sse-queue-size must be positive")}
	}
	// Refuse a bad --events before anything is created on disk.
	if e := s.eventsSpec; e != "" && e != "none" && e != "memory" && !strings.HasPrefix(e, "sqlite:") {
		return &exitError{code: 2, err: fmt.Errorf("--events %q: want memory, sqlite:PATH or none", e)}
	}
	defer func() { _ = log.Sync() }()
	// Events reach the log through a queue, so a slow stderr (a full pipe,
	// a paused terminal) never holds up a run; the deferred Close, which
	// runs after the runtime's shutdown, writes out what is queued.
	store, where, err := openStore(s.storeSpec, s.dataDir)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	// Closed last, after the runtime has stopped writing to it.
	defer func() {
		if err := store.Close(); err != nil {
			log.Warn("closing the run store", zap.Error(err))
		}
	}()
	s.store = store
	log.Info("run store", zap.String("store", where))
	events := emitters.NewAsync(emitters.NewLog(log), 0)
	defer func() {
		events.Close()
		if d := events.Dropped(); d > 0 {
			log.Warn("events dropped because the log could not keep up", zap.Int64("dropped", d))
		}
	}()
	// The SSE emitter serves GET /events/stream (svc status, dashboards).
	// http.Server.Shutdown waits for open streams, so the streams are ended
	// as soon as it starts (RegisterOnShutdown below); the deferred Close
	// covers the ways out before that.
	live, err := sse.New(nil, sse.Config{HeartbeatInterval: s.sseHeartbeat, QueueSize: s.sseQueue})
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer func() { _ = live.Close() }()
	chain := []svc.Emitter{events, live}

	if s.eventsMaxRows < 0 || s.eventsMaxAge < 0 {
		return &exitError{code: 2, err: errors.New("--events-max-rows and --events-max-age must not be negative")}
	}
	evStore, evWhere, err := openEventStore(s.eventsSpec, s.dataDir, eventstore.Retention{MaxRows: s.eventsMaxRows, MaxAge: s.eventsMaxAge})
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	var reader svc.EventReader
	if evStore != nil {
		// The store emitter batches writes off the runtime's path; it is
		// closed (and flushed) after the runtime, then the store.
		storeEm := eventstore.NewEmitter(evStore, 0, 0)
		defer func() {
			if err := storeEm.Close(); err != nil {
				log.Warn("flushing events to the event store", zap.Error(err))
			}
			if d := storeEm.Dropped(); d > 0 {
				log.Warn("events the event store lost", zap.Int64("dropped", d))
			}
			if err := evStore.Close(); err != nil {
				log.Warn("closing the event store", zap.Error(err))
			}
		}()
		chain = append(chain, storeEm)
		reader = evStore
	}
	log.Info("event store", zap.String("events", evWhere))

	tel, err := newTelemetry(cmd.Context(), s.metrics)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.shutdown(ctx); err != nil {
			log.Warn("flushing metrics", zap.Error(err))
		}
	}()
	var mp metric.MeterProvider
	if tel.mp != nil {
		mp = tel.mp
		s.meterProvider = mp
		otelEm, err := emitters.NewOTel(mp)
		if err != nil {
			return err
		}
		chain = append(chain, otelEm)
		log.Info("metrics", zap.Bool("prometheus", tel.metrics != nil), zap.String("otlp", tel.otlp))
	}

	rt, set, err := s.buildRuntime(cmd.Flags(), log, emitters.Multi(chain...))
	if err != nil {
		return err
	}
	h, err := server.NewStandalone(rt, server.StandaloneConfig{
		AuthToken: s.authToken, Logger: log,
		RouterOptions: []server.Option{server.WithMaxBodyBytes(s.maxBody), server.WithSSEEmitter(live)},
		Events:        reader, MeterProvider: mp, Metrics: tel.metrics,
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
	srv.RegisterOnShutdown(func() { _ = live.Close() })
	stopWatch := func() {}
	// The runtime's Shutdown releases what it holds; the server calls it
	// once connections have drained (or the grace period ran out).
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if s.reload {
		// The watcher is stopped, and waited for, before the runtime shuts
		// down, so that no reload lands in the middle of the shutdown.
		watchCtx, cancelWatch := context.WithCancel(ctx)
		w, err := s.watch(watchCtx, cmd.Flags(), rt, log)
		if err != nil {
			cancelWatch()
			_ = ln.Close()
			_ = rt.Close()
			return &exitError{code: 2, err: err}
		}
		stopWatch = func() { cancelWatch(); w.Wait() }
		defer stopWatch() // idempotent: for the paths out that skip the calls below
	}
	agents, _ := rt.Agents(ctx)
	groups, _ := rt.Groups(ctx)
	log.Info("svc serving", zap.String("url", "http://"+ln.Addr().String()), zap.String("specs", set.Dir),
		zap.Strings("agents", agents), zap.Strings("groups", groups), zap.Stringer("options", rt.Options()),
		zap.Bool("auth", s.authToken != ""), zap.Bool("reload", s.reload))

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		stopWatch()
		_ = rt.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stopWatch()
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
