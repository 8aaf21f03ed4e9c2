// Package app is the svc process: New(Options), Start, Shutdown(ctx). An App
// owns everything a process runs (the runtime and its one actor system,
// the run store, the event store and the emitter chain that feeds the log,
// GET /events/stream, the metrics and the event store, the metrics
// provider with its Prometheus and OTLP exporters, the HTTP server and the
// spec watcher), starts them in order and stops them in the reverse order
// written once, in Shutdown. `svc serve` and `svc run` are flag parsing
// over it; a Go program embeds the same process by building an App.
//
//	a, err := app.New(app.Options{SpecsDir: "specs", Port: 8420, Logger: log})
//	if err != nil { ... }
//	if err := a.Start(); err != nil { ... }   // listening on a.Addr()
//	<-ctx.Done()
//	err = a.Shutdown(shutdownCtx)
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/batch"
	"github.com/svc-dev/svc/broker"
	"github.com/svc-dev/svc/broker/natsbroker"
	"github.com/svc-dev/svc/dashboard"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/bridge"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/http/conns"
	"github.com/svc-dev/svc/http/mcpserver"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/internal/dirlock"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/providers"
	"github.com/svc-dev/svc/spec"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/supervisor/spawn"
	"github.com/svc-dev/svc/tenant"
	"github.com/svc-dev/svc/tools"
	"github.com/svc-dev/svc/webhook"
	"github.com/svc-dev/svc/worker"
)

// flushTimeout bounds the last metrics export of Shutdown, which runs even
// when the caller's context has ended (the point of a final flush).
const flushTimeout = 5 * time.Second

type state int

const (
	stateNew state = iota
	stateRunning
	stateFailed // Start failed and cleaned up
	stateStopped
)

// App is one svc process. Its methods are safe for concurrent use; the
// accessors (Addr, Router, Backend, Runtime) answer nil before Start.
type App struct {
	opts Options
	log  *zap.Logger

	mu    sync.Mutex // serialises Start and the state change of Shutdown
	state state
	// stopped is closed once Shutdown has finished; stopErr is its result.
	stopped  chan struct{}
	stopOnce sync.Once
	stopErr  error

	// What Start built, in the order it built it; stop releases these in
	// the reverse order. Written only by Start, under mu.
	tel         *telemetry
	mp          metric.MeterProvider
	set         *spec.Set
	env         spec.Env
	locks       []*dirlock.Lock // the data directory's and the store path's
	runStore    svc.RunStore
	ownRunStore bool
	sweepStop   context.CancelFunc // the shared run store's sweep (nodes.go)
	sweepDone   chan struct{}
	evStore     eventstore.Store
	storeEm     *eventstore.Emitter
	system      *actor.ActorSystem
	logEm       *emitters.Async
	live        *sse.Emitter
	rt          *supervisor.Runtime
	batches     *batch.Manager       // batches.go
	webhooks    *webhook.Sender      // webhooks.go
	nats        *natsbroker.Embedded // Broker "embedded"
	broker      svc.Broker
	pub         *dispatch.Publisher // a publisher's, with a broker and no Worker
	nestedPub   *dispatch.Publisher // a worker's, with Worker.DispatchNested
	worker      *worker.Worker
	bridge      *bridge.Bridge // a worker's BrokerEventBridge
	handler     http.Handler
	watchStop   context.CancelFunc
	watcher     *spec.Watcher
	keys        *tenant.Keyring // APIKeysFile's
	keysStop    context.CancelFunc
	keysDone    chan struct{} // closed when the key file's watch returns
	ln          net.Listener
	srv         *http.Server
	serveErr    chan error    // the error that stopped Serve, if not Shutdown
	served      chan struct{} // closed when Serve has returned
	// requests counts the HTTP requests the server is handling.
	requests atomic.Int64
}

// New checks opts and returns an App ready to Start. It opens, creates and
// starts nothing.
func New(opts Options) (*App, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	return &App{opts: opts, log: opts.Logger, stopped: make(chan struct{}), serveErr: make(chan error, 1)}, nil
}

// Start builds and starts the process, in this order: the metrics provider,
// the specs (loaded and checked), the locks (the data directory's and the
// store path's; a *LockedError naming the holder's PID when another process
// has them), the run store, the event store and its
// emitter, the actor system, the emitter chain (log, SSE, OTel metrics,
// event store), the runtime with its agents and groups, the HTTP handler,
// the spec watcher, and last the HTTP server, so that nothing is served
// before everything is ready. When a step fails, Start stops what the
// earlier ones started and returns the error: a *ConfigError when Options
// are at fault. An App starts at most once.
func (a *App) Start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state != stateNew {
		return errState
	}
	if err := a.start(); err != nil {
		a.state = stateFailed
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if cerr := a.stop(ctx); cerr != nil {
			a.log.Warn("cleaning up after a failed start", zap.Error(cerr))
		}
		return err
	}
	a.state = stateRunning
	return nil
}

