package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/app"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/http/server"
	"github.com/svc-dev/svc/spec"
)

type serveCmd struct {
	runtimeFlags
	webhookFlags
	host    string
	port    int
	auth    authFlags
	apiKeys string
	origins []string
	// The connection flags (issue 25).
	allowedHosts []string
	idleTimeout  time.Duration
	readTimeout  time.Duration
	maxConns     int
	grace        time.Duration
	maxBody      int64
	storeSpec    string
	nodeLease    time.Duration
	pbatchPoll   time.Duration
	nodeID       string
	dataDir      string
	metrics      bool
	dashboard    bool
	dashboardDir string
	mcp          bool
	// serveAgents and serveGroups are --agents and --groups.
	serveAgents []string
	serveGroups []string

	sseHeartbeat time.Duration
	sseQueue     int

	eventsSpec    string
	eventsMaxRows int
	eventsMaxAge  time.Duration

	reload        bool
	reloadDirs    []string
	reloadInclude []string
	reloadExclude []string

	brokerFlags
	natsListen string
	fleetFlags
}

// fleetFlags are serve's flags about the fleet's events and health.
type fleetFlags struct {
	publishEvents bool
	staleAfter    time.Duration
	downAfter     time.Duration
}

func (f *fleetFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&f.publishEvents, "publish-events", false, "with --broker: have the workers relay every event of this server's tasks, so the log, /events/stream, the event store, its rollups and the metrics show the whole fleet's per-agent and per-tool events (about twice the broker messages) (default false)")
	fs.DurationVar(&f.staleAfter, "worker-stale-after", svc.WorkerHealthyWithin, "with --broker: GET /runtime/stats calls a worker stale when it has not been heard from for this long")
	fs.DurationVar(&f.downAfter, "worker-down-after", svc.WorkerStaleWithin, "with --broker: ... and down after this long (at once when it stopped cleanly)")
}

// apply checks the flags and sets them on o.
func (f *fleetFlags) apply(fs *pflag.FlagSet, o *app.Options) error {
	if o.Broker == "" {
		for _, name := range []string{"publish-events", "worker-stale-after", "worker-down-after"} {
			if fs.Changed(name) {
				return fmt.Errorf("--%s needs --broker", name)
			}
		}
	}
	if f.staleAfter <= 0 || f.downAfter <= f.staleAfter {
		return fmt.Errorf("--worker-stale-after %v and --worker-down-after %v: want 0 < stale < down", f.staleAfter, f.downAfter)
	}
	o.PublishEvents = f.publishEvents
	o.WorkerHealth = svc.WorkerThresholds{Stale: f.staleAfter, Down: f.downAfter}
	return nil
}

// brokerFlags are the broker flags serve and worker share.
type brokerFlags struct {
	broker     string
	ackWait    time.Duration
	maxDeliver int
	keysFile   string
}

func (b *brokerFlags) register(fs *pflag.FlagSet, usage string) {
	fs.StringVar(&b.broker, "broker", envOr("SVC_BROKER", ""), usage)
	fs.DurationVar(&b.ackWait, "ack-wait", svc.DefaultAckWait, "how long a task may go unacknowledged before the broker gives it to another worker (workers extend it while a task runs, so only a dead or stuck worker loses its tasks)")
	fs.IntVar(&b.maxDeliver, "max-deliver", svc.DefaultMaxDeliver, "deliveries of a task before it goes to the dead letter and its run fails")
	fs.StringVar(&b.keysFile, "broker-keys", "", "sign every task, result and cancel with HMAC-SHA256 and refuse what is not signed: a file of KEYID:SECRET lines, the first signing and all accepted (docs/distributed.md, \"Signing and key rotation\"); every process of the fleet needs the same keys (default $SVC_BROKER_KEYS as KEYID:SECRET[,KEYID:SECRET...], else unsigned)")
}

// keyring is the fleet's signing keys: --broker-keys, else
// $SVC_BROKER_KEYS, else nil (unsigned).
func (b *brokerFlags) keyring() (*fleetwire.Keyring, error) {
	if b.keysFile != "" {
		return fleetwire.LoadKeyring(b.keysFile)
	}
	k, err := fleetwire.ParseKeyring(os.Getenv("SVC_BROKER_KEYS"))
	if err != nil {
		return nil, fmt.Errorf("SVC_BROKER_KEYS: %w", err)
	}
	return k, nil
}

