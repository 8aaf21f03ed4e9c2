// Package worker is the worker process of the distributed mode: it joins the
// task subjects of its agents on a broker as a competing consumer, runs each
// task in its own runtime (the tasks of a batch each as its own, batch.go),
// publishes the AgentResult to the task's reply subject, acknowledges the
// task only after that, and announces itself with
// worker_started, worker_heartbeat and worker_stopped.
//
// The worker owns none of what it is given: the runner (a local runtime),
// the broker and the emitter belong to the caller, which closes them after
// Shutdown.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/fleetwire"
)

// Runner runs tasks locally; a *supervisor.Runtime (built without a broker)
// is one. A runtime that dispatches to a broker would send every task back
// to the fleet, so the caller must give a local one (one with a
// NestedDispatcher is: it sends back only the runs nested in its tasks).
type Runner interface {
	Run(ctx context.Context, agent string, task svc.TaskSpec) (svc.AgentResult, error)
	Agents(ctx context.Context) ([]string, error)
}

// Defaults of Config.
const (
	DefaultConcurrency = 10
	DefaultHeartbeat   = 30 * time.Second
	// resultPublishTimeout bounds the publication of one result (with its
	// retries); a broker that takes longer gets the task back by Nack.
	resultPublishTimeout = 10 * time.Second
	// settleTimeout bounds an Ack or Nack made after the handler's context
	// ended (at shutdown).
	settleTimeout = 5 * time.Second
	// cancelledMemory is how long a broadcast cancel is remembered, so a
	// task of that run delivered after the cancel is refused at once.
	cancelledMemory = 10 * time.Minute
	// maxCancelled bounds that memory.
	maxCancelled = 10000
	// lookupTimeout bounds the check of a task's run against the cancels
	// recorded on the broker.
	lookupTimeout = 5 * time.Second
)

// Config configures a Worker.
type Config struct {
	// Broker carries the tasks, the results and the broadcasts. Required.
	Broker svc.Broker
	// Runner runs the tasks. Required.
	Runner Runner
	// Agents are the agents whose tasks this worker takes; every agent of
	// the runner when empty. Each must be one the runner knows.
	Agents []string
	// Concurrency bounds the tasks running at once, across all agents.
	// DefaultConcurrency when 0.
	Concurrency int
	// Prefetch bounds the deliveries the broker hands this worker per
	// agent at once (held ones wait for a concurrency slot, their ack
	// deadline kept alive). Concurrency when 0.
	Prefetch int
	// AckWait is the ack deadline of a task: a worker that dies holding a
	// task loses it to another worker after this long. The worker extends
	// it while a task runs. svc.DefaultAckWait when 0.
	AckWait time.Duration
	// MaxDeliver is how many deliveries a task gets before it goes to the
	// dead letter (its run then fails with the reason).
	// svc.DefaultMaxDeliver when 0.
	MaxDeliver int
	// Heartbeat is the interval of worker_heartbeat; DefaultHeartbeat when
	// 0, none when negative.
	Heartbeat time.Duration
	// RuntimeID names this worker in its events; a new UUIDv7 when empty.
	RuntimeID string
	// ConsumerID is this worker's name within each agent's consumer group:
	// a stable one lets a restarted worker take back its pending tasks
	// (Redis Streams). RuntimeID when empty.
	ConsumerID string
	// Keys, when not empty, are the keys task envelopes must be signed
	// with (by key id); an unsigned or badly signed task is refused.
	Keys map[string][]byte
	// SignKeyID and SignKey sign the results; unsigned when SignKey is
	// empty.
	SignKeyID string
	SignKey   []byte
	// Emitter receives worker_started, worker_heartbeat and
	// worker_stopped (also broadcast on svc.workers). Nothing when nil.
	Emitter svc.Emitter
	// Events, when set, is the BrokerEventBridge in the runner's emitter
	// chain (emitters/bridge): for each task whose publisher asked for its
	// events (publish_events), the worker binds the task's span to the
	// publisher's svc.events.{runtime_id} while the task runs.
	Events Binder
	// Logger logs refused and failed deliveries; silent when nil.
	Logger *zap.Logger
}