func (a *App) start() error {
	o := &a.opts
	log := a.log
	// A listener given in Options is the app's from now on: stop closes
	// it, also when a step before the server fails.
	a.ln = o.Listener

	// Metrics first: the runtime, the actor system and the HTTP server
	// record into the provider.
	if o.MeterProvider != nil {
		a.mp = o.MeterProvider
	} else {
		tel, err := newTelemetry(context.Background(), o.Metrics, o.OTLPFromEnv)
		if err != nil {
			return err
		}
		a.tel = tel
		if tel.mp != nil {
			a.mp = tel.mp
			log.Info("metrics", zap.Bool("prometheus", tel.metrics != nil), zap.String("otlp", tel.otlp))
		}
	}

	// Specs before the stores, so that a bad spec creates nothing on disk.
	models := o.Models
	if models == nil {
		models = providers.Default()
	}
	a.env = SpecEnv(models, o.FilesRoot, o.Agents)
	a.env.RuntimeOptions = o.RuntimeOptions
	runtimeOpts := svc.DefaultOptions()
	if o.SpecsDir != "" {
		set, err := spec.Load(o.SpecsDir, a.env)
		if err != nil {
			return &ConfigError{Option: "SpecsDir", Err: err}
		}
		if _, _, err := a.definitions(set); err != nil {
			return &ConfigError{Option: "ServeAgents", Err: err}
		}
		a.set = set
		runtimeOpts = set.Options
	}
	var dash http.Handler
	if o.Dashboard {
		dash = dashboard.Handler()
		if o.DashboardDir != "" {
			h, err := dashboard.Dir(o.DashboardDir)
			if err != nil {
				return &ConfigError{Option: "DashboardDir", Err: err}
			}
			dash = h
		}
	}
	if o.RuntimeOptions != nil {
		runtimeOpts = o.RuntimeOptions(runtimeOpts)
	}
	if err := runtimeOpts.Validate(); err != nil {
		return &ConfigError{Option: "RuntimeOptions", Err: err}
	}
	var prices *model.PriceTable
	if o.PricesFile != "" {
		p, err := model.LoadPrices(o.PricesFile)
		if err != nil {
			return &ConfigError{Option: "PricesFile", Err: err}
		}
		prices = &p
	}

	// The locks, before any store is opened: one server per data
	// directory and per store path.
	if err := a.lock(); err != nil {
		return err
	}

	// The run store.
	if o.RunStore != nil {
		a.runStore = o.RunStore
	} else {
		s, where, err := openStore(o.Store, o.DataDir, o.NodeID, o.NodeLease)
		if err != nil {
			return err
		}
		a.runStore, a.ownRunStore = s, true
		fields := []zap.Field{zap.String("store", where)}
		if sh, ok := s.(svc.SharedRunStore); ok {
			fields = append(fields, zap.String("node", sh.NodeID()), zap.Duration("node_lease", sh.LeaseTTL()))
		}
		log.Info("run store", fields...)
	}

	// The event store, written through a batching emitter off the
	// runtime's path.
	evs, where, err := openEventStore(o.Events, o.DataDir, eventstore.Retention{MaxRows: o.EventsMaxRows, MaxAge: o.EventsMaxAge})
	if err != nil {
		return err
	}
	log.Info("event store", zap.String("events", where))
	if evs != nil {
		a.evStore = evs
		a.storeEm = eventstore.NewEmitter(evs, 0, 0)
	}

	// The broker, after the stores and before the runtime, which
	// dispatches through it.
	if o.Broker != "" {
		if err := a.connect(); err != nil {
			return err
		}
	}

	// One actor system for the process: the runtime's actors and the SSE
	// subscribers live in it.
	// A host's system (ActorSystem) is the host's to stop.
	if a.system = o.ActorSystem; a.system == nil {
		a.system = supervisor.NewActorSystem(log)
	}

	// The emitter chain. Events reach the log through a queue, so that a
	// slow stderr never holds up a run.
	a.logEm = emitters.NewAsync(emitters.NewLog(log), 0)
	live, err := sse.New(a.system, sse.Config{HeartbeatInterval: o.SSEHeartbeat, QueueSize: o.SSEQueueSize, MeterProvider: a.mp,
		Prefix: actorPrefix(o.ActorPrefix)})
	if err != nil {
		return &ConfigError{Option: "SSEQueueSize", Err: err}
	}
	a.live = live
	chain := []svc.Emitter{a.logEm, live}
	if a.storeEm != nil {
		chain = append(chain, a.storeEm)
	}
	if a.mp != nil {
		otelEm, err := emitters.NewOTel(a.mp)
		if err != nil {
			return fmt.Errorf("app: metrics emitter: %w", err)
		}
		chain = append(chain, otelEm)
	}
	// A worker relays the events of the tasks whose publisher asked for
	// them; the bridge ignores every other event.
	if a.broker != nil && o.Worker != nil {
		a.bridge = bridge.New(a.broker, bridge.Config{Logger: log.Named("bridge")})
		chain = append(chain, a.bridge)
	}

	// The runtime, with its agents and groups. A publisher's dispatches
	// every invocation to the fleet; a worker's runs them here and says
	// so ("backend": "broker:<scheme>").
	emitter := emitters.Multi(chain...)
	if err := a.newWebhooks(log); err != nil {
		return err
	}
	rcfg := supervisor.Config{Options: runtimeOpts, Models: models, Prices: prices,
		Emitter: emitter, Logger: log, Store: a.runStore, System: a.system,
		Prefix: o.ActorPrefix, Events: live, Callbacks: a.callbacks(),
		NoEventLog: true} // the chain logs the events, the dispatcher's and worker's too
	if a.broker != nil && len(runtimeOpts.RateLimits) > 0 {
		if rcfg.SharedLimits, err = sharedLimits(a.broker); err != nil {
			return err
		}
	}
	var cancelled atomic.Pointer[supervisor.Runtime]
	keys := keysOf(o.BrokerKeys)
	switch {
	case a.broker != nil && o.Worker == nil:
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pub, err := dispatch.New(sctx, dispatch.Config{Broker: a.broker, Emitter: emitter, Logger: log.Named("dispatch"),
			PublishEvents: o.PublishEvents, Health: o.WorkerHealth, AckWait: o.AckWait,
			Keys: keys.verify, SignKeyID: keys.signID, SignKey: keys.sign,
			OnCancel: func(runID string) {
				if rt := cancelled.Load(); rt != nil {
					rt.CancelLocal(runID)
				}
			}})
		if err != nil {
			return fmt.Errorf("app: publisher: %w", err)
		}
		a.pub = pub
		rcfg.Dispatcher = pub
	case a.broker != nil:
		rcfg.Backend = "broker:" + a.broker.Scheme()
		if o.Worker.DispatchNested {
			// The runs nested in the worker's tasks go back on the broker
			// through a publisher of its own, whose inbox is named by the
			// worker's runtime id.
			if o.Worker.RuntimeID == "" {
				id, err := uuid.NewV7()
				if err != nil {
					return fmt.Errorf("app: runtime id: %w", err)
				}
				w := *o.Worker
				w.RuntimeID = id.String()
				o.Worker = &w
			}
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Nested tasks are signed like the serve node's: a worker
			// with keys refuses unsigned tasks, these included.
			pub, err := dispatch.New(sctx, dispatch.Config{Broker: a.broker, RuntimeID: o.Worker.RuntimeID,
				Emitter: emitter, Logger: log.Named("dispatch"), Health: o.WorkerHealth,
				Keys: keys.verify, SignKeyID: keys.signID, SignKey: keys.sign})
			if err != nil {
				return fmt.Errorf("app: nested publisher: %w", err)
			}
			a.nestedPub = pub
			rcfg.NestedDispatcher = pub
		}
	}
	rt, err := supervisor.New(rcfg)
	if err != nil {
		return fmt.Errorf("app: runtime: %w", err)
	}
	a.rt = rt
	cancelled.Store(rt)
	a.startSweeper()
	agents, groups, _ := a.definitions(a.set) // checked with the specs
	if err := rt.Register(agents...); err != nil {
		return &ConfigError{Option: "Agents", Err: err}
	}
	if err := rt.RegisterGroups(groups...); err != nil {
		return &ConfigError{Option: "Groups", Err: err}
	}

	// Runs a previous process left unfinished go on, now that their
	// targets are known.
	rt.ResumeRuns(context.Background())

	// The worker takes tasks once the runtime can run them.
	if o.Worker != nil {
		w := o.Worker
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		wk, err := worker.New(sctx, worker.Config{Broker: a.broker, Runner: rt, Agents: w.Agents,
			Concurrency: w.Concurrency, Prefetch: w.Prefetch, AckWait: o.AckWait, MaxDeliver: o.MaxDeliver,
			Heartbeat: w.Heartbeat, RuntimeID: w.RuntimeID, ConsumerID: w.ConsumerID, Emitter: emitter, Events: a.bridge,
			Keys: keys.verify, SignKeyID: keys.signID, SignKey: keys.sign,
			Logger: log.Named("worker")})
		if err != nil {
			return &ConfigError{Option: "Worker", Err: err}
		}
		if err := wk.Start(sctx); err != nil {
			return fmt.Errorf("app: worker: %w", err)
		}
		a.worker = wk
	}

	// The HTTP handler: the router and the routes of the standalone server.
	ropts := []server.Option{server.WithSSEEmitter(live)}
	if err := a.startBatches(log); err != nil {
		return err
	}
	if a.batches != nil {
		ropts = append(ropts, server.WithBatches(a.batches))
	}
	a.startWebhooks()
	if a.broker != nil {
		// /readyz: 503 while the broker is away (the client reconnects
		// by itself), 200 again once it is back.
		ropts = append(ropts, server.WithReadyCheck("broker", newBrokerProbe(a.broker, log.Named("ready")).check))
	}
	if o.MaxBodyBytes > 0 {
		ropts = append(ropts, server.WithMaxBodyBytes(o.MaxBodyBytes))
	}
	if o.Dashboard {
		ropts = append(ropts, server.WithDashboard(dash))
	}
	if a.mp != nil {
		// svc.http.run_stream.slow_disconnects, beside the emitter's
		// svc.sse.slow_disconnects.
		ropts = append(ropts, server.WithMeterProvider(a.mp))
	}
	readTimeout := o.ReadTimeout
	if readTimeout == 0 {
		readTimeout = server.DefaultReadTimeout
	}
	authToken := o.AuthToken
	if o.APIKeysFile != "" {
		keys, err := tenant.New(tenant.Config{File: o.APIKeysFile, AuthToken: o.AuthToken, Log: log.Named("keys"), Interval: o.APIKeysInterval})
		if err != nil {
			return &ConfigError{Option: "APIKeysFile", Err: err}
		}
		ctx, cancel := context.WithCancel(context.Background())
		a.keys, a.keysStop, a.keysDone = keys, cancel, make(chan struct{})
		go func() {
			defer close(a.keysDone)
			keys.Watch(ctx)
		}()
		authToken = ""
	}
	cfg := server.StandaloneConfig{AuthToken: authToken, AllowedOrigins: o.AllowedOrigins, Logger: log, RouterOptions: ropts, MeterProvider: a.mp,
		ReadTimeout: readTimeout, AllowedHosts: o.AllowedHosts, Reserved: conns.Reserved}
	if a.keys != nil {
		cfg.Keys = a.keys
	}
	// DNS rebinding reaches a server on loopback from any web page; with
	// a token it gets nothing, without one the Host header is the check.
	// NoListen: nothing listens, nothing to rebind to; the handler is
	// called in process (client.OverHandler) or mounted by a host.
	if !o.NoListen && ((a.ln == nil && server.IsLoopbackHost(o.Host) || a.ln != nil && isLoopbackAddr(a.ln.Addr())) && o.AuthToken == "" && o.APIKeysFile == "" || len(o.AllowedHosts) > 0) {
		cfg.CheckHost = true
		if a.ln == nil {
			cfg.ListenHost = o.Host
		}
	}
	if a.evStore != nil {
		cfg.Events = a.evStore
	}
	if a.pub != nil {
		cfg.Fleet = a.pub
	}
	if a.tel != nil && a.tel.metrics != nil {
		cfg.Metrics = a.tel.metrics
	}
	if o.MCP {
		cfg.MCP = mcpserver.Handler(rt, mcpserver.Options{Version: svc.Version, Logger: log.Named("mcp"), Definitions: rt})
	}
	h, err := server.NewStandalone(rt, cfg)
	if err != nil {
		return fmt.Errorf("app: HTTP handler: %w", err)
	}
	a.handler = h

	if o.Reload {
		if err := a.watch(runtimeOpts); err != nil {
			return err
		}
	}

	if o.NoListen {
		return nil
	}
	// Last: the HTTP server, once everything it serves is ready.
	ln := a.ln
	if ln == nil {
		addr := net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("app: listen on %s: %w", addr, err)
		}
	}
	maxConns := maxConnections(o.MaxConnections, fileLimit())
	bounded, err := conns.NewListener(ln, conns.Config{Max: maxConns, Problem: server.ProblemBody})
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("app: listener: %w", err)
	}
	a.ln = bounded
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.requests.Add(1)
		defer a.requests.Add(-1)
		h.ServeHTTP(w, r)
	})
	idle := o.IdleTimeout
	if idle == 0 {
		idle = DefaultIdleTimeout
	}
	// ConnContext lets the event streams cap a connection's send buffer,
	// so that a client that stops reading costs little (issue 13), and
	// tells the requests of the connections accepted past the bound.
	// ReadTimeout stays 0: a body's deadline is BodyDeadline's, which
	// ends with the body (see there).
	a.srv = &http.Server{Handler: counted, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idle,
		ErrorLog: zap.NewStdLog(log.Named("http")), ConnState: bounded.ConnState,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return server.ConnContext(conns.ConnContext(ctx, c), c)
		}}
	// http.Server.Shutdown waits for open connections, and a subscriber
	// of GET /events/stream never hangs up: end the streams as soon as
	// the shutdown starts.
	a.srv.RegisterOnShutdown(func() { _ = live.Close() })
	a.served = make(chan struct{})
	go func() {
		defer close(a.served)
		if err := a.srv.Serve(bounded); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.serveErr <- fmt.Errorf("app: serve: %w", err)
		}
	}()
	names, _ := rt.Agents(context.Background())
	groupNames, _ := rt.Groups(context.Background())
	log.Info("svc serving", zap.String("url", "http://"+ln.Addr().String()), zap.String("specs", o.SpecsDir),
		zap.Strings("agents", names), zap.Strings("groups", groupNames), zap.Stringer("options", rt.Options()),
		zap.Bool("auth", o.AuthToken != "" || o.APIKeysFile != ""), zap.Bool("api_keys", o.APIKeysFile != ""), zap.Bool("reload", o.Reload), zap.Int("max_connections", maxConns),
		zap.Duration("idle_timeout", idle), zap.Duration("read_timeout", readTimeout), zap.Bool("host_check", cfg.CheckHost))
	return nil
}