func (b *brokerFlags) check(fs *pflag.FlagSet) error {
	if b.ackWait <= 0 || b.maxDeliver <= 0 {
		return errors.New("--ack-wait and --max-deliver must be positive")
	}
	if b.broker == "" {
		for _, name := range []string{"ack-wait", "max-deliver", "nats-listen", "broker-keys"} {
			if fs.Lookup(name) != nil && fs.Changed(name) {
				return fmt.Errorf("--%s needs --broker", name)
			}
		}
	}
	return nil
}

func newServe() *cobra.Command {
	s := &serveCmd{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Start the HTTP server on a directory of specs",
		Long: `Start the standalone HTTP server.

The server loads DIR/agents/*.yaml (with their DIR/templates/*.yaml),
DIR/groups/*.yaml and DIR/runtime.yaml (--specs), serves the routes of docs/api.md, and stops gracefully on SIGINT or
SIGTERM: it stops accepting connections, lets requests in flight finish within
--shutdown-grace, then cancels what is left and shuts the runtime down. While
it waits it logs every second how many requests and runs are in flight and how
long is left; a second SIGINT or SIGTERM stops it at once (exit 128+signal).
A tool or model call that ignores cancellation does not hold the shutdown up:
it is abandoned, and serve exits 1 naming it.

With --reload it watches the specs directory (and each --reload-dir) for
changes to the files --reload-include matches and --reload-exclude does not,
and swaps in the new agents and groups at once, without a restart: runs in
flight finish on the definitions they started with. A change that does not
validate is logged with its file and line, and the previous definitions stay.
Runtime options (runtime.yaml) apply at the next start.

With --auth-token (or SVC_AUTH_TOKEN, or --auth-token-file, which keeps the
token out of ps) every route but /healthz, /health and /readyz needs
"Authorization: Bearer <token>". A token that is only whitespace, or an
empty or missing token file, is refused at start (exit 2).
With --api-keys FILE each team has its own keys: a key belongs to a tenant
and has scopes (run, submit, read, admin); a key without the scope of a
route gets 403. The file holds each key's SHA-256 ("svc keys new" makes a
key and its hash) and is read again each second: a changed file replaces
the keys, one that does not load is logged and the old keys stay.
Request bodies must be application/json, and a browser request from another
origin than the server's own is refused unless --allowed-origins lists it.

The web dashboard is at http://HOST:PORT/dashboard/ (--dashboard=false turns
it off): live runs, run trees, history, usage, tool latency, health, groups.
--dashboard-dir DIR serves a customised copy of its files from DIR instead.

--agents a,b serves only those agents of --specs, and --groups g only those
groups: a served group that needs an agent --agents leaves out is refused
at start (and on reload), naming both.
With --mcp, http://HOST:PORT/mcp serves the agents and groups as MCP tools
(streamable HTTP), for MCP clients.

Every runtime event goes to the log, to GET /events/stream (svc status), and
to the event store (--events) that the rollup routes read: GET /events,
/usage, /tools, /runtime/stats and /runs/{trace_id}/tree. With --metrics,
GET /metrics serves the runtime, HTTP and Go metrics in the Prometheus
format; when OTEL_EXPORTER_OTLP_ENDPOINT (or ..._METRICS_ENDPOINT) is set,
metrics are also pushed over OTLP (OTEL_EXPORTER_OTLP_PROTOCOL grpc or
http/protobuf).

With --broker the server is the publisher of a fleet (docs/distributed.md):
every agent invocation of a run, gather, group or submitted run is sent as a
task through the broker to the "svc worker start" processes serving that
agent, and its result awaited; timeouts, the token budget, batch and group
events stay here. --broker embedded starts a nats-server inside this
process (JetStream files under --data-dir/nats) listening on --nats-listen,
for workers such as the one of the last example.`,
		// Every line of every Example is run by TestHelpExamples.
		Example: `  svc serve --specs examples/specs              # on http://127.0.0.1:8420
  svc serve --specs examples/specs --broker embedded
  svc worker start --broker nats://127.0.0.1:4222 --all-from examples/specs     # a worker of that fleet`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return s.run(cmd) },
	}
	fs := cmd.Flags()
	s.runtimeFlags.register(fs, "examples/specs")
	fs.StringVar(&s.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&s.port, "port", 8420, "port to listen on (0: any free port)")
	s.auth.register(fs, "bearer token required on every route but the health checks")
	fs.StringVar(&s.apiKeys, "api-keys", "", "YAML file of API keys, each with its tenant and scopes (docs/tenants.md; svc keys new makes one); every route but the health checks needs one of them, or --auth-token, which is then one admin key; the file is read again each second and a changed one replaces the keys (default: none)")
	fs.StringSliceVar(&s.origins, "allowed-origins", nil, "browser origins (scheme://host[:port], comma-separated or repeated) besides the server's own that may call the API, with CORS; other origins get 403 (default none)")
	fs.StringSliceVar(&s.allowedHosts, "allowed-hosts", nil, "host names (comma-separated or repeated) besides localhost, the loopback addresses and --host that requests may name in their Host header; the Host header is checked when the server listens on loopback without --auth-token (DNS rebinding), and always once this is given; other hosts get 421 (default none)")
	fs.DurationVar(&s.idleTimeout, "idle-timeout", app.DefaultIdleTimeout, "close a keep-alive connection idle this long (longer than a load balancer's idle timeout, so that it closes first)")
	fs.DurationVar(&s.readTimeout, "read-timeout", server.DefaultReadTimeout, "how long a request's body may take to arrive (408 after it); of a streamed gather, the wait for each next task; a request without a body (the event streams) has no read timeout")
	fs.IntVar(&s.maxConns, "max-connections", app.DefaultMaxConnections, "connections open at once; past it the oldest idle keep-alive connection is closed to make room, a few more are accepted for health checks only, and the rest wait; lowered at start to leave 1024 file descriptors to the stores when the descriptor limit is low")
	fs.DurationVar(&s.grace, "shutdown-grace", 30*time.Second, "how long requests and runs in flight may take to finish on shutdown before they are cancelled (a second SIGINT or SIGTERM stops at once)")
	fs.Int64Var(&s.maxBody, "max-body-bytes", 1<<20, "largest request body accepted; of a streamed gather (application/x-ndjson), the longest line")
	fs.StringVar(&s.storeSpec, "store", "", "where submitted runs are kept: memory, sqlite:PATH, pebble:PATH or redis://HOST:PORT (default: a SQLite file under --data-dir)")
	fs.DurationVar(&s.pbatchPoll, "provider-batch-poll", 0, "how often a batch of mode provider asks the provider's batch API whether its provider batches have ended, 100ms to 10m (default 30s)")
	fs.DurationVar(&s.nodeLease, "node-lease", 0, "with a redis:// --store shared by several serve nodes: how long this node's ownership of its runs outlives its last renewal; once it lapses (the node was killed), the other nodes mark the runs it left unfinished failed (reason interrupted) (default 15s)")
	fs.StringVar(&s.nodeID, "node-id", "", "with a redis:// --store shared by several serve nodes: this node's name as the owner of its runs, stable across restarts so a restarted node marks its previous life's unfinished runs failed at once; a node whose id's lease another live node holds refuses to start (after a kill, until the old lease expires) (default: host-pid-random, new each start)")
	fs.StringVar(&s.dataDir, "data-dir", "./.svc", "directory of the default run and event stores and of the embedded broker; locked (svc.lock) while this server runs, so a second server on it exits at once")
	fs.StringVar(&s.eventsSpec, "events", "", "where runtime events are kept for the rollup routes: memory, sqlite:PATH or none (default: a SQLite file under --data-dir)")
	fs.IntVar(&s.eventsMaxRows, "events-max-rows", 1_000_000, "keep at most this many events, the newest (0: no limit)")
	fs.DurationVar(&s.eventsMaxAge, "events-max-age", 7*24*time.Hour, "drop events older than this (0: no limit)")
	fs.DurationVar(&s.sseHeartbeat, "sse-heartbeat", sse.DefaultHeartbeatInterval, "how long GET /events/stream may stay idle before a heartbeat comment")
	fs.IntVar(&s.sseQueue, "sse-queue-size", sse.DefaultQueueSize, "events waiting per /events/stream subscriber before new ones are dropped (and counted)")
	fs.BoolVar(&s.dashboard, "dashboard", true, "serve the web dashboard at /dashboard/ (its files need no token; the page asks for --auth-token); --dashboard=false turns it off")
	fs.StringVar(&s.dashboardDir, "dashboard-dir", "", "serve the dashboard from this directory, a customised copy of the svc sources' dashboard/static, instead of the built-in page; it must hold index.html, and files are read at each request (default: the built-in page)")
	fs.StringSliceVar(&s.serveAgents, "agents", nil, "serve only these agents of --specs, comma-separated or repeated; a group that needs an agent left out is refused at start unless --groups leaves it out too (default: all)")
	fs.StringSliceVar(&s.serveGroups, "groups", nil, "serve only these groups of --specs, comma-separated or repeated; --groups '' serves none (default: all)")
	fs.BoolVar(&s.mcp, "mcp", false, "serve the agents and groups as MCP tools over streamable HTTP at /mcp (behind --auth-token like other routes); svc mcp serves them over stdio (default false)")
	fs.BoolVar(&s.metrics, "metrics", false, "serve GET /metrics in the Prometheus format (behind --auth-token like other routes) (default false)")
	fs.BoolVar(&s.reload, "reload", false, "watch the spec files and swap in changed agents and groups without a restart (default false)")
	fs.StringSliceVar(&s.reloadDirs, "reload-dir", nil, "another directory to watch with --reload; repeatable (default: none, the --specs directory is always watched)")
	fs.StringSliceVar(&s.reloadInclude, "reload-include", spec.DefaultWatchInclude, "glob of the files --reload watches, matched against the base name and the path relative to the watched directory; repeatable")
	fs.StringSliceVar(&s.reloadExclude, "reload-exclude", nil, "glob of files --reload ignores even though --reload-include matches them; repeatable (default: none)")
	s.brokerFlags.register(fs, "dispatch every invocation to workers through this broker: embedded (a nats-server in this process), nats://HOST:PORT, redis://HOST:PORT[/DB], kafka://HOST:PORT[,HOST:PORT], amqp://USER:PASS@HOST:PORT/VHOST or memory:// (default $SVC_BROKER, else none: runs happen here)")
	fs.StringVar(&s.natsListen, "nats-listen", app.DefaultNATSListen, "client address of the embedded broker (--broker embedded), where workers connect")
	s.fleetFlags.register(fs)
	s.webhookFlags.register(fs)
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

