package app

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/batch"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/spec"
)

// Defaults of Options, for the fields whose zero value means "the default".
const (
	DefaultDataDir       = ".svc"
	DefaultHost          = "127.0.0.1"
	DefaultEventsMaxRows = 1_000_000
	DefaultEventsMaxAge  = 7 * 24 * time.Hour
	// DefaultPort is the port of `svc serve`. Options.Port 0 is not this
	// default but any free port (read it back with App.Addr).
	DefaultPort = 8420
)

// Options configure a process. The zero value is a usable process: no
// specs (register agents with Agents and Groups, or on Runtime after
// Start), the run and event stores as SQLite files under ./.svc, the HTTP
// server on 127.0.0.1 at a free port without authentication, no metrics.
// Each field says its default; the flag of `svc serve` that sets it is in
// brackets.
type Options struct {
	// SpecsDir is the directory of agents/*.yaml, groups/*.yaml and
	// runtime.yaml; "" loads no specs. [--specs]
	SpecsDir string
	// Agents and Groups are registered from Go beside the specs (a reload
	// keeps them); groups of SpecsDir may use these agents.
	Agents []svc.Agent
	Groups []svc.Group
	// RuntimeOptions, when set, is given the runtime options of
	// runtime.yaml (svc.DefaultOptions() without one) at Start and at each
	// reload, and returns the options to run with: command-line flags win
	// over the file this way. nil runs with the file's options.
	// [--timeout-seconds, --max-spawn-depth, --max-spawn-children,
	// --retry-max-attempts, --retry-backoff-factor, --token-budget,
	// --max-tokens-per-run, --mcp-eager-start]
	RuntimeOptions func(fromSpecs svc.Options) svc.Options
	// Models resolves provider:name model ids; nil: every provider linked
	// into svc (model/providers.Default: test, openai, anthropic).
	Models *model.Registry
	// FilesRoot confines the read_file and write_file tools; "": those
	// tools fail. [--files-root]
	FilesRoot string
	// PricesFile is a YAML or JSON file of model prices overriding and
	// extending the built-in table; "": the built-in table only. [--prices]
	PricesFile string

	// DataDir holds the default run and event stores (runs.db, events.db);
	// DefaultDataDir when "". It is created only when a default store or
	// the embedded broker is used, and then locked (DataDir/svc.lock, the
	// holder's PID inside) until Shutdown: a second process on it fails to
	// start with a *LockedError. A worker neither uses nor locks it.
	// [--data-dir]
	DataDir string
	// Store is where submitted runs are kept: "" (a SQLite file under
	// DataDir), memory, sqlite:PATH, pebble:PATH or redis://HOST:PORT
	// (rediss:// for TLS). A sqlite: or pebble: PATH outside DataDir is
	// locked on its own (PATH.lock). [--store]
	Store string
	// NodeLease, with a shared run store (redis://), is how long this
	// node's ownership of its runs outlives its last renewal: once it
	// lapses (the process was killed), the other nodes fail the runs it
	// left unfinished, reason interrupted. 0 means
	// redisstore.DefaultLeaseTTL (15 s). [--node-lease]
	NodeLease time.Duration
	// ProviderBatchPoll is how often a batch of mode provider asks the
	// provider about its provider batches: 0 means
	// batch.DefaultProviderPoll (30 s); otherwise batch.MinProviderPoll
	// (100 ms) to batch.MaxProviderPoll (10 min). [--provider-batch-poll]
	ProviderBatchPoll time.Duration
	// NodeID, with a shared run store, names this node as the owner of the
	// runs it creates; "" means a fresh id per start (host-pid-random).
	// A stable id (one per node) lets a restarted node mark the runs of
	// its previous life failed at once. Start refuses an id whose lease
	// another live node holds (a ConfigError of NodeID; after a kill, until
	// the old lease expires). [--node-id]
	NodeID string
	// RunStore, when set, is an open run store to use instead of Store;
	// it stays the caller's to close, after Shutdown. Setting both is an
	// error.
	RunStore svc.RunStore
	// Events is where runtime events are kept for the rollup routes (GET
	// /events, /usage, /tools?group_by=, /runtime/stats,
	// /runs/{trace_id}/tree): "" (a SQLite file under DataDir), memory,
	// sqlite:PATH, or none (no rollup routes). [--events]
	Events string
	// EventsMaxRows keeps at most this many events, the newest;
	// DefaultEventsMaxRows when 0, no limit when negative.
	// [--events-max-rows, where 0 means no limit]
	EventsMaxRows int
	// EventsMaxAge drops events older than this; DefaultEventsMaxAge when
	// 0, no limit when negative. [--events-max-age, where 0 means no limit]
	EventsMaxAge time.Duration

	// NoListen runs no HTTP server: nothing listens, Addr is nil, and
	// Router still serves in process (client.OverHandler, or mounted in a
	// host's server). `svc run` runs this way.
	NoListen bool
	// Listener, when set, is where the HTTP server accepts connections,
	// instead of listening on Host and Port; Shutdown closes it.
	Listener net.Listener
	// Host is the address to listen on; DefaultHost when "". [--host]
	Host string
	// Port is the port to listen on; 0 is any free port (App.Addr says
	// which). [--port, default DefaultPort]
	Port int
	// AuthToken, when set, is the bearer token every route but /healthz,
	// /health and /readyz requires. [--auth-token, $SVC_AUTH_TOKEN]
	AuthToken string
	// APIKeysFile, when set, is the key file of the API keys (package
	// tenant): each request needs one of its keys (or AuthToken, which is
	// then one admin key), with the scope its route needs. The file is
	// read again every APIKeysInterval and a changed file replaces the
	// keys; one that does not load is logged and the keys in use stay.
	// [--api-keys]
	APIKeysFile string
	// APIKeysInterval is how often the key file is read for changes;
	// tenant.DefaultInterval when zero.
	APIKeysInterval time.Duration
	// AllowedOrigins are the browser origins besides the server's own
	// whose requests are served, with CORS headers; a request with any
	// other Origin header is a 403 (server.CheckOrigin).
	// [--allowed-origins]
	AllowedOrigins []string
	// Dashboard serves the web dashboard (package dashboard) at
	// /dashboard/. Its files need no token; the page asks for AuthToken and
	// sends it on its API calls. [--dashboard, default true]
	Dashboard bool
	// DashboardDir, with Dashboard, serves the dashboard's files from
	// this directory (a customised copy of dashboard/static) instead of
	// the embedded ones; it must hold index.html. [--dashboard-dir]
	DashboardDir string
	// ServeAgents, when not nil, are the agents of SpecsDir to serve;
	// the others are not registered (agents of Agents, from Go, always
	// are). A name SpecsDir does not define is refused at start.
	// [svc serve --agents]
	ServeAgents []string
	// ServeGroups, when not nil, are the groups of SpecsDir to serve.
	// A served group that needs an agent ServeAgents leaves out is
	// refused at start (and on reload), naming both. [svc serve --groups]
	ServeGroups []string
	// MCP serves the agents and groups as Model Context Protocol tools
	// over streamable HTTP at /mcp (package http/mcpserver), behind
	// AuthToken like the other routes. [--mcp]
	MCP bool
	// WebhookKey signs the callbacks of batches and submitted runs
	// (package webhook); without one a callback_url is refused (400).
	// [--webhook-key-file]
	WebhookKey []byte
	// WebhookAllowPrivate lets callbacks go to loopback, private and
	// link-local addresses, which the server-side request forgery guard
	// refuses otherwise. [--webhook-allow-private]
	WebhookAllowPrivate bool
	// MaxBodyBytes bounds request bodies; server.DefaultMaxBodyBytes (1
	// MiB) when 0. [--max-body-bytes]
	MaxBodyBytes int64
	// AllowedHosts are the host names, besides localhost, the loopback
	// addresses and Host, that requests may name in their Host header.
	// The Host header is checked when the server listens on loopback
	// without AuthToken (DNS rebinding: a page whose name resolves to
	// 127.0.0.1 is the server's "own" origin), and whenever AllowedHosts
	// is given; other hosts get 421 (server.CheckHost).
	// [--allowed-hosts]
	AllowedHosts []string
	// IdleTimeout closes a keep-alive connection idle for this long;
	// DefaultIdleTimeout when 0. [--idle-timeout]
	IdleTimeout time.Duration
	// ReadTimeout is how long a request's body may take to arrive
	// (server.BodyDeadline); server.DefaultReadTimeout when 0.
	// [--read-timeout]
	ReadTimeout time.Duration
	// MaxConnections bounds the connections open at once (package
	// http/conns): past it, the oldest idle keep-alive connection is
	// closed to make room, a few more are accepted for health checks
	// only, and the rest wait in the kernel's backlog. DefaultMaxConnections
	// when 0, lowered to leave ReservedFiles of the process's file
	// descriptor limit to the stores, the broker and the tool servers.
	// [--max-connections]
	MaxConnections int
	// SSEHeartbeat is how long GET /events/stream may stay idle before a
	// heartbeat comment; sse.DefaultHeartbeatInterval when 0.
	// [--sse-heartbeat]
	SSEHeartbeat time.Duration
	// SSEQueueSize bounds the events waiting per /events/stream subscriber
	// before new ones are dropped; sse.DefaultQueueSize when 0.
	// [--sse-queue-size]
	SSEQueueSize int

	// Metrics serves GET /metrics in the Prometheus format: runtime, HTTP,
	// actor-system and Go metrics, behind AuthToken like the other routes.
	// [--metrics]
	Metrics bool
	// OTLPFromEnv pushes the same metrics over OTLP when the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT (or ..._METRICS_ENDPOINT) variable is
	// set, configured by the other OTEL_* variables. `svc serve` sets it.
	OTLPFromEnv bool
	// MeterProvider, when set, receives the metrics instead of a provider
	// of the app's own; it is the caller's to shut down. It excludes
	// Metrics and OTLPFromEnv, which build the app's own provider.
	MeterProvider metric.MeterProvider

	// Reload watches SpecsDir (and ReloadDirs) and swaps in changed agents
	// and groups without a restart; runs in flight finish on the
	// definitions they started with, and a change that does not load is
	// logged and ignored. Runtime options apply at the next start.
	// [--reload]
	Reload bool
	// ReloadDirs are more directories to watch. [--reload-dir]
	ReloadDirs []string
	// ReloadInclude are the globs of the files that count;
	// spec.DefaultWatchInclude when empty. [--reload-include]
	ReloadInclude []string
	// ReloadExclude are globs of files ignored even though ReloadInclude
	// matches them. [--reload-exclude]
	ReloadExclude []string
	// ReloadInterval is how often the watched directories are polled;
	// spec.DefaultWatchInterval when 0.
	ReloadInterval time.Duration

	// Logger receives the process's logs, the access log and, through the
	// log emitter, every runtime event; nil discards them.
	Logger *zap.Logger

	// ActorSystem, when set, is the host's protoactor system to run in:
	// the runtime's actors and the SSE subscribers are spawned there under
	// ActorPrefix, and Shutdown stops them only, leaving the system and
	// the host's own actors running (the system is the caller's to shut
	// down, after Shutdown). Its logger is the host's. Runtime().PID() is
	// where the host's actors send the messages of package actors/msg.
	// nil: the process builds a system of its own.
	ActorSystem *actor.ActorSystem
	// ActorPrefix starts the names of the process's actors in ActorSystem
	// ("svc/runs-0", "svc/api"); supervisor.DefaultPrefix when "".
	ActorPrefix string

	// Broker makes the process part of a fleet (the distributed mode):
	// memory:// (in this process), nats://HOST:PORT (NATS JetStream),
	// redis://HOST:PORT[/DB] (Redis Streams), or embedded: a nats-server
	// started inside this process, its JetStream files under
	// DataDir/nats, listening on NATSListen for the workers. Without
	// Worker the process is a publisher: every agent invocation is sent
	// to the fleet as a task and its result awaited. "": no broker, runs
	// happen here. [--broker]
	Broker string
	// NATSListen is the client address of the embedded broker;
	// DefaultNATSListen when "". [--nats-listen]
	NATSListen string
	// AckWait is how long a task may go unacknowledged before the broker
	// gives it to another worker (a worker extends it while the task
	// runs, so only a dead or stuck worker loses its tasks);
	// svc.DefaultAckWait when 0. [--ack-wait]
	AckWait time.Duration
	// MaxDeliver is how many deliveries a task gets before it goes to the
	// dead letter and its run fails; svc.DefaultMaxDeliver when 0.
	// [--max-deliver]
	MaxDeliver int
	// PublishEvents, with Broker on a publisher, asks the workers to relay
	// every RuntimeEvent of this process's tasks (the BrokerEventBridge),
	// and feeds them into this process's emitter chain: the log, GET
	// /events/stream, the event store and its rollups and the metrics see
	// the fleet's per-agent and per-tool events. Without it they see
	// agent_dispatched, batch and group events, and the workers' lifecycle
	// events. It about doubles the broker's messages. [--publish-events]
	PublishEvents bool
	// WorkerHealth are the thresholds GET /runtime/stats judges the
	// fleet's workers by: stale after WorkerHealth.Stale without a
	// heartbeat, down after WorkerHealth.Down; the spec's 90 s and 300 s
	// when zero. [--worker-stale-after, --worker-down-after]
	WorkerHealth svc.WorkerThresholds
	// BrokerKeys, with Broker, sign and verify every task, result and
	// cancel message (HMAC-SHA256, docs/distributed.md "Signing and key
	// rotation"): the process signs with the first key and accepts any of
	// them; a worker refuses (counts, logs and dead-letters) a task that is
	// unsigned or not signed by one of them. Every process of a fleet needs
	// the same keys. nil: nothing is signed or checked.
	// [--broker-keys FILE, $SVC_BROKER_KEYS]
	BrokerKeys *fleetwire.Keyring
	// Worker, with Broker, makes the process a worker: it takes the tasks
	// of its agents from the broker and runs them; it serves no HTTP.
	// (`svc worker start`)
	Worker *WorkerOptions
}