// Binder binds the events under a span to a subject until unbind is called;
// *bridge.Bridge is one.
type Binder interface {
	Bind(span, subject string) (unbind func())
}

// DeltaRelayer is a Binder that also relays the deltas of a task whose
// publisher listens for them (the envelope's deltas flag): RelayDeltas
// returns the DeltaSink the worker puts in the task's context, which
// forwards to subject tagged with dispatch, sent, the number of deltas it
// forwarded (the result's delta_count), and done, called once the task
// ran. *bridge.Bridge is one; with a Binder that is not, tasks run
// without streaming to their publisher.
type DeltaRelayer interface {
	RelayDeltas(root, subject, dispatch string) (sink svc.DeltaSink, sent func() int64, done func())
}

// Worker consumes tasks. Create it with New, then Start; stop it with
// Shutdown.
type Worker struct {
	cfg    Config
	agents []string
	log    *zap.Logger
	em     svc.Emitter
	slots  chan struct{}

	inFlight atomic.Int64
	rejected atomic.Int64
	skipped  atomic.Int64 // tasks of cancelled runs answered without running
	mu       sync.Mutex
	running  map[string]*task // by task id
	// cancelled remembers run ids cancelled by broadcast, with when.
	cancelled map[string]time.Time
	// cancelledDispatches remembers the dispatches (fleetwire.DispatchKey)
	// a task cancel named while they were not running: a task of a batch
	// waiting for a slot, or held in the prefetch, is then answered
	// cancelled instead of run.
	cancelledDispatches map[string]time.Time
	subs                []svc.Subscription
	cancelSub           svc.Subscription
	pingSub             svc.Subscription
	started             bool
	stopped             bool

	// results are the queues of results waiting to go out, by reply
	// subject, each drained by a flusher goroutine counted in flushers.
	rmu      sync.Mutex
	results  map[string]*resultQueue
	flushers sync.WaitGroup

	hbStop chan struct{}
	// hbWake asks the heartbeat loop for a heartbeat soon: in_flight
	// changed. Buffered, sent to without blocking.
	hbWake chan struct{}
	hbDone chan struct{}
}

// task is one task running on this worker.
type task struct {
	runID  string
	cancel context.CancelCauseFunc
}

// errCancelledByRequest is the cause of a task cancelled by a broadcast.
var errCancelledByRequest = errors.New("run cancelled by request")

// New checks cfg and returns a worker that has not started.
func New(ctx context.Context, cfg Config) (*Worker, error) {
	switch {
	case cfg.Broker == nil:
		return nil, errors.New("worker: no broker")
	case cfg.Runner == nil:
		return nil, errors.New("worker: no runner")
	case cfg.Concurrency < 0:
		return nil, fmt.Errorf("worker: concurrency %d: must be at least 1", cfg.Concurrency)
	case cfg.Prefetch < 0:
		return nil, fmt.Errorf("worker: prefetch %d: must be at least 1", cfg.Prefetch)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = cfg.Concurrency
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = svc.DefaultAckWait
	}
	if cfg.RuntimeID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("worker: runtime id: %w", err)
		}
		cfg.RuntimeID = id.String()
	}
	if cfg.ConsumerID == "" {
		cfg.ConsumerID = cfg.RuntimeID
	}
	known, err := cfg.Runner.Agents(ctx)
	if err != nil {
		return nil, fmt.Errorf("worker: agents: %w", err)
	}
	agents := slices.Clone(cfg.Agents)
	if len(agents) == 0 {
		agents = known
	}
	if len(agents) == 0 {
		return nil, errors.New("worker: no agents to serve: load some specs")
	}
	slices.Sort(agents)
	agents = slices.Compact(agents)
	for _, a := range agents {
		if !slices.Contains(known, a) {
			return nil, &svc.Error{Kind: svc.KindRegistry, Agent: a,
				Message: fmt.Sprintf("worker: unknown agent %q (known: %v)", a, known)}
		}
	}
	w := &Worker{cfg: cfg, agents: agents, log: cfg.Logger, em: cfg.Emitter,
		slots: make(chan struct{}, cfg.Concurrency), running: map[string]*task{}, cancelled: map[string]time.Time{},
		cancelledDispatches: map[string]time.Time{},
		hbWake:              make(chan struct{}, 1), results: map[string]*resultQueue{}}
	if w.log == nil {
		w.log = zap.NewNop()
	}
	if w.em == nil {
		w.em = svc.NopEmitter{}
	}
	return w, nil
}