func (s *serveCmd) run(cmd *cobra.Command) error {
	fs := cmd.Flags()
	log, stopLog, err := s.bufferedLogger(os.Stderr)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer stopLog()
	authToken, err := s.auth.resolve()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if err := s.checkReloadFlags(fs); err != nil {
		return &exitError{code: 2, err: err}
	}
	if s.sseHeartbeat <= 0 || s.sseQueue <= 0 {
		return &exitError{code: 2, err: errors.New("--sse-heartbeat and --sse-queue-size must be positive")}
	}
	if s.idleTimeout <= 0 || s.readTimeout <= 0 || s.maxConns <= 0 {
		return &exitError{code: 2, err: errors.New("--idle-timeout, --read-timeout and --max-connections must be positive")}
	}
	if _, err := server.CheckHost("", s.allowedHosts); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--allowed-hosts: %w", err)}
	}
	if s.maxBody <= 0 {
		return &exitError{code: 2, err: errors.New("--max-body-bytes must be positive")}
	}
	if _, err := server.CheckOrigin(s.origins); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--allowed-origins: %w", err)}
	}
	if s.eventsMaxRows < 0 || s.eventsMaxAge < 0 {
		return &exitError{code: 2, err: errors.New("--events-max-rows and --events-max-age must not be negative")}
	}
	if err := s.brokerFlags.check(fs); err != nil {
		return &exitError{code: 2, err: err}
	}
	if fs.Changed("nats-listen") && s.broker != "embedded" {
		return &exitError{code: 2, err: errors.New("--nats-listen needs --broker embedded")}
	}
	defer func() { _ = log.Sync() }()
	defer tuneGC(log)()

	o := s.appOptions(fs, log)
	o.Host, o.Port, o.AuthToken, o.MaxBodyBytes = s.host, s.port, authToken, s.maxBody
	o.APIKeysFile = s.apiKeys
	o.AllowedOrigins, o.AllowedHosts = s.origins, s.allowedHosts
	o.IdleTimeout, o.ReadTimeout, o.MaxConnections = s.idleTimeout, s.readTimeout, s.maxConns
	o.Dashboard = s.dashboard
	if s.dashboardDir != "" {
		if !s.dashboard {
			return &exitError{code: 2, err: errors.New("--dashboard-dir needs the dashboard: drop --dashboard=false")}
		}
		o.DashboardDir = s.dashboardDir
	}
	if fs.Changed("agents") {
		o.ServeAgents = append([]string{}, s.serveAgents...)
	}
	if fs.Changed("groups") {
		o.ServeGroups = append([]string{}, s.serveGroups...)
	}
	o.MCP = s.mcp
	if err := s.webhookFlags.apply(&o); err != nil {
		return &exitError{code: 2, err: err}
	}
	o.DataDir, o.Store, o.Events = s.dataDir, s.storeSpec, s.eventsSpec
	if (fs.Changed("node-lease") || fs.Changed("node-id")) && !strings.HasPrefix(s.storeSpec, "redis") {
		return &exitError{code: 2, err: errors.New("--node-lease and --node-id need a shared store (--store redis://…)")}
	}
	o.NodeLease, o.NodeID = s.nodeLease, s.nodeID
	o.ProviderBatchPoll = s.pbatchPoll
	// The flags' 0 is "no limit", the app's is "the default".
	o.EventsMaxRows, o.EventsMaxAge = noLimit(s.eventsMaxRows), time.Duration(noLimit(int(s.eventsMaxAge)))
	o.SSEHeartbeat, o.SSEQueueSize = s.sseHeartbeat, s.sseQueue
	o.Metrics, o.OTLPFromEnv = s.metrics, true
	if s.reload {
		o.Reload, o.ReloadDirs, o.ReloadInclude, o.ReloadExclude = true, s.reloadDirs, s.reloadInclude, s.reloadExclude
	}
	if o.Broker = s.broker; s.broker != "" {
		o.AckWait, o.MaxDeliver = s.ackWait, s.maxDeliver
		keys, err := s.keyring()
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		o.BrokerKeys = keys
		if s.broker == "embedded" {
			o.NATSListen = s.natsListen
		}
	}
	if err := s.defaultSpecsHint(fs); err != nil {
		return err
	}
	if err := s.fleetFlags.apply(fs, &o); err != nil {
		return &exitError{code: 2, err: err}
	}
	a, err := app.New(o)
	if err != nil {
		return appError(s.specs, err)
	}
	// The signals are ours from before Start until the process exits: the
	// first starts the shutdown, a second one during it stops at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := a.Start(); err != nil {
		return appError(s.specs, err)
	}
	var serveErr error
	select {
	case serveErr = <-a.Err():
	case sig := <-sigs:
		log.Info("received "+sig.String()+"; shutting down (a second signal stops at once)", zap.Duration("shutdown_grace", s.grace))
	case <-cmd.Context().Done():
	}
	err = s.shutdown(a, log, sigs)
	if serveErr != nil {
		return errors.Join(serveErr, err)
	}
	return err
}