// brokerSchemes are the URL schemes of Broker (broker.Open's, with their
// TLS variants).
var brokerSchemes = []string{"memory", "nats", "tls", "redis", "rediss"}

// Defaults of the connection options.
const (
	// DefaultIdleTimeout is longer than the 60 s idle timeout of common
	// load balancers, so that the balancer, not svc, closes an idle
	// connection first (a request it sends on a connection svc is closing
	// would fail).
	DefaultIdleTimeout = 75 * time.Second
	// DefaultMaxConnections bounds the open connections (MaxConnections).
	DefaultMaxConnections = 10000
	// ReservedFiles are the file descriptors MaxConnections leaves to the
	// rest of the process when the descriptor limit is low.
	ReservedFiles = 1024
)

// DefaultNATSListen is where the embedded broker listens for workers.
const DefaultNATSListen = "127.0.0.1:4222"

// WorkerOptions configure a worker process. Shutdown drains it: it stops
// taking tasks, lets those in flight finish until the context of Shutdown
// ends, then gives the rest back to the broker for another worker.
type WorkerOptions struct {
	// Agents are the agents whose tasks it takes; every loaded agent when
	// empty. [--agents]
	Agents []string
	// Concurrency bounds the tasks running at once;
	// worker.DefaultConcurrency when 0. [--concurrency]
	Concurrency int
	// Prefetch bounds the tasks it holds per agent; Concurrency when 0.
	// [--prefetch]
	Prefetch int
	// Heartbeat is the interval of worker_heartbeat;
	// worker.DefaultHeartbeat when 0, none when negative.
	// [--heartbeat-seconds]
	Heartbeat time.Duration
	// RuntimeID names the worker in its events; a new id when "".
	// [--runtime-id]
	RuntimeID string
	// ConsumerID is its name in each agent's consumer group; RuntimeID
	// when "". [--consumer-id]
	ConsumerID string
	// DispatchNested sends the runs nested in its tasks, spawn_agents'
	// children and a team's delegates, back on the broker, to run on any
	// worker of the fleet, with the task's depth, what is left of its
	// token cap, its run id (for cancels) and its trace carried along;
	// when false they run in this worker's own runtime.
	// [--dispatch-nested]
	DispatchNested bool
}