// RuntimeID is the worker's runtime id.
func (w *Worker) RuntimeID() string { return w.cfg.RuntimeID }

// Agents are the agents the worker serves, sorted.
func (w *Worker) Agents() []string { return slices.Clone(w.agents) }

// Subjects are the task subjects the worker consumes, by agent.
func (w *Worker) Subjects() map[string]string {
	m := make(map[string]string, len(w.agents))
	for _, a := range w.agents {
		m[a] = fleetwire.TaskSubject(a)
	}
	return m
}

// InFlight is the number of tasks running now.
func (w *Worker) InFlight() int { return int(w.inFlight.Load()) }

// Config returns the worker's configuration with its defaults filled in.
func (w *Worker) Config() Config { return w.cfg }

// Start subscribes to the cancel broadcast and to every agent's task
// subject, emits worker_started and starts the heartbeat. On error it
// undoes what it did.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("worker: already started")
	}
	w.started = true
	w.mu.Unlock()
	// Cancels first: a cancel that arrives while the first tasks start
	// must not be missed.
	cs, err := w.cfg.Broker.SubscribeBroadcast(ctx, fleetwire.SubjectCancel, w.onCancel)
	if err != nil {
		return fmt.Errorf("worker: subscribe %s: %w", fleetwire.SubjectCancel, err)
	}
	w.cancelSub = cs
	for _, a := range w.agents {
		subject := fleetwire.TaskSubject(a)
		sub, err := w.cfg.Broker.Subscribe(ctx, subject, svc.SubscribeOptions{
			Group: svc.DefaultGroup(subject), ConsumerID: w.cfg.ConsumerID, Prefetch: w.cfg.Prefetch,
			AckWait: w.cfg.AckWait, MaxDeliver: w.cfg.MaxDeliver, OnDeadLetter: w.onDeadLetter,
		}, w.handle)
		if err != nil {
			for _, s := range w.subs {
				_ = s.Stop()
			}
			_ = cs.Stop()
			return fmt.Errorf("worker: subscribe %s: %w", subject, err)
		}
		w.subs = append(w.subs, sub)
	}
	// A serve node that starts asks for a heartbeat at once. Without the
	// subscription the node still learns of this worker at its next
	// heartbeat: not worth failing the start for.
	if ps, err := w.cfg.Broker.SubscribeBroadcast(ctx, fleetwire.SubjectWorkersPing, w.onPing); err == nil {
		w.pingSub = ps
	} else {
		w.log.Warn("not answering serve nodes' pings", zap.Error(err))
	}
	w.lifecycle(svc.EventWorkerStarted, svc.Payload{
		"runtime_id": w.cfg.RuntimeID, "agents": w.agents, "broker_scheme": w.cfg.Broker.Scheme(),
		"concurrency": w.cfg.Concurrency, "prefetch": w.cfg.Prefetch, "consumer_id": w.cfg.ConsumerID,
		"heartbeat_seconds": max(w.cfg.Heartbeat, 0).Seconds(), fleetwire.BatchesPayloadKey: true,
	})
	if w.cfg.Heartbeat > 0 {
		w.hbStop, w.hbDone = make(chan struct{}), make(chan struct{})
		go w.heartbeat()
	}
	return nil
}

