// Package supervisor is the runtime: it builds the actor system and the
// supervision tree (run shards → run actors → invocation actors), applies the
// policies (budget, depth, retry, timeout, cancellation) and offers Run and
// Gather as a svc.Backend, with Shutdown to stop it all.
//
// What the runtime uses but is not supervision lives in packages of its
// own, each given what it needs of the runtime as a few funcs:
// supervisor/registry (the definitions known by name), submitted (the
// writer of submitted runs), hostapi (the message API's actor), spawn (the
// spawn_agents and delegate tools), remote (dispatching invocations to a
// fleet) and mcpservers (which MCP servers an agent gets).
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/internal/lean"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/ratelimit"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/supervisor/followers"
	"github.com/svc-dev/svc/supervisor/hostapi"
	"github.com/svc-dev/svc/supervisor/mcpservers"
	"github.com/svc-dev/svc/supervisor/registry"
	"github.com/svc-dev/svc/supervisor/remote"
	"github.com/svc-dev/svc/supervisor/spawn"
	"github.com/svc-dev/svc/supervisor/submitted"
	"github.com/svc-dev/svc/tools/mcp"
)

// Config configures a Runtime. The zero value is usable: default options,
// the default model registry (the test provider), no events, no logs.
type Config struct {
	// Options are the runtime options; zero fields are not defaulted, so
	// start from svc.DefaultOptions(). A zero Options means all defaults.
	Options svc.Options
	// Models resolves provider:name identifiers; model.Default() when nil.
	Models *model.Registry
	// Prices cost the model calls whose provider reports no cost
	// (model.LoadPrices reads a price file); the built-in model.Prices
	// when nil.
	Prices *model.PriceTable
	// Emitter receives every runtime event, beside the log (see
	// NoEventLog); nil: no other emitter.
	Emitter svc.Emitter
	// Logger receives the runtime's and the actor system's logs and, unless
	// NoEventLog is set, one line per runtime event (the spec's
	// LogEventEmitter, emitters.NewLog, fed through a queue so that a slow
	// log never holds up a run). nil: nothing is logged.
	Logger *zap.Logger
	// NoEventLog turns the LogEventEmitter off: set it when Emitter
	// already logs the events (app.App's chain does) or when the host
	// wants no event lines in its log.
	NoEventLog bool
	// MeterProvider is ignored: it used to turn on protoactor's actor
	// metrics, which leaked every spawned actor (see NewActorSystem).
	//
	// Deprecated: the runtime records no metrics of its own; give the
	// provider to the emitters (emitters.NewOTel) instead.
	MeterProvider metric.MeterProvider
	// Shards is the number of run-supervising actors; 4×GOMAXPROCS when 0.
	Shards int
	// Store keeps submitted runs. When nil the runtime uses an in-memory
	// store of its own, closed by Shutdown; a store given here is the
	// caller's to close. At start, runs a previous process left pending or
	// running are marked failed ("interrupted").
	Store svc.RunStore
	// IdempotencyTTL is how long an Idempotency-Key holds the run it made;
	// svc.DefaultIdempotencyTTL (24h) when 0. The keys live in Store when
	// it is a svc.IdempotentStore (every store in stores/ is), else in
	// this process's memory.
	IdempotencyTTL time.Duration
	// Callbacks, when set, takes the callback_url of submitted runs
	// (package webhook); without it a submit with one is refused.
	Callbacks svc.Callbacks
	// Execute, when set, runs each attempt of an invocation instead of the
	// local agent loop, and Backend names where (the "backend" of events
	// and result metadata; svc.BackendLocal when empty). They are the seam
	// of the distributed mode, see actors.Env.Execute.
	Execute func(ctx context.Context, inv *agent.Invocation) (agent.Outcome, error)
	Backend string
	// Dispatcher, when set, makes this runtime a publisher of the
	// distributed mode: every invocation runs on the fleet behind it (see
	// package supervisor/remote). It excludes Execute and Backend.
	Dispatcher remote.Dispatcher
	// NestedDispatcher, when set, sends only the runs nested in this
	// runtime's runs to the fleet behind it: spawn_agents' children and a
	// team's delegates, whose agents are registered here (a worker's
	// runtime with `svc worker start --dispatch-nested`). The runs the
	// runtime is asked for run here, under Execute and Backend. It
	// excludes Dispatcher.
	NestedDispatcher remote.Dispatcher
	// System is the actor system to run in, for a process that runs other
	// actors beside the runtime's (NewActorSystem builds one configured
	// like the runtime's own). It is the caller's to shut down, after the
	// runtime's Shutdown; Logger then does not apply to it. When nil the
	// runtime builds its own and Shutdown stops it.
	//
	// A host built on protoactor gives its own system here: svc's actors
	// (run shards, runs, invocations, tool servers, the message API's
	// actor, event subscribers) are spawned in it under Prefix, none of
	// them is a child of a host actor, and Shutdown stops them only,
	// leaving the host's actors running. See Runtime.PID and package
	// actors/msg for the messages a host actor sends.
	System *actor.ActorSystem
	// Prefix starts the names of the runtime's top-level actors
	// ("PREFIX/runs-0", "PREFIX/api", ...); "svc" when empty. Two
	// runtimes in one actor system need two prefixes.
	Prefix string
	// Events is where the message API's subscriptions to runtime events
	// (msg.Subscribe without a RunID) come from: the SSE emitter of the
	// Emitter chain (app.App gives its own). When nil and System is given,
	// the runtime adds an SSE emitter of its own to the chain, in System;
	// when nil without System, such a subscription is refused.
	Events svc.EventSubscriber
	// SharedLimits, with a Store, make the named rate limits
	// (Options.RateLimits) draw on a store the fleet shares (a broker's:
	// ratelimit/redislimit, ratelimit/natslimit), so that the fleet
	// together stays within each; without one each limit is this
	// process's.
	SharedLimits ratelimit.SharedOptions
}