// shutdownSlack is how long past --shutdown-grace serve waits for the
// shutdown to finish (the steps after the grace: closing the stores and
// the broker, the last metrics flush) before it exits regardless.
const shutdownSlack = 10 * time.Second

// shutdown runs the app's Shutdown within the grace, logging every second
// what is still in flight and how long is left. A second SIGINT or
// SIGTERM stops at once, and so does a shutdown still not done past the
// grace and its slack: both exit non-zero, saying what they abandoned.
func (s *serveCmd) shutdown(a *app.App, log *zap.Logger, sigs <-chan os.Signal) error {
	deadline := time.Now().Add(s.grace)
	graceCtx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Shutdown(graceCtx) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	backstop := time.NewTimer(s.grace + shutdownSlack)
	defer backstop.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("shutdown within --shutdown-grace %s: %w", s.grace, err)}
			}
			return nil
		case <-tick.C:
			n := a.InFlight()
			left := max(time.Until(deadline), 0).Round(time.Second)
			msg := fmt.Sprintf("shutting down: %d requests, %d runs in flight, %s left", n.Requests, n.Runs, left)
			if left == 0 {
				msg = fmt.Sprintf("shutting down: %d requests, %d runs in flight, grace over: cancelling", n.Requests, n.Runs)
			}
			log.Info(msg, zap.Int("requests", n.Requests), zap.Int("runs", n.Runs), zap.Duration("left", left))
		case sig := <-sigs:
			n := a.InFlight()
			code := 1
			if ss, ok := sig.(syscall.Signal); ok {
				code = 128 + int(ss) // as if the signal had killed us
			}
			return &exitError{code: code, err: fmt.Errorf("second %s during the shutdown: stopped at once, abandoning %d requests and %d runs in flight", sig, n.Requests, n.Runs)}
		case <-backstop.C:
			n := a.InFlight()
			return &exitError{code: 1, err: fmt.Errorf("shutdown still not finished %s after --shutdown-grace %s: exiting, abandoning %d requests and %d runs in flight", shutdownSlack, s.grace, n.Requests, n.Runs)}
		}
	}
}

// noLimit maps a flag's 0 ("no limit") to the app's -1.
func noLimit(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