// Shutdown drains the worker: it stops taking tasks, lets the tasks in
// flight finish until ctx ends, then cancels the rest and gives them back
// to the broker (Nack) so another worker runs them. It emits
// worker_stopped. Idempotent; it returns ctx's error when tasks had to be
// given back.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.mu.Lock()
	if !w.started || w.stopped {
		w.mu.Unlock()
		return nil
	}
	w.stopped = true
	w.mu.Unlock()
	var errs []error
	var wg sync.WaitGroup
	results := make([]error, len(w.subs))
	for i, s := range w.subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = s.Drain(ctx)
		}()
	}
	wg.Wait()
	for _, err := range results {
		if err != nil {
			errs = append(errs, err)
			break // the same ctx error for every subscription
		}
	}
	w.flushers.Wait() // the drained handlers waited for their results
	if w.hbStop != nil {
		close(w.hbStop)
		<-w.hbDone
	}
	if err := w.cancelSub.Stop(); err != nil {
		errs = append(errs, err)
	}
	if w.pingSub != nil {
		_ = w.pingSub.Stop()
	}
	w.lifecycle(svc.EventWorkerStopped, svc.Payload{
		"runtime_id": w.cfg.RuntimeID, "agents": w.agents, "broker_scheme": w.cfg.Broker.Scheme(),
	})
	if len(errs) > 0 {
		return fmt.Errorf("worker: shutdown: %w", errors.Join(errs...))
	}
	return nil
}

// handle runs one delivered task: it keeps the delivery alive while the
// task waits for a slot and runs, publishes the result, then acks.
func (w *Worker) handle(ctx context.Context, d *svc.Delivery) {
	stopKeepAlive := fleetwire.KeepAlive(ctx, d, 0)
	defer stopKeepAlive()
	if fleetwire.IsBatch(d.Data) {
		w.handleBatch(ctx, d)
		return
	}
	env, err := fleetwire.Decode(d.Data)
	if err == nil && env.Kind != fleetwire.MsgTask {
		err = fmt.Errorf("envelope: kind %q on a task subject", env.Kind)
	}
	if err == nil && len(w.cfg.Keys) > 0 {
		err = env.Verify(w.cfg.Keys)
	}
	if err != nil {
		w.reject(ctx, d, env, err)
		return
	}
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		w.settle(ctx, d, false) // shutting down before it started: give it back
		return
	}
	defer func() { <-w.slots }()
	res, deltas, handedBack := w.run(ctx, env, true)
	if handedBack {
		w.settle(ctx, d, false)
		return
	}
	if err := w.reply(env, res, d.Attempt, deltas); err != nil {
		w.log.Error("result not published; the task goes back to the broker", zap.String("task_id", env.TaskID),
			zap.String("run_id", env.RunID), zap.Error(err))
		w.settle(ctx, d, false)
		return
	}
	w.settle(ctx, d, true)
}

// reject refuses a task message nobody may run: one that does not decode,
// is not a task, or fails the signature check (unsigned, unknown key id,
// tampered). It is counted, logged without its payload (a forged message's
// content is the attacker's and may be large), sent to the subject's dead
// letter for an operator to inspect, and acked so it is not redelivered.
// No result goes back: its reply subject cannot be trusted.
func (w *Worker) reject(ctx context.Context, d *svc.Delivery, env *fleetwire.Envelope, err error) {
	w.rejected.Add(1)
	fields := []zap.Field{zap.String("subject", d.Subject), zap.String("message_id", d.ID),
		zap.Int("attempt", d.Attempt), zap.Int("bytes", len(d.Data)), zap.Error(err)}
	if env != nil {
		fields = append(fields, zap.String("key_id", env.KeyID), zap.String("task_id", env.TaskID))
	}
	w.log.Error("task rejected", fields...)
	dl := svc.DeadLetter{Subject: d.Subject, Data: d.Data, Deliveries: d.Attempt, Reason: "rejected: " + err.Error(), At: time.Now().UTC()}
	if dlr, ok := d.Acker.(deadLetterer); ok {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resultPublishTimeout)
		derr := dlr.DeadLetter(pctx, dl)
		cancel()
		if derr == nil {
			return
		}
		w.log.Warn("the broker did not dead-letter the rejected task; publishing its record", zap.String("subject", d.Subject),
			zap.String("message_id", d.ID), zap.Error(derr))
	}
	rec, merr := json.Marshal(dl)
	if merr == nil {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resultPublishTimeout)
		merr = w.cfg.Broker.Publish(pctx, fleetwire.DeadLetterSubject(d.Subject), rec)
		cancel()
	}
	if merr != nil {
		// Dropped rather than redelivered forever: the count and the log
		// above still say it came.
		w.log.Warn("rejected task not dead-lettered", zap.String("subject", d.Subject), zap.String("message_id", d.ID), zap.Error(merr))
	}
	w.settle(ctx, d, true)
}