// Runtime runs agents. It implements svc.Backend. Create it with New and stop
// it with Shutdown.
type Runtime struct {
	// resumes is set when the store keeps submitted runs' tasks and steps
	// for a later process to resume (resume.go); claimed are the runs
	// New claimed for ResumeRuns to start.
	resumes bool
	claimed []svc.RunRecord
	// deadlines are the approval deadlines of waiting runs (wait.go).
	deadlines deadlines

	// callbacks takes the callback_url of submitted runs (Config).
	callbacks svc.Callbacks

	opts    svc.Options
	limits  *ratelimit.Set // the limits of the model calls (opts.RateLimits and the learned ones)
	models  *model.Registry
	prices  *model.PriceTable // nil: the built-in prices
	emitter svc.Emitter
	// eventLog is the LogEventEmitter's queue (nil when off), written out
	// by Shutdown.
	eventLog *emitters.Async
	log      *zap.Logger
	// dispatcher runs invocations on the fleet (nil: all run here); a
	// cancelled run is broadcast through it.
	dispatcher remote.Dispatcher

	system    *actor.ActorSystem
	ownSystem bool // built by New, so stopped by Shutdown
	shards    []*actor.PID
	next      atomic.Uint64
	env       *actors.Env
	work      sync.WaitGroup
	pool      *lean.Pool
	// mailboxes runs the actors' mailboxes, apart from pool, which runs
	// only agent loops: a goroutine keeps the stack it grew, and a
	// mailbox's frames (protoactor's, a spawn's) are deeper than a parked
	// model call's, so on goroutines of their own they do not make every
	// parked run hold an 8 KiB stack instead of a 4 KiB one.
	mailboxes *lean.Pool

	reg *registry.Registry  // the agents and groups known by name
	mcp *mcpservers.Servers // the MCP tool servers of the agents
	// spawns is what the spawn_agents and delegate tools start nested
	// runs with (nested.go).
	spawns *spawn.Runs

	store     svc.RunStore
	ownStore  bool
	records   *submitted.Recorder // writes the submitted runs to store
	submitted sync.Map            // run id → context.CancelCauseFunc
	follow    followers.Hub       // the live deltas of the submitted runs executing here

	// inflight counts calls between admission and reply, so Shutdown can
	// wait for them to drain before it stops the actors.
	inflight sync.WaitGroup
	active   atomic.Int64 // the same count, readable (InFlight)
	// runs counts the runs the actors execute now (RunsInFlight): each
	// run, gather, group run and nested run once, from its start message
	// to its reply.
	runs atomic.Int64
	// stuck counts the attempts runs stopped waiting for (see
	// actors.Stuck).
	stuck    *actors.Stuck
	mu       sync.RWMutex // guards closed against admissions racing Shutdown
	closed   bool
	stopOnce sync.Once

	// The message API (api.go): its actor's name starts with prefix,
	// its event subscriptions come from apiEvents (nil: refused), and
	// ownEvents is the SSE emitter the runtime added for them, if any.
	api       *hostapi.API
	prefix    string
	apiEvents svc.EventSubscriber
	ownEvents *sse.Emitter
}