// ConfigError is a problem with Options, found by New or by Start (a specs
// directory that does not load, a store that does not open): the
// process's configuration, not its running, is at fault. Option names the
// field.
type ConfigError struct {
	Option string
	Err    error
}

func (e *ConfigError) Error() string { return e.Option + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// check validates what can be checked without touching the disk or the
// network, and fills in the defaults.
func (o *Options) check() error {
	bad := func(option string, format string, args ...any) error {
		return &ConfigError{Option: option, Err: fmt.Errorf(format, args...)}
	}
	if o.DataDir == "" {
		o.DataDir = DefaultDataDir
	}
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if o.Port < 0 || o.Port > 65535 {
		return bad("Port", "%d: want 0 to 65535", o.Port)
	}
	if o.NoListen && o.Listener != nil {
		return bad("Listener", "given with NoListen")
	}
	if o.RunStore != nil && o.Store != "" {
		return bad("Store", "%q given with RunStore; set one of them", o.Store)
	}
	if err := checkStoreSpec(o.Store); err != nil {
		return &ConfigError{Option: "Store", Err: err}
	}
	if err := checkEventsSpec(o.Events); err != nil {
		return &ConfigError{Option: "Events", Err: err}
	}
	switch {
	case o.EventsMaxRows == 0:
		o.EventsMaxRows = DefaultEventsMaxRows
	case o.EventsMaxRows < 0:
		o.EventsMaxRows = 0 // eventstore.Retention: no limit
	}
	switch {
	case o.EventsMaxAge == 0:
		o.EventsMaxAge = DefaultEventsMaxAge
	case o.EventsMaxAge < 0:
		o.EventsMaxAge = 0
	}
	if o.IdleTimeout < 0 {
		return bad("IdleTimeout", "%s: must not be negative", o.IdleTimeout)
	}
	if o.ReadTimeout < 0 {
		return bad("ReadTimeout", "%s: must not be negative", o.ReadTimeout)
	}
	if o.MaxConnections < 0 {
		return bad("MaxConnections", "%d: must not be negative", o.MaxConnections)
	}
	for _, h := range o.AllowedHosts {
		if _, err := server.CheckHost("", []string{h}); err != nil {
			return &ConfigError{Option: "AllowedHosts", Err: err}
		}
	}
	if o.MaxBodyBytes < 0 {
		return bad("MaxBodyBytes", "%d: must not be negative", o.MaxBodyBytes)
	}
	if o.SSEHeartbeat < 0 {
		return bad("SSEHeartbeat", "%v: must not be negative", o.SSEHeartbeat)
	}
	if o.SSEQueueSize < 0 {
		return bad("SSEQueueSize", "%d: must not be negative", o.SSEQueueSize)
	}
	if o.SSEHeartbeat == 0 {
		o.SSEHeartbeat = sse.DefaultHeartbeatInterval
	}
	if o.SSEQueueSize == 0 {
		o.SSEQueueSize = sse.DefaultQueueSize
	}
	if o.MeterProvider != nil && (o.Metrics || o.OTLPFromEnv) {
		return bad("MeterProvider", "given with Metrics or OTLPFromEnv, which build the app's own provider")
	}
	if o.DashboardDir != "" && !o.Dashboard {
		return bad("DashboardDir", "needs Dashboard")
	}
	if (o.ServeAgents != nil || o.ServeGroups != nil) && o.SpecsDir == "" {
		return bad("ServeAgents", "needs SpecsDir")
	}
	if o.Reload {
		if o.SpecsDir == "" {
			return bad("Reload", "needs SpecsDir")
		}
		for _, p := range append(slices.Clone(o.ReloadInclude), o.ReloadExclude...) {
			if _, err := filepath.Match(p, ""); err != nil {
				return bad("ReloadInclude", "%q: %w", p, err)
			}
		}
	} else if len(o.ReloadDirs) > 0 || len(o.ReloadInclude) > 0 || len(o.ReloadExclude) > 0 {
		return bad("Reload", "ReloadDirs, ReloadInclude and ReloadExclude need Reload")
	}
	if o.ReloadInterval < 0 {
		return bad("ReloadInterval", "%v: must not be negative", o.ReloadInterval)
	}
	if o.ReloadInclude == nil {
		o.ReloadInclude = spec.DefaultWatchInclude
	}
	if o.Broker != "" && o.Broker != "embedded" {
		scheme, _, ok := strings.Cut(o.Broker, "://")
		if !ok || !slices.Contains(brokerSchemes, strings.ToLower(scheme)) {
			return bad("Broker", "%q: want embedded or a URL of %s", o.Broker, strings.Join(brokerSchemes, ", "))
		}
	}
	switch {
	case o.Worker != nil && o.Broker == "":
		return bad("Worker", "needs Broker")
	case o.Worker != nil && o.Broker == "embedded":
		return bad("Broker", "a worker connects to a broker: start the embedded one with `svc serve --broker embedded` and give the worker its address (nats://127.0.0.1:4222)")
	case o.Worker != nil && (o.Worker.Concurrency < 0 || o.Worker.Prefetch < 0):
		return bad("Worker", "concurrency and prefetch must not be negative")
	case o.AckWait < 0:
		return bad("AckWait", "%v: must not be negative", o.AckWait)
	case o.MaxDeliver < 0:
		return bad("MaxDeliver", "%d: must not be negative", o.MaxDeliver)
	case o.NATSListen != "" && o.Broker != "embedded":
		return bad("NATSListen", "only for Broker embedded")
	case o.BrokerKeys != nil && o.Broker == "":
		return bad("BrokerKeys", "needs Broker")
	case o.BrokerKeys != nil && len(o.BrokerKeys.Keys[o.BrokerKeys.SignID]) == 0:
		return bad("BrokerKeys", "no key %q to sign with", o.BrokerKeys.SignID)
	case o.PublishEvents && (o.Broker == "" || o.Worker != nil):
		return bad("PublishEvents", "needs Broker, on a publisher (not a Worker)")
	case o.WorkerHealth.Stale < 0 || o.WorkerHealth.Down < 0:
		return bad("WorkerHealth", "thresholds must not be negative")
	case o.NodeLease < 0:
		return bad("NodeLease", "%v: must not be negative", o.NodeLease)
	case o.NodeLease != 0 && o.NodeLease < time.Second:
		return bad("NodeLease", "%v: must be at least 1s", o.NodeLease)
	case o.ProviderBatchPoll != 0 && (o.ProviderBatchPoll < batch.MinProviderPoll || o.ProviderBatchPoll > batch.MaxProviderPoll):
		return bad("ProviderBatchPoll", "%v: must be between %v and %v", o.ProviderBatchPoll, batch.MinProviderPoll, batch.MaxProviderPoll)
	}
	if th := o.WorkerHealth.WithDefaults(); th.Down <= th.Stale {
		return bad("WorkerHealth", "down after %v must be later than stale after %v", th.Down, th.Stale)
	}
	if o.Worker != nil {
		o.NoListen = true
	}
	if o.NATSListen == "" {
		o.NATSListen = DefaultNATSListen
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return nil
}

// errState is returned by Start when the App cannot start (again).
var errState = errors.New("app: Start: already started, failed or shut down; build a new App")