// deadLetterer is a delivery's acknowledger that can dead-letter it
// itself (amqpbroker's, through RabbitMQ's dead-letter exchange): reject
// prefers it to publishing the record and acking.
type deadLetterer interface {
	DeadLetter(ctx context.Context, dl svc.DeadLetter) error
}

// Rejected is how many task messages this worker refused without running
// them (see reject); worker_heartbeat carries it as "rejected" once it is
// not zero.
func (w *Worker) Rejected() int64 { return w.rejected.Load() }

// run runs the task and returns its result and the number of deltas it
// relayed, or handedBack when the worker is shutting down and the task
// must go to another worker. lookUp checks the task's run against the
// cancels recorded on the broker first (the tasks of a batch were checked
// together, one look-up per run).
func (w *Worker) run(ctx context.Context, env *fleetwire.Envelope, lookUp bool) (res svc.AgentResult, deltas int, handedBack bool) {
	now := time.Now()
	if env.Expired(now) {
		return w.failed(env, &svc.Error{Kind: svc.KindTimeout, Agent: env.Agent, TaskID: env.TaskID, Reason: "timeout",
			Message: fmt.Sprintf("agent %s: the task's deadline passed before a worker took it", env.Agent)}), 0, false
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !env.DeadlineTime().IsZero() {
		var stop context.CancelFunc
		runCtx, stop = context.WithDeadline(runCtx, env.DeadlineTime())
		defer stop()
	}
	if (lookUp && w.cancelledOnBroker(ctx, env)) || !w.track(env, cancel) {
		w.skipped.Add(1)
		return w.failed(env, &svc.Error{Kind: svc.KindCancelled, Agent: env.Agent, TaskID: env.TaskID, Reason: "cancelled",
			Message: fmt.Sprintf("agent %s: cancelled", env.Agent)}), 0, false
	}
	defer w.untrack(env)
	w.inFlight.Add(1)
	w.moved()
	defer w.moved()
	defer w.inFlight.Add(-1)
	// The task's events go to its publisher when it asked for them; the
	// binding ends with the run, after its last event was queued.
	if to := env.EventsTo(); to != "" && w.cfg.Events != nil {
		defer w.cfg.Events.Bind(env.SpanID, to)()
	}

	// The invocation runs at the envelope's depth (the runtime places a
	// run one below the depth in its scope), under the publisher's trace
	// and span, so its events hang under the dispatching invocation.
	// The run id and the events subject go along too, for the runs nested
	// in the task that the runtime dispatches to the fleet in turn; the
	// token cap, when the task has one, is what its dispatcher had left.
	scope := svc.ScopeFrom(runCtx)
	scope.Depth, scope.ParentTrace, scope.ParentSpan = env.Depth-1, env.ParentTraceID, env.SpanID
	scope.RunID, scope.EventsTo = env.RunID, env.EventsTo()
	// A publisher that listens for the streamed answer gets its deltas
	// through the bridge; the sink in the scope makes the task's model
	// calls stream, and those of the runs it starts here.
	var sent func() int64
	if to := env.DeltasTo(); to != "" {
		if dr, ok := w.cfg.Events.(DeltaRelayer); ok {
			var done func()
			scope.Deltas, sent, done = dr.RelayDeltas(env.SpanID, to, fleetwire.DispatchKey(env.SpanID, env.Attempt))
			defer done()
		}
	}
	runCtx = svc.WithScope(runCtx, scope)
	res, err := w.cfg.Runner.Run(runCtx, env.Agent, svc.TaskSpec{
		ID: env.TaskID, Input: env.Input, RequestID: env.TraceID, Metadata: env.Metadata, TokenBudget: env.TokenBudget,
	})
	if sent != nil {
		deltas = int(sent())
	}
	if ctx.Err() != nil && !errors.Is(context.Cause(runCtx), errCancelledByRequest) {
		return res, deltas, true // the worker is going away: another one runs it
	}
	if err != nil {
		// A rejected run (its token cap, say) still reports what it spent,
		// for the dispatcher to charge to its own cap.
		failed := w.failed(env, err)
		md := res.Metadata
		failed.Metadata.TokensUsed, failed.Metadata.CostUSD, failed.Metadata.CostUnknown = md.TokensUsed, md.CostUSD, md.CostUnknown
		failed.Metadata.Model, failed.Metadata.ModelsTried = md.Model, md.ModelsTried
		return failed, deltas, false
	}
	return res, deltas, false
}

func (w *Worker) failed(env *fleetwire.Envelope, err error) svc.AgentResult {
	return svc.AgentResult{AgentName: env.Agent, TaskID: env.TaskID, Error: svc.ErrorInfoOf(err),
		Metadata: svc.ResultMetadata{TraceID: env.TraceID, Backend: "broker:" + w.cfg.Broker.Scheme()}}
}

// reply publishes the result, and how many deltas were relayed before it,
// to the task's reply subject, retrying a publish that did not fail
// permanently a few times within resultPublishTimeout. delivery is the
// broker's delivery count of the task, which tells the publisher of a
// redelivery.
func (w *Worker) reply(env *fleetwire.Envelope, res svc.AgentResult, delivery, deltas int) error {
	out := fleetwire.Envelope{Kind: fleetwire.MsgResult, TaskID: env.TaskID, RunID: env.RunID, TraceID: env.TraceID,
		SpanID: env.SpanID, Agent: env.Agent, Attempt: env.Attempt, Result: &res, RuntimeID: w.cfg.RuntimeID,
		Delivery: delivery, DeltaCount: deltas}
	if len(w.cfg.SignKey) > 0 {
		if err := out.Sign(w.cfg.SignKeyID, w.cfg.SignKey); err != nil {
			return err
		}
	}
	data, err := out.Encode()
	if err != nil {
		return err
	}
	return w.publishReply(env.ReplyTo, data)
}

// settle acks (done) or nacks the delivery; after the handler's context
// ended it still does so, within settleTimeout.
func (w *Worker) settle(ctx context.Context, d *svc.Delivery, done bool) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var err error
	if done {
		err = d.Ack(sctx)
	} else {
		err = d.Nack(sctx, 0)
	}
	if err != nil && !errors.Is(err, svc.ErrSettled) {
		// The broker redelivers it after the ack deadline; the publisher
		// drops a second result.
		w.log.Warn("delivery not settled", zap.String("subject", d.Subject), zap.String("message_id", d.ID),
			zap.Bool("ack", done), zap.Error(err))
	}
}