// New starts a runtime.
func New(cfg Config) (rt *Runtime, err error) {
	opts := cfg.Options
	if opts.IsZero() {
		opts = svc.DefaultOptions()
	}
	if cfg.Dispatcher != nil && (cfg.Execute != nil || cfg.Backend != "") {
		return nil, svc.Errorf(svc.KindSpecValidation, "supervisor: Dispatcher excludes Execute and Backend")
	}
	if cfg.NestedDispatcher != nil && (cfg.Dispatcher != nil || cfg.Execute != nil) {
		return nil, svc.Errorf(svc.KindSpecValidation, "supervisor: NestedDispatcher excludes Dispatcher and Execute")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if cfg.Models == nil {
		cfg.Models = model.Default()
	}
	// The LogEventEmitter is on by default, in an embedded runtime as in
	// svc serve; without a Logger it would write nowhere, so it is left
	// out and a runtime with no emitter at all keeps its silent fast path.
	var eventLog *emitters.Async
	if cfg.Logger != nil && !cfg.NoEventLog {
		eventLog = emitters.NewAsync(emitters.NewLog(cfg.Logger), 0)
		defer func() {
			if rt == nil { // New failed: nothing will close it
				eventLog.Close()
			}
		}()
		if cfg.Emitter == nil {
			cfg.Emitter = eventLog
		} else {
			cfg.Emitter = emitters.Multi(eventLog, cfg.Emitter)
		}
	}
	if cfg.Emitter == nil {
		cfg.Emitter = svc.NopEmitter{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Shards <= 0 {
		cfg.Shards = 4 * runtime.GOMAXPROCS(0)
	}
	if cfg.IdempotencyTTL < 0 {
		return nil, svc.Errorf(svc.KindSpecValidation, "supervisor: negative IdempotencyTTL %v", cfg.IdempotencyTTL)
	}
	rt = &Runtime{opts: opts, limits: ratelimit.NewSet(opts.RateLimits, ratelimit.Options{Shared: cfg.SharedLimits}), models: cfg.Models, prices: cfg.Prices, emitter: cfg.Emitter, eventLog: eventLog, log: cfg.Logger, store: cfg.Store}
	if rt.store == nil {
		rt.store, rt.ownStore = memstore.New(), true
	} else if err := rt.recoverRuns(cfg.Logger); err != nil {
		return nil, err
	}
	rt.records = submitted.New(rt.store, cfg.IdempotencyTTL, cfg.Logger)
	rt.callbacks = cfg.Callbacks
	rt.deadlines.fire = rt.timeOut
	rt.reg = registry.New(registry.Config{Compile: rt.compileAgent,
		OnReplace: func(old, next *registry.Snapshot) { rt.mcp.Retire(old, next) },
		Delegate:  func(g svc.Group) svc.Tool { return spawn.NewDelegateTool(rt.spawns, g) }})
	if rt.system = cfg.System; rt.system == nil {
		rt.system, rt.ownSystem = NewActorSystem(cfg.Logger), true
	}
	if err := rt.initAPI(&cfg); err != nil {
		return nil, err
	}
	rt.mcp = mcpservers.New(rt.system, mcp.Config{Logger: cfg.Logger.Named("mcp"), Eager: opts.MCPEagerStart, Prefix: rt.prefix})
	rt.pool = lean.NewPool(5 * time.Second)
	rt.mailboxes = lean.NewDispatcherPool(5*time.Second, 0)
	rt.stuck = rt.newStuck()
	_, silent := rt.emitter.(svc.NopEmitter)
	rt.env = &actors.Env{Emitter: rt.emitter, Silent: silent, Options: opts, Work: &rt.work, Pool: rt.pool, Stuck: rt.stuck,
		Dispatcher: lean.NewDispatcher(rt.mailboxes, 300), Execute: cfg.Execute, Backend: cfg.Backend,
		Budget: actors.NewBudget(opts.TokenBudget, actors.ScopeRuntime, rt.emitter), Root: rt.system.Root}
	if cfg.Dispatcher != nil {
		ex := rt.newRemote(cfg.Dispatcher, false)
		rt.env.Execute, rt.env.Backend, rt.env.Remote = ex.Execute, cfg.Dispatcher.Backend(), true
	}
	if cfg.NestedDispatcher != nil {
		ex := rt.newRemote(cfg.NestedDispatcher, true)
		rt.env.Execute, rt.env.RemoteIf = ex.Execute, ex.Dispatches
	}
	rt.spawns = rt.nestedRuns()
	props := actor.PropsFromProducer(actors.NewShard(rt.env), actor.WithDispatcher(rt.env.Dispatcher))
	for i := 0; i < cfg.Shards; i++ {
		pid, err := rt.system.Root.SpawnNamed(props, fmt.Sprintf("%s/runs-%d", rt.prefix, i))
		if err != nil {
			rt.closeEvents()
			for _, s := range rt.shards {
				_ = rt.system.Root.StopFuture(s).Wait()
			}
			if rt.ownSystem {
				rt.system.Shutdown()
			}
			rt.pool.Close()
			rt.mailboxes.Close()
			return nil, fmt.Errorf("supervisor: spawn run shard: %w", err)
		}
		rt.shards = append(rt.shards, pid)
	}
	if err := rt.startAPI(); err != nil {
		for _, s := range rt.shards {
			_ = rt.system.Root.StopFuture(s).Wait()
		}
		rt.closeEvents()
		rt.limits.Close()
		if rt.ownSystem {
			rt.system.Shutdown()
		}
		rt.pool.Close()
		return nil, err
	}
	return rt, nil
}

// newRemote returns the Env.Execute of a runtime that sends invocations
// (all, or only the nested ones) to the fleet behind d.
func (rt *Runtime) newRemote(d remote.Dispatcher, nestedOnly bool) *remote.Executor {
	rt.dispatcher = d
	return remote.New(remote.Config{Dispatcher: d, NestedOnly: nestedOnly, Timeout: rt.opts.Timeout(),
		Registered: func(c *agent.Compiled) bool {
			r, ok := rt.reg.Load().Agent(c.Def.Name)
			return ok && r == c
		},
		Nested: func(ctx context.Context) bool { return runOf(ctx).nested },
		RunID:  func(ctx context.Context) string { return runOf(ctx).runID },
	})
}

// Options returns the runtime's options.
func (rt *Runtime) Options() svc.Options { return rt.opts }

// RateLimits are the figures of the limits the runtime's model calls wait
// under: the declared ones (rate_limits), the per-model caps
// (max_concurrent_requests) and the learned ones of each provider key.
func (rt *Runtime) RateLimits() []ratelimit.Stats { return rt.limits.Stats() }

// Agent returns a copy of a registered agent's definition.
func (rt *Runtime) Agent(name string) (svc.Agent, bool) {
	c, ok := rt.reg.Load().Agent(name)
	if !ok {
		return svc.Agent{}, false
	}
	return c.Def.Clone(), true
}

func (rt *Runtime) lookup(name string) (*agent.Compiled, error) {
	return rt.reg.Load().LookupAgent(name)
}

// Agents lists the registered agent names, sorted.
func (rt *Runtime) Agents(context.Context) ([]string, error) {
	return slices.Clone(rt.reg.Load().AgentNames()), nil
}

// Register compiles and adds agents. The runtime keeps its own copy of
// each definition; registering a name that exists is an error (use Replace).
func (rt *Runtime) Register(agents ...svc.Agent) error { return rt.reg.Register(agents...) }

// RegisterGroups checks and adds groups over the registered agents.
func (rt *Runtime) RegisterGroups(groups ...svc.Group) error { return rt.reg.RegisterGroups(groups...) }

// Replace swaps the whole set of agents and groups atomically: runs in
// flight finish on the definitions they started with. On error nothing
// changes.
func (rt *Runtime) Replace(agents []svc.Agent, groups []svc.Group) error {
	return rt.reg.Replace(agents, groups)
}

// compileAgent compiles a with what the runtime provides: its models, its
// prices and its builtin tools. Every agent the runtime registers is
// compiled here (spawned children by compileAgentFor).
func (rt *Runtime) compileAgent(a svc.Agent) (*agent.Compiled, error) {
	// The runtime's approval deadline is the default of its agents'.
	if a.ApprovalTimeoutSeconds == 0 {
		a.ApprovalTimeoutSeconds = rt.opts.ApprovalTimeoutSeconds
	}
	if a.ApprovalTimeoutAction == "" {
		a.ApprovalTimeoutAction = rt.opts.ApprovalTimeoutAction
	}
	return rt.compileAgentFor(a, a.Name)
}

// Groups lists the registered group names, sorted.
func (rt *Runtime) Groups(context.Context) ([]string, error) {
	return slices.Clone(rt.reg.Load().GroupNames()), nil
}

// Group returns a copy of a registered group's definition.
func (rt *Runtime) Group(name string) (svc.Group, bool) {
	g, ok := rt.reg.Load().Group(name)
	if !ok {
		return svc.Group{}, false
	}
	return g.Def.Clone(), true
}

// GroupTopology describes a registered group.
func (rt *Runtime) GroupTopology(_ context.Context, name string) (svc.Topology, error) {
	g, err := rt.reg.Load().LookupGroup(name)
	if err != nil {
		return svc.Topology{}, err
	}
	return g.Graph.Topology(), nil
}

// AgentSchema returns the input and output JSON Schemas of an agent.
func (rt *Runtime) AgentSchema(_ context.Context, name string) (svc.AgentSchema, error) {
	c, err := rt.lookup(name)
	if err != nil {
		return svc.AgentSchema{}, err
	}
	s := svc.AgentSchema{Name: name, Input: svc.AnySchema, Output: svc.AnySchema}
	if len(c.Def.InputType) > 0 {
		s.Input = slices.Clone(c.Def.InputType)
	}
	if len(c.Def.OutputType) > 0 {
		s.Output = slices.Clone(c.Def.OutputType)
	}
	return s, nil
}

// Ready is nil while the runtime accepts runs.
func (rt *Runtime) Ready(context.Context) error {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	if rt.closed {
		return svc.Errorf(svc.KindShuttingDown, "runtime is shutting down")
	}
	return nil
}

// Close shuts the runtime down, waiting up to 30 s for runs to finish.
func (rt *Runtime) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return rt.Shutdown(ctx)
}

// admit registers a call in flight, or refuses it once Shutdown began.
func (rt *Runtime) admit() error {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	if rt.closed {
		return svc.Errorf(svc.KindShuttingDown, "runtime is shutting down")
	}
	rt.inflight.Add(1)
	rt.active.Add(1)
	return nil
}

// leave ends what admit began.
func (rt *Runtime) leave() {
	rt.active.Add(-1)
	rt.inflight.Done()
}

// InFlight is the number of calls (runs, gathers, group runs, submitted
// runs, nested runs included) admitted and not yet answered.
func (rt *Runtime) InFlight() int { return int(rt.active.Load()) }

// RunsInFlight is the number of runs executing now: each run, gather,
// group run and submitted run once (a submitted run from when it starts
// running), and each child run an agent spawns or delegates to (see
// svc.InFlightReporter). Unlike InFlight, a submitted run is not counted
// twice, once as the submission and once as its run, and nothing counts
// before it reaches the actors.
func (rt *Runtime) RunsInFlight() int64 { return rt.runs.Load() }

// Stuck reports the calls (tool, model, hook) that runs stopped waiting
// for, at their timeout or cancellation, and that have not returned yet.
// Each is also logged when abandoned and when it returns.
func (rt *Runtime) Stuck() svc.StuckStats { return rt.stuck.Stats() }

// ServeNodes lists the live serve nodes sharing the run store (a
// svc.NodeLister's); none for a store of one node.
func (rt *Runtime) ServeNodes(ctx context.Context) ([]svc.ServeNode, error) {
	if nl, ok := rt.store.(svc.NodeLister); ok {
		return nl.ServeNodes(ctx)
	}
	return nil, nil
}

func (rt *Runtime) newStuck() *actors.Stuck {
	log := rt.log
	return &actors.Stuck{
		OnAbandon: func(c svc.StuckCall, n int) {
			log.Warn("a run stopped waiting for a call that does not return; its goroutine is abandoned until it does",
				zap.String("call", c.Kind+" "+c.Name), zap.String("agent", c.Agent), zap.String("task_id", c.TaskID),
				zap.String("trace_id", c.TraceID), zap.String("reason", c.Reason), zap.Int("stuck", n))
		},
		OnReturn: func(c svc.StuckCall, after time.Duration, n int) {
			log.Info("an abandoned call returned", zap.String("call", c.Kind+" "+c.Name), zap.String("agent", c.Agent),
				zap.String("task_id", c.TaskID), zap.Duration("after", after), zap.Int("stuck", n))
		},
	}
}

// recoverRuns deals with the runs a previous process left unfinished in
// the store: a store that can resume them has them claimed (ResumeRuns
// starts them), any other has them marked failed (interrupted).
func (rt *Runtime) recoverRuns(log *zap.Logger) error {
	_, inMem := rt.store.(interface{ InMemory() bool })
	if rs, ok := rt.store.(svc.ResumableStore); ok && !inMem && recordSteps {
		claimed, n, err := rs.Recover(context.Background())
		if err != nil {
			return fmt.Errorf("supervisor: recover runs: %w", err)
		}
		rt.resumes, rt.claimed = true, claimed
		if n > 0 {
			log.Warn("runs left unfinished by a previous process that cannot be resumed marked failed", zap.Int("runs", n))
		}
		return nil
	}
	n, err := rt.store.Interrupt(context.Background())
	if err != nil {
		return fmt.Errorf("supervisor: recover runs: %w", err)
	}
	if n > 0 {
		log.Warn("runs left unfinished by a previous process marked failed", zap.Int("runs", n))
	}
	return nil
}

// closing reports whether Shutdown has begun.
func (rt *Runtime) closing() bool {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	return rt.closed
}

// shard picks the next run shard, round robin.
func (rt *Runtime) shard() *actor.PID {
	return rt.shards[rt.next.Add(1)%uint64(len(rt.shards))]
}

// Shutdown stops the runtime: new calls are refused with ShuttingDownError,
// calls in flight are given until ctx ends to finish, then every run is
// cancelled, its goroutines are awaited and the actor system is stopped.
// A goroutine stuck in a call that ignores its context (a tool blocked in
// a system call) is not awaited: its run is answered at once, and
// Shutdown returns a *StuckError naming every such call still running.
// It is safe to call more than once.
func (rt *Runtime) Shutdown(ctx context.Context) error {
	var err error
	rt.stopOnce.Do(func() {
		rt.mu.Lock()
		rt.closed = true
		rt.mu.Unlock()
		rt.records.Stop() // store retries stop waiting
		rt.deadlines.stop()

		drained := make(chan struct{})
		go func() { rt.inflight.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-ctx.Done():
			// Out of patience: cancel what is left; each run replies once its
			// invocations see the cancelled context.
			for _, s := range rt.shards {
				rt.system.Root.Send(s, &actors.ShutdownRuns{})
			}
			<-drained
			err = fmt.Errorf("supervisor: shutdown: runs cancelled: %w", ctx.Err())
		}
		rt.work.Wait()
		// Tool servers go before the actor system: their actors close the
		// sessions and wait for the subprocesses to exit.
		if merr := rt.mcp.Shutdown(ctx); merr != nil {
			err = errors.Join(err, fmt.Errorf("supervisor: shutdown: tool servers: %w", merr))
		}
		// The message API's actor after the calls it started, before the
		// shards: its subscriptions end with it.
		rt.stopAPI()
		for _, s := range rt.shards {
			_ = rt.system.Root.StopFuture(s).Wait()
		}
		rt.closeEvents()
		rt.limits.Close()
		if rt.ownSystem {
			rt.system.Shutdown()
		}
		rt.pool.Close()
		rt.mailboxes.Close()
		// Every event has been emitted: write out the log's queue.
		if rt.eventLog != nil {
			rt.eventLog.Close()
		}
		if rt.ownStore {
			_ = rt.store.Close()
		}
		if st := rt.stuck.Stats(); st.Count > 0 {
			err = errors.Join(err, &StuckError{Calls: st.Calls})
		}
	})
	return err
}

// StuckError is Shutdown's report of the calls that were still running
// when it returned: abandoned by their runs, they go on until they return
// or the process exits.
type StuckError struct{ Calls []svc.StuckCall }

func (e *StuckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "supervisor: shutdown: %d %s still running, abandoned: ", len(e.Calls), plural(len(e.Calls), "call", "calls"))
	for i, c := range e.Calls {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.String())
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func newID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

var (
	_ svc.Backend          = (*Runtime)(nil)
	_ svc.InFlightReporter = (*Runtime)(nil)
)