// maxConnections is the bound of open connections for the option n (0:
// DefaultMaxConnections), lowered when the descriptor limit files would
// leave fewer than ReservedFiles to the rest of the process (at least 64).
func maxConnections(n int, files uint64) int {
	if n == 0 {
		n = DefaultMaxConnections
	}
	if files > 0 && uint64(n)+ReservedFiles > files {
		n = max(64, int(files)-ReservedFiles)
	}
	return n
}

// isLoopbackAddr reports whether addr is a loopback TCP address.
func isLoopbackAddr(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// definitions are the agents and groups to register: those of Options,
// then those of the specs that ServeAgents and ServeGroups keep. Its error
// is for a name they give that the specs do not define, or a group kept
// that needs an agent left out.
func (a *App) definitions(set *spec.Set) ([]svc.Agent, []svc.Group, error) {
	agents := append([]svc.Agent(nil), a.opts.Agents...)
	groups := append([]svc.Group(nil), a.opts.Groups...)
	if set == nil {
		return agents, groups, nil
	}
	served := map[string]bool{}
	for _, ag := range a.opts.Agents {
		served[ag.Name] = true
	}
	var errs []error
	keep := func(what, flag string, names []string, defined []string) map[string]bool {
		if names == nil {
			return nil
		}
		m := map[string]bool{}
		for _, n := range names {
			if !slices.Contains(defined, n) {
				errs = append(errs, fmt.Errorf("%s: no %s %q in %s (%s: %s)", flag, what, n, set.Dir, what+"s", strings.Join(defined, ", ")))
			}
			m[n] = true
		}
		return m
	}
	var agentNames, groupNames []string
	for _, ag := range set.Agents {
		agentNames = append(agentNames, ag.Name)
	}
	for _, g := range set.Groups {
		groupNames = append(groupNames, g.Name)
	}
	onlyAgents := keep("agent", "--agents", a.opts.ServeAgents, agentNames)
	onlyGroups := keep("group", "--groups", a.opts.ServeGroups, groupNames)
	for _, ag := range set.Agents {
		if onlyAgents == nil || onlyAgents[ag.Name] {
			agents = append(agents, ag)
			served[ag.Name] = true
		}
	}
	for _, g := range set.Groups {
		if onlyGroups != nil && !onlyGroups[g.Name] {
			continue
		}
		if onlyAgents != nil {
			var missing []string
			for _, n := range groupAgents(g) {
				if !served[n] && !slices.Contains(missing, n) {
					missing = append(missing, n)
				}
			}
			if len(missing) > 0 {
				errs = append(errs, fmt.Errorf("group %s needs agent %s, which --agents leaves out: add it to --agents, or leave the group out with --groups", g.Name, strings.Join(missing, ", ")))
				continue
			}
		}
		groups = append(groups, g)
	}
	return agents, groups, errors.Join(errs...)
}

// groupAgents are the agents a group runs: its nodes', or its coordinator
// and delegates.
func groupAgents(g svc.Group) []string {
	var out []string
	for _, n := range g.Nodes {
		out = append(out, n.Agent)
	}
	if g.Coordinator != "" {
		out = append(out, g.Coordinator)
	}
	return append(out, g.Delegates...)
}

// keepsWorkerAgents refuses a reload that drops an agent a worker takes
// the tasks of: its subscription would stay and every task fail.
func (a *App) keepsWorkerAgents(agents []svc.Agent) error {
	if a.worker == nil {
		return nil
	}
	var gone []string
	for name := range a.worker.Subjects() {
		if !slices.ContainsFunc(agents, func(ag svc.Agent) bool { return ag.Name == name }) {
			gone = append(gone, name)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	slices.Sort(gone)
	return fmt.Errorf("the worker takes the tasks of %s, which the specs no longer define: restart the worker to stop serving an agent", strings.Join(gone, ", "))
}

// watch starts the spec watcher. Each change that loads swaps the
// runtime's agents and groups; one that does not is logged, and the
// runtime keeps what it has.
func (a *App) watch(started svc.Options) error {
	o := &a.opts
	ctx, cancel := context.WithCancel(context.Background())
	cfg := spec.WatchConfig{Dir: o.SpecsDir, Env: a.env, Dirs: o.ReloadDirs, Include: o.ReloadInclude,
		Exclude: o.ReloadExclude, Interval: o.ReloadInterval}
	w, err := spec.Watch(ctx, cfg, func(set *spec.Set, err error) {
		if err != nil {
			a.log.Error("specs reload failed; still serving the previous definitions", zap.String("specs", o.SpecsDir), zap.Error(err))
			return
		}
		agents, groups, err := a.definitions(set)
		if err == nil {
			err = a.keepsWorkerAgents(agents)
		}
		if err != nil {
			a.log.Error("specs reload refused; still serving the previous definitions", zap.String("specs", o.SpecsDir), zap.Error(err))
			return
		}
		if err := a.rt.Replace(agents, groups); err != nil {
			a.log.Error("specs reload refused by the runtime; still serving the previous definitions", zap.String("specs", o.SpecsDir), zap.Error(err))
			return
		}
		if a.worker != nil {
			// Its subscriptions are those of its start.
			subs := a.worker.Subjects()
			for _, ag := range agents {
				if _, ok := subs[ag.Name]; !ok && (len(o.Worker.Agents) == 0 || slices.Contains(o.Worker.Agents, ag.Name)) {
					a.log.Warn("agent added by the reload: this worker takes its tasks once restarted", zap.String("agent", ag.Name))
				}
			}
		}
		opts := set.Options
		if o.RuntimeOptions != nil {
			opts = o.RuntimeOptions(opts)
		}
		if !reflect.DeepEqual(opts, started) {
			a.log.Warn("runtime options changed in runtime.yaml; they apply at the next start", zap.Stringer("options", opts), zap.Stringer("running", started))
		}
		a.log.Info("specs reloaded", zap.String("specs", o.SpecsDir), zap.Int("agents", len(set.Agents)), zap.Int("groups", len(set.Groups)))
	})
	if err != nil {
		cancel()
		return &ConfigError{Option: "Reload", Err: err}
	}
	a.watchStop, a.watcher = cancel, w
	return nil
}

// SpecEnv is what spec files may refer to in a process: the built-in tools
// (read_file and write_file confined to filesRoot), spawn_agents, the model
// providers of models, the names of agents registered from Go, and the
// compile the runtime applies when it registers an agent. `svc validate`
// checks files against it and `svc serve` loads them with it: one path,
// so the two cannot disagree.
func SpecEnv(models *model.Registry, filesRoot string, agents []svc.Agent) spec.Env {
	env := spec.Env{
		Tools:    tools.Builtins(tools.BuiltinOptions{FilesRoot: filesRoot}),
		Builtins: append([]string{spawn.AgentsTool, svc.AskHumanTool}, model.ServerTools...),
		CheckModel: func(id string) error {
			_, err := models.Resolve(id)
			return err
		},
		// The runtime's own compile: what passes here, Register accepts.
		CheckAgent: func(a svc.Agent) error { return supervisor.CheckAgent(models, a) },
		CheckSettings: func(ids []string, settings map[string]any) error {
			return supervisor.CheckSettings(models, ids, settings)
		},
	}
	for _, ag := range agents {
		env.Agents = append(env.Agents, ag.Name)
	}
	return env
}

// Shutdown stops the process, in this order:
//
//  1. the HTTP server stops accepting connections, ends the event streams
//     and waits for the requests in flight;
//  2. the spec watcher stops, so that no reload lands in what follows;
//  3. the worker (if any) stops taking tasks, lets those in flight
//     finish until ctx ends and hands the rest back to the broker;
//  4. the runtime refuses new runs, waits for those in flight (submitted
//     runs too), cancels what is left when ctx ends, and stops its actors
//     and tool servers; then connections still open are closed;
//  5. a worker's event bridge relays its last events; the publisher's
//     subscriptions, the broker connection and the embedded broker close;
//  6. the emitters: the SSE subscribers end, the log queue and the event
//     store emitter are written out, and the event store closes;
//  7. the actor system stops, nothing running in it any more;
//  8. the run store closes (unless it is Options.RunStore, the caller's),
//     and the data directory and store path locks are released;
//  9. the metrics provider flushes (OTLP) and stops.
//
// ctx bounds steps 1, 3 and 4, the waits for requests and runs: when it ends,
// what is left is cancelled and Shutdown reports it. A run whose tool or
// model call never returns (one blocked in a system call, deaf to its
// context) is answered all the same and its call abandoned: Shutdown
// does not wait for it, and its error names every such call still
// running (a *supervisor.StuckError). The releases after
// them always run, the final metrics flush within 5 s of its own.
// Shutdown before Start, after a failed Start, and a second time return at
// once (a second call waits, within its ctx, for the first to finish and
// returns its result).
func (a *App) Shutdown(ctx context.Context) error {
	first := false
	a.stopOnce.Do(func() { first = true })
	if !first {
		select {
		case <-a.stopped:
			return a.stopErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	a.mu.Lock() // waits for a Start in progress
	running := a.state == stateRunning
	a.state = stateStopped
	a.mu.Unlock()
	if running {
		a.log.Info("svc shutting down")
		a.stopErr = a.stop(ctx)
		a.log.Info("svc stopped")
	}
	close(a.stopped)
	return a.stopErr
}

// stop releases what start built, in the order Shutdown documents; each
// step skips what was not built, so a failed Start uses it too.
func (a *App) stop(ctx context.Context) error {
	var errs []error
	fail := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	// 0. The batches stop where they are, in the store, for the next
	// process to resume; their followers end.
	if a.batches != nil {
		fail("batches", a.batches.Close())
	}
	// The callbacks: an attempt in flight is dropped, due again for the
	// next process.
	if a.webhooks != nil {
		fail("webhooks", a.webhooks.Close())
	}
	// 1. HTTP: stop accepting, end the streams (RegisterOnShutdown), let
	// requests in flight finish until ctx ends.
	if a.srv != nil {
		fail("http server", a.srv.Shutdown(ctx))
	} else if a.ln != nil {
		_ = a.ln.Close()
	}
	// 2. The spec watcher, and the key file's.
	if a.watcher != nil {
		a.watchStop()
		a.watcher.Wait()
	}
	if a.keysStop != nil {
		a.keysStop()
		<-a.keysDone
	}
	// 3. The worker: stop taking tasks, let those in flight finish until
	// ctx ends, hand the rest back to the broker.
	if a.worker != nil {
		fail("worker", a.worker.Shutdown(ctx))
	}
	// 4. The runtime: drain runs until ctx ends, then cancel; stop actors
	// and tool servers. Requests that outlived the grace period have
	// their answers (cancelled) now; close what connections remain.
	if a.rt != nil {
		fail("runtime", a.rt.Shutdown(ctx))
	}
	if a.srv != nil {
		_ = a.srv.Close()
		<-a.served
	}
	// 5. The broker: the bridge's last events, the publisher's
	// subscriptions, the connection, the embedded server.
	if a.bridge != nil {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		fail("relaying the last events", a.bridge.Close(bctx))
		cancel()
		if d := a.bridge.Dropped(); d > 0 {
			a.log.Warn("events the bridge could not relay to their publishers", zap.Int64("dropped", d))
		}
	}
	if a.pub != nil {
		fail("publisher", a.pub.Close())
	}
	if a.nestedPub != nil {
		fail("nested publisher", a.nestedPub.Close())
	}
	if a.broker != nil {
		fail("broker", a.broker.Close())
	}
	if a.nats != nil {
		fail("embedded broker", a.nats.Shutdown(context.WithoutCancel(ctx)))
	}
	// 6. Emitters, after the runtime has emitted its last event.
	if a.live != nil {
		_ = a.live.Close()
	}
	if a.logEm != nil {
		a.logEm.Close()
		if d := a.logEm.Dropped(); d > 0 {
			a.log.Warn("events dropped because the log could not keep up", zap.Int64("dropped", d))
		}
	}
	if a.storeEm != nil {
		fail("flushing events to the event store", a.storeEm.Close())
		if d := a.storeEm.Dropped(); d > 0 {
			a.log.Warn("events the event store lost", zap.Int64("dropped", d))
		}
	}
	if a.evStore != nil {
		fail("event store", a.evStore.Close())
	}
	// 7. The actor system, empty now.
	if a.system != nil && a.system != a.opts.ActorSystem {
		a.system.Shutdown()
	}
	// 8. The run store, which the runtime no longer writes.
	a.stopSweeper()
	if a.runStore != nil && a.ownRunStore {
		fail("run store", a.runStore.Close())
	}
	// The locks, once nothing writes under the data directory any more.
	fail("releasing the data directory lock", a.unlock())
	// 9. Metrics, last, so that they count everything.
	if a.tel != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		fail("metrics", a.tel.shutdown(fctx))
		cancel()
	}
	return errors.Join(errs...)
}

// InFlight is what a shutdown waits for: the HTTP requests the server is
// handling (event streams included) and the runtime's calls in flight
// (runs, gathers, group runs, submitted runs, nested runs included). Both
// are 0 before Start.
type InFlight struct {
	Requests int
	Runs     int
}

// InFlight counts what is in flight now; `svc serve` logs it while it
// shuts down.
func (a *App) InFlight() InFlight {
	n := InFlight{Requests: int(a.requests.Load())}
	if rt := a.Runtime(); rt != nil {
		n.Runs = rt.InFlight()
	}
	return n
}

// Err delivers the error that stopped the HTTP server, when it stops for
// any reason but Shutdown; the process should then be shut down.
func (a *App) Err() <-chan error { return a.serveErr }

// Addr is the address the HTTP server listens on; nil before Start and
// with NoListen.
func (a *App) Addr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ln == nil {
		return nil
	}
	return a.ln.Addr()
}

// URL is "http://" + Addr, or "" when nothing listens.
func (a *App) URL() string {
	if addr := a.Addr(); addr != nil {
		return "http://" + addr.String()
	}
	return ""
}

// Router is the HTTP handler the server serves (the routes of
// docs/api.md behind request ids, the access log, metrics and AuthToken).
// Mount it in a host's server (with http.StripPrefix under a prefix) or
// call it in process with client.OverHandler. nil before Start.
func (a *App) Router() http.Handler {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.handler
}

// Backend is the call surface of the process (it also implements
// svc.RunBackend): today the runtime itself; with a broker, what
// dispatches through it. nil before Start. Stop it with Shutdown, not with
// its Close.
func (a *App) Backend() svc.Backend {
	rt := a.Runtime()
	if rt == nil {
		return nil
	}
	return rt
}

// Runtime is the process's runtime, for registering agents from Go after
// Start (Register, RegisterGroups; a reload keeps only Options.Agents and
// Groups and those of the specs) and for what svc.Backend does not cover.
// nil before Start.
func (a *App) Runtime() *supervisor.Runtime {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rt
}

// connect opens Options.Broker, starting the embedded nats-server first
// when it is "embedded".
func (a *App) connect() error {
	o := &a.opts
	url := o.Broker
	if url == "embedded" {
		dir := filepath.Join(o.DataDir, "nats") // where StartEmbedded keeps it
		e, err := natsbroker.StartEmbedded(natsbroker.EmbeddedConfig{DataDir: o.DataDir, Listen: o.NATSListen, Logger: a.log.Named("nats")})
		if err != nil {
			return fmt.Errorf("app: embedded broker on %s: %w", o.NATSListen, err)
		}
		a.nats = e
		url = e.ClientURL()
		a.log.Info("embedded broker", zap.String("listen", url), zap.String("data", dir))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, url, broker.Options{Logger: a.log.Named("broker")})
	if err != nil {
		return fmt.Errorf("app: %w", err) // the URL was checked: the broker is not there
	}
	a.broker = b
	return nil
}

// Worker is the process's worker (nil unless Options.Worker).
func (a *App) Worker() *worker.Worker {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.worker
}

// BrokerURL is the URL the process's broker is reached at: the embedded
// server's client URL for Broker "embedded", else Options.Broker.
func (a *App) BrokerURL() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nats != nil {
		return a.nats.ClientURL()
	}
	return a.opts.Broker
}

// brokerKeys is a Keyring as dispatch.Config and worker.Config take it.
type brokerKeys struct {
	verify map[string][]byte
	signID string
	sign   []byte
}

func keysOf(k *fleetwire.Keyring) brokerKeys {
	if k == nil {
		return brokerKeys{}
	}
	return brokerKeys{verify: k.Keys, signID: k.SignID, sign: k.Keys[k.SignID]}
}

// actorPrefix is the prefix of the process's actor names.
func actorPrefix(p string) string {
	if p == "" {
		return supervisor.DefaultPrefix
	}
	return p
}