// track registers a running task so a cancel broadcast reaches it; false
// when its run was cancelled already.
func (w *Worker) track(env *fleetwire.Envelope, cancel context.CancelCauseFunc) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.cancelled[env.RunID]; ok && env.RunID != "" {
		return false
	}
	if len(w.cancelledDispatches) > 0 {
		key := fleetwire.DispatchKey(env.SpanID, env.Attempt)
		if _, ok := w.cancelledDispatches[key]; ok {
			delete(w.cancelledDispatches, key)
			return false
		}
	}
	w.running[env.TaskID] = &task{runID: env.RunID, cancel: cancel}
	return true
}

// cancelledOnBroker reports whether the task's run was cancelled by a
// cancel this worker did not see (it was not connected when the cancel was
// broadcast): the publisher also records whole-run cancels on a broker that
// is a svc.Retainer. A run found so is remembered like a broadcast one. A
// failed look-up runs the task: a broker hiccup must not stop the fleet's
// work, and a cancel broadcast still reaches the task while it runs.
func (w *Worker) cancelledOnBroker(ctx context.Context, env *fleetwire.Envelope) bool {
	r, ok := w.cfg.Broker.(svc.Retainer)
	if !ok || env.RunID == "" {
		return false
	}
	w.mu.Lock()
	_, known := w.cancelled[env.RunID]
	w.mu.Unlock()
	if known {
		return true
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	cancelled, err := r.Retained(lctx, fleetwire.CancelledRunKey(env.RunID))
	if err != nil {
		if ctx.Err() != nil {
			return false // shutting down: the task goes back to the broker anyway
		}
		w.log.Warn("cancelled runs not checked; the task runs", zap.String("task_id", env.TaskID),
			zap.String("run_id", env.RunID), zap.Error(err))
		return false
	}
	if cancelled {
		w.mu.Lock()
		w.remember(env.RunID, time.Now())
		w.mu.Unlock()
	}
	return cancelled
}

// Skipped is how many tasks this worker answered as cancelled without
// running them, because their run had been cancelled; worker_heartbeat
// carries it as "skipped_cancelled" once it is not zero.
func (w *Worker) Skipped() int64 { return w.skipped.Load() }

func (w *Worker) untrack(env *fleetwire.Envelope) {
	w.mu.Lock()
	delete(w.running, env.TaskID)
	w.mu.Unlock()
}

// onCancel cancels the tasks a cancel envelope names: one task when it
// gives a task id, else every task of the run (remembered for a while, for
// tasks of the run still on their way).
func (w *Worker) onCancel(_ context.Context, _ string, data []byte) {
	env, err := fleetwire.Decode(data)
	if err == nil && env.Kind != fleetwire.MsgCancel {
		err = fmt.Errorf("envelope: kind %q on %s", env.Kind, fleetwire.SubjectCancel)
	}
	if err == nil && len(w.cfg.Keys) > 0 {
		err = env.Verify(w.cfg.Keys)
	}
	if err != nil {
		w.log.Warn("cancel refused", zap.Error(err))
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if env.TaskID != "" {
		if t, ok := w.running[env.TaskID]; ok {
			t.cancel(errCancelledByRequest)
		} else if env.SpanID != "" {
			// Not running here (yet): if it waits here for a slot, it is
			// answered cancelled when it gets one.
			remember(w.cancelledDispatches, fleetwire.DispatchKey(env.SpanID, env.Attempt), time.Now())
		}
		return
	}
	w.remember(env.RunID, time.Now())
	for _, t := range w.running {
		if t.runID == env.RunID {
			t.cancel(errCancelledByRequest)
		}
	}
}

// remember records a cancelled run, within maxCancelled; w.mu is held.
func (w *Worker) remember(runID string, now time.Time) { remember(w.cancelled, runID, now) }

// remember records id in m at now, forgetting what is older than
// cancelledMemory (and, past maxCancelled, whatever it must) first.
func remember(m map[string]time.Time, id string, now time.Time) {
	if len(m) >= maxCancelled {
		for k, at := range m {
			if now.Sub(at) > cancelledMemory || len(m) >= maxCancelled {
				delete(m, k)
			}
		}
	}
	m[id] = now
}

// onDeadLetter answers a task that was delivered too often with a failed
// result, so its run fails with the reason instead of waiting for its
// timeout.
func (w *Worker) onDeadLetter(_ context.Context, dl svc.DeadLetter) {
	if fleetwire.IsBatch(dl.Data) {
		w.deadBatch(dl)
		return
	}
	env, err := fleetwire.Decode(dl.Data)
	if err != nil || env.Kind != fleetwire.MsgTask {
		return
	}
	if len(w.cfg.Keys) > 0 && env.Verify(w.cfg.Keys) != nil {
		return
	}
	res := w.deadLettered(env, dl)
	if err := w.reply(env, res, dl.Deliveries, 0); err != nil {
		w.log.Error("dead-letter result not published", zap.String("task_id", env.TaskID), zap.Error(err))
	}
}

// deadLettered is the failed result of a task given up by the broker.
func (w *Worker) deadLettered(env *fleetwire.Envelope, dl svc.DeadLetter) svc.AgentResult {
	return w.failed(env, &svc.Error{Kind: svc.KindRuntime, Agent: env.Agent, TaskID: env.TaskID, Reason: "dead_letter",
		Message: fmt.Sprintf("agent %s: task given up after %d deliveries: %s", env.Agent, dl.Deliveries, dl.Reason)})
}

// inFlightBeat is the least time between two heartbeats sent because
// in_flight changed: a fleet view follows a gather's work within a second
// without a heartbeat per task.
const inFlightBeat = time.Second

// moved tells the heartbeat loop that in_flight changed.
func (w *Worker) moved() {
	select {
	case w.hbWake <- struct{}{}:
	default:
	}
}

// heartbeat sends worker_heartbeat every Heartbeat, and besides within
// inFlightBeat of in_flight changing (at most one per inFlightBeat), so
// the serve nodes' in-flight counts move with the work.
func (w *Worker) heartbeat() {
	defer close(w.hbDone)
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	soon := time.NewTimer(inFlightBeat)
	defer soon.Stop()
	soon.Stop()
	var last time.Time
	var pending bool // soon is armed
	beat := func() {
		last = time.Now()
		w.beat()
	}
	for {
		select {
		case <-w.hbStop:
			return
		case <-t.C:
			beat()
		case <-w.hbWake:
			if pending {
				continue
			}
			if d := time.Since(last); d < inFlightBeat {
				soon.Reset(inFlightBeat - d)
				pending = true
				continue
			}
			beat()
		case <-soon.C:
			pending = false
			beat()
		}
	}
}

func (w *Worker) beat() {
	p := svc.Payload{
		"runtime_id": w.cfg.RuntimeID, "agent_subscriptions": w.agents, "in_flight": w.InFlight(),
		"concurrency_cap": w.cfg.Concurrency, "broker_scheme": w.cfg.Broker.Scheme(), fleetwire.BatchesPayloadKey: true,
	}
	if n := w.Rejected(); n > 0 {
		p["rejected"] = n
	}
	if n := w.Skipped(); n > 0 {
		p["skipped_cancelled"] = n
	}
	if pc, ok := w.cfg.Broker.(svc.PanicCounter); ok {
		if n := pc.HandlerPanics(); n > 0 {
			p["handler_panics"] = n
		}
	}
	w.lifecycle(svc.EventWorkerHeartbeat, p)
}

// onPing answers a serve node's ping with a heartbeat, unless the worker is
// stopping (its worker_stopped says the rest).
func (w *Worker) onPing(context.Context, string, []byte) {
	w.mu.Lock()
	stopped := w.stopped
	w.mu.Unlock()
	if !stopped {
		w.beat()
	}
}

// lifecycle emits a worker event locally and broadcasts it on svc.workers
// for every serve node. The broadcast is best effort: a heartbeat lost is
// replaced by the next.
func (w *Worker) lifecycle(t svc.EventType, p svc.Payload) {
	ev := svc.RuntimeEvent{EventType: t, Timestamp: time.Now().UTC(), AgentName: w.cfg.RuntimeID,
		TraceID: w.cfg.RuntimeID, Payload: p}
	w.em.Emit(ev)
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := w.cfg.Broker.Broadcast(ctx, fleetwire.SubjectWorkers, data); err != nil {
		w.log.Warn("worker event not broadcast", zap.String("event_type", string(t)), zap.Error(err))
	}
}
