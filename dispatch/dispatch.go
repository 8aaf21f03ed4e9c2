// Package dispatch is the publisher side of the distributed mode: it sends an
// agent invocation to the fleet as a task message on the agent's task
// subject (under load, many tasks to a message: batch.go), waits for the
// one result that comes back on this process's
// inbox, and drops any duplicate (a task redelivered after a worker died
// may run twice; its run sees one result). It also follows the fleet's
// worker events and relays cancels as broadcasts.
//
// Policies stay with the caller: the runtime's run actor enforces the
// timeout and the token budget around Dispatch, exactly as it does around a
// local invocation.
package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/bridge"
	"github.com/svc-dev/svc/fleetwire"
)

// Config configures a Publisher.
type Config struct {
	// Broker carries tasks out and results back. Required.
	Broker svc.Broker
	// RuntimeID names this process: its inbox is svc.results.{RuntimeID}.
	// A new UUIDv7 when empty.
	RuntimeID string
	// PublishEvents asks workers to relay the tasks' events to this
	// process: the publisher subscribes to svc.events.{RuntimeID} and
	// feeds every event relayed there into Emitter, so the node's log,
	// event stream, event store and metrics see the fleet's per-agent and
	// per-tool events. Without it Emitter sees only what happens here
	// (agent_dispatched, batch and group events) and the workers'
	// lifecycle events.
	PublishEvents bool
	// Health are the thresholds of Workers; the spec's 90 s and 300 s
	// when zero.
	Health svc.WorkerThresholds
	// Now is the clock of Workers; time.Now when nil.
	Now func() time.Time
	// Keys verify results and cancels when not empty; SignKeyID and
	// SignKey sign tasks and cancels.
	Keys      map[string][]byte
	SignKeyID string
	SignKey   []byte
	// Emitter receives agent_dispatched and the fleet's worker events.
	Emitter svc.Emitter
	// OnCancel is called with the run id of every cancel broadcast by
	// another process, so this one cancels its own part of that run.
	OnCancel func(runID string)
	// AckWait is the broker's ack wait of the workers' task
	// subscriptions (svc serve --ack-wait): how long a task whose worker
	// died waits before another worker gets it. The log of a redelivery
	// names it, and redeliveries within it are logged once.
	// svc.DefaultAckWait when 0.
	AckWait time.Duration
	// Logger logs refused results; silent when nil.
	Logger *zap.Logger
	// CancelRetention is how long a cancelled run is recorded on a broker
	// that is a svc.Retainer, so that workers that were not connected
	// when the cancel was broadcast refuse the run's queued tasks; it
	// should outlast the longest task deadline (timeout_seconds).
	// DefaultCancelRetention when 0.
	CancelRetention time.Duration
	// MaxBatch is the most tasks sent in one broker message when tasks of
	// an agent wait to be published together: DefaultMaxBatch when 0, no
	// batches when negative. Batches go only to an agent whose live
	// workers all announced they take them, and hold no more tasks than
	// would wait about 5 ms for slots on the smallest of those workers,
	// by the agent's average run time, so that one worker does not sit on
	// a gather's tasks while others idle.
	MaxBatch int
}

// DefaultMaxBatch is Config.MaxBatch's default.
const DefaultMaxBatch = 256

// DefaultCancelRetention is Config.CancelRetention's default: a day, far
// past any task deadline of a default runtime (300 s).
const DefaultCancelRetention = 24 * time.Hour

// retainTimeout bounds the recording of a cancel, retries included, before
// it is broadcast.
const retainTimeout = 5 * time.Second

var (
	_ svc.FleetReader       = (*Publisher)(nil)
	_ svc.RedeliveryCounter = (*Publisher)(nil)
)

// Publisher dispatches tasks. It is safe for concurrent use.
type Publisher struct {
	cfg    Config
	scheme string
	inbox  string
	log    *zap.Logger
	em     svc.Emitter

	mu      sync.Mutex
	pending map[string]*waiter // by dispatch key
	// listening are the dispatches, by key, whose deltas are wanted: from
	// their publish until Dispatch returns (past their result, whose
	// deltas may still be on their way).
	listening map[string]*waiter
	workers   map[string]workerInfo
	batchers  map[string]*batcher // by task subject
	// durations are the moving averages of the agents' task run times
	// (ms), which bound their batches.
	durations map[string]float64
	subs      []svc.Subscription
	closed    bool

	// redelivery is when the last redelivery was logged; redelivered
	// counts them all.
	redelivery  time.Time
	redelivered atomic.Int64

	dups     atomic.Int64
	relayed  atomic.Int64
	seq      atomic.Int64   // dispatch numbers (the envelope's attempt)
	bg       sync.WaitGroup // cancel broadcasts in flight
	closeCtx context.Context
	stopBg   context.CancelFunc
}

type waiter struct {
	ch chan result
	// deltas, when the dispatch listens for deltas, gets them; got counts
	// them and arrived is signalled at each, for the wait at the end.
	deltas  svc.DeltaSink
	got     atomic.Int64
	arrived chan struct{}
}

// result is a result and the number of deltas relayed before it.
type result struct {
	res    svc.AgentResult
	deltas int
}

// workerInfo is what the worker lifecycle events said of one worker.
type workerInfo struct {
	agents      []string
	seen        time.Time // when this node last heard from it
	stopped     bool
	inFlight    int64
	concurrency int64
	period      float64 // heartbeat_seconds of worker_started
	scheme      string
	batches     bool // it takes batches of tasks
}

// Request is one invocation to dispatch.
type Request struct {
	Agent      string
	TrustLevel svc.TrustLevel
	TaskID     string
	TraceID    string
	// ParentTraceID, SpanID and ParentSpanID place the invocation in its
	// run tree (ParentSpanID is the invocation that started its run, ""
	// for a top-level run).
	ParentTraceID string
	SpanID        string
	ParentSpanID  string
	// RunID is the submitted run (or the trace of a synchronous run) a
	// cancel names.
	RunID    string
	Input    json.RawMessage
	Metadata map[string]string
	Depth    int
	// TokenBudget (0 for none) is the token cap of the task's run on the
	// worker: what is left of the cap of the run that dispatches it.
	TokenBudget int64
	// EventsTo, when set, is the EventSubject the worker relays the task's
	// events to, instead of this publisher's (a worker dispatching the
	// runs nested in a task passes on where that task's events go).
	EventsTo string
	// Deadline is when the caller stops waiting; workers do not start the
	// task after it.
	Deadline time.Time
	// Deltas, when set, listens for the task's streamed answer: the task
	// asks the worker for its deltas, and Deltas gets them as they come
	// back (best effort: the worker drops deltas rather than slow down),
	// all before Dispatch returns the result.
	Deltas svc.DeltaSink
}

// DeltaWait bounds how long Dispatch holds a result back for the deltas
// the worker says it relayed before it (they travel apart, on the
// publisher's events subject) and that have not come yet.
const DeltaWait = 2 * time.Second

// New subscribes to this process's inbox, the worker events and the cancel
// broadcast, and returns a ready publisher.
func New(ctx context.Context, cfg Config) (*Publisher, error) {
	if cfg.Broker == nil {
		return nil, errors.New("dispatch: no broker")
	}
	if cfg.RuntimeID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("dispatch: runtime id: %w", err)
		}
		cfg.RuntimeID = id.String()
	}
	p := &Publisher{cfg: cfg, scheme: cfg.Broker.Scheme(), inbox: fleetwire.ResultSubject(cfg.RuntimeID), log: cfg.Logger,
		em: cfg.Emitter, pending: map[string]*waiter{}, listening: map[string]*waiter{}, workers: map[string]workerInfo{},
		batchers: map[string]*batcher{}, durations: map[string]float64{}}
	if p.log == nil {
		p.log = zap.NewNop()
	}
	if p.em == nil {
		p.em = svc.NopEmitter{}
	}
	if p.cfg.Now == nil {
		p.cfg.Now = time.Now
	}
	if p.cfg.AckWait <= 0 {
		p.cfg.AckWait = svc.DefaultAckWait
	}
	if p.cfg.CancelRetention <= 0 {
		p.cfg.CancelRetention = DefaultCancelRetention
	}
	if p.cfg.MaxBatch == 0 {
		p.cfg.MaxBatch = DefaultMaxBatch
	}
	p.cfg.Health = p.cfg.Health.WithDefaults()
	p.closeCtx, p.stopBg = context.WithCancel(context.Background())
	// Results are small and handled at once: a wide prefetch keeps the
	// inbox from throttling a large gather.
	sub, err := cfg.Broker.Subscribe(ctx, p.inbox, svc.SubscribeOptions{
		Group: svc.DefaultGroup(p.inbox), ConsumerID: cfg.RuntimeID, Prefetch: 1024, MaxDeliver: -1,
	}, p.onResult)
	if err != nil {
		p.stopBg()
		return nil, fmt.Errorf("dispatch: subscribe %s: %w", p.inbox, err)
	}
	p.subs = append(p.subs, sub)
	// The events subject is followed always: a task's deltas come back on
	// it when its run listens, with or without PublishEvents.
	broadcasts := map[string]svc.BroadcastHandler{fleetwire.SubjectWorkers: p.onWorker, fleetwire.SubjectCancel: p.onCancel,
		fleetwire.EventSubject(cfg.RuntimeID): p.onEvents}
	for subject, h := range broadcasts {
		s, err := cfg.Broker.SubscribeBroadcast(ctx, subject, h)
		if err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("dispatch: subscribe %s: %w", subject, err)
		}
		p.mu.Lock()
		p.subs = append(p.subs, s)
		p.mu.Unlock()
	}
	// Ask the fleet for a heartbeat now, so this node knows the workers
	// that started before it without waiting for their next one. Best
	// effort: a lost ping costs that wait.
	if err := cfg.Broker.Broadcast(ctx, fleetwire.SubjectWorkersPing, []byte("{}")); err != nil {
		p.log.Warn("workers not pinged", zap.Error(err))
	}
	return p, nil
}

// RuntimeID is this process's runtime id.
func (p *Publisher) RuntimeID() string { return p.cfg.RuntimeID }

// Backend is what events and results call where the invocations ran:
// "broker:<scheme>".
func (p *Publisher) Backend() string { return "broker:" + p.scheme }

// Duplicates counts results dropped because their task already had one.
func (p *Publisher) Duplicates() int64 { return p.dups.Load() }

// Relayed counts the events workers relayed to this publisher (with
// PublishEvents) that it fed into its emitter.
func (p *Publisher) Relayed() int64 { return p.relayed.Load() }

// onEvents takes a message of relayed events (emitters/bridge's wire
// form), in the order the worker emitted them: a delta tagged with a
// dispatch that listens goes to its listener, and with PublishEvents every
// event goes into the emitter.
func (p *Publisher) onEvents(_ context.Context, _ string, data []byte) {
	evs, err := bridge.Decode(data)
	if err != nil {
		p.log.Warn("relayed events refused", zap.Error(err))
		return
	}
	var fed int64
	for _, ev := range evs {
		if ev.EventType == svc.EventAgentDelta {
			if key, ok := ev.Payload[bridge.DeltaDispatch].(string); ok {
				delete(ev.Payload, bridge.DeltaDispatch) // the event is this message's own, just decoded
				p.delta(key, ev)
			}
		}
		if p.cfg.PublishEvents {
			p.em.Emit(ev)
			fed++
		}
	}
	p.relayed.Add(fed)
}

// delta hands a relayed delta to the dispatch key listens with, if it
// still waits; a delta of a dispatch that ended is dropped.
func (p *Publisher) delta(key string, ev svc.RuntimeEvent) {
	p.mu.Lock()
	w := p.listening[key]
	p.mu.Unlock()
	if w == nil {
		return
	}
	text, _ := ev.Payload["text"].(string)
	var index int
	if n, ok := ev.Payload["index"].(float64); ok {
		index = int(n)
	}
	w.deltas.Delta(svc.Delta{Agent: ev.AgentName, TaskID: ev.TaskID, TraceID: ev.TraceID, SpanID: ev.SpanID,
		ParentTraceID: ev.ParentTraceID, ParentSpanID: ev.ParentSpanID, Index: index, Text: text})
	w.got.Add(1)
	select {
	case w.arrived <- struct{}{}:
	default:
	}
}

// Dispatch publishes the task and waits for its result or for ctx to end.
// A result is returned as it came (Success false for a failure inside the
// run); errors are the broker's (the task was not published: a permanent
// failure, or a transient one that outlasted the retries) or ctx's.
func (p *Publisher) Dispatch(ctx context.Context, req Request) (svc.AgentResult, error) {
	// A result is matched by span and dispatch number: a late result of an
	// earlier dispatch of the same invocation (a retry) is not taken for
	// this one.
	span := req.SpanID
	if span == "" {
		span = newID()
	}
	n := int(p.seq.Add(1))
	key := dispatchKey(span, n)
	env := fleetwire.Envelope{Kind: fleetwire.MsgTask, TaskID: req.TaskID, RunID: req.RunID, TraceID: req.TraceID,
		ParentTraceID: req.ParentTraceID, SpanID: span, Agent: req.Agent, Input: req.Input, Metadata: req.Metadata,
		Depth: req.Depth, TokenBudget: req.TokenBudget, ReplyTo: p.inbox, PublishEvents: p.cfg.PublishEvents, Attempt: n,
		Deltas: req.Deltas != nil}
	if req.EventsTo != "" {
		env.PublishEvents, env.RelayTo = true, req.EventsTo
	}
	env.SetDeadline(req.Deadline)
	subject := fleetwire.TaskSubject(req.Agent)
	// Tasks go out together when the agent's workers take batches; the
	// single envelope otherwise, encoded (and checked) here either way.
	var (
		data []byte
		err  error
		q    *queued
	)
	if p.batchLimit(req.Agent) > 1 {
		q = &queued{env: &env, done: make(chan error, 1)}
		q.item, err = fleetwire.EncodeItem(fleetwire.MsgTasks, &env)
	} else {
		data, err = p.encode(&env)
	}
	if err != nil {
		return svc.AgentResult{}, &svc.Error{Kind: svc.KindSpecValidation, Agent: req.Agent, TaskID: req.TaskID,
			Message: "dispatch: " + err.Error(), Err: err}
	}
	w := &waiter{ch: make(chan result, 1)}
	if req.Deltas != nil {
		w.deltas, w.arrived = req.Deltas, make(chan struct{}, 1)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return svc.AgentResult{}, svc.Errorf(svc.KindShuttingDown, "dispatch: publisher closed")
	}
	p.pending[key] = w
	if w.deltas != nil {
		p.listening[key] = w
		defer func() {
			p.mu.Lock()
			delete(p.listening, key)
			p.mu.Unlock()
		}()
	}
	p.mu.Unlock()
	if q != nil {
		err = p.enqueue(ctx, subject, req.Agent, q)
	} else {
		err = p.publish(ctx, subject, data)
	}
	if err != nil {
		p.forget(key)
		if ctx.Err() != nil {
			// The broker may have delivered the task before the call
			// ended (RabbitMQ delivers before it confirms): a worker
			// may be running it. A task withdrawn from its batch before
			// the batch went out reached no one.
			if !errors.Is(err, errWithdrawn) {
				p.cancelDispatch(req.RunID, req.TaskID, span, n)
			}
			return svc.AgentResult{}, ctx.Err()
		}
		return svc.AgentResult{}, &svc.Error{Kind: svc.KindRuntime, Agent: req.Agent, TaskID: req.TaskID, Reason: "broker",
			Message: fmt.Sprintf("agent %s: dispatch to %s failed: %v", req.Agent, p.scheme, err), Err: err}
	}
	p.em.Emit(svc.RuntimeEvent{EventType: svc.EventAgentDispatched, Timestamp: time.Now().UTC(), AgentName: req.Agent,
		TaskID: req.TaskID, TraceID: req.TraceID, ParentTraceID: req.ParentTraceID, SpanID: req.SpanID, ParentSpanID: req.ParentSpanID,
		Payload: svc.Payload{"backend": p.Backend(), "broker": p.scheme, "trust_level": string(req.TrustLevel)}})
	select {
	case r := <-w.ch:
		if w.deltas != nil && w.got.Load() < int64(r.deltas) {
			awaitDeltas(ctx, w, r.deltas)
		}
		return r.res, nil
	case <-ctx.Done():
		p.forget(key)
		p.cancelDispatch(req.RunID, req.TaskID, span, n)
		err := context.Cause(ctx)
		if errors.Is(err, context.DeadlineExceeded) && !p.served(req.Agent) {
			return svc.AgentResult{}, &svc.Error{Kind: svc.KindTimeout, Agent: req.Agent, TaskID: req.TaskID, Reason: "timeout", Err: err,
				Message: fmt.Sprintf("agent %s: no result before the deadline, and no worker of the fleet announced it serves %s (start one with: svc worker start --agents %s)", req.Agent, req.Agent, req.Agent)}
		}
		if end := ctx.Err(); !errors.Is(err, end) {
			// The cause alone ("run cancelled by request") has no kind:
			// keep the context's end beside it, which says it was a
			// cancellation (or deadline), as a local run's error does.
			err = fmt.Errorf("%w: %w", end, err)
		}
		return svc.AgentResult{}, err
	}
}

// awaitDeltas waits, at most DeltaWait and within ctx, until w has the
// want deltas the worker relayed before its result, so that a listener
// gets the whole text before the result.
func awaitDeltas(ctx context.Context, w *waiter, want int) {
	t := time.NewTimer(DeltaWait)
	defer t.Stop()
	for w.got.Load() < int64(want) {
		select {
		case <-w.arrived:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// publishAttempts bounds how many times publish tries a task whose publish
// failed transiently.
const publishAttempts = 4

// publish publishes a task, trying again (with backoff, within ctx) while
// the broker says its failure is transient: a connection that drops for a
// moment, a server failing over, costs a retry rather than the
// invocation. A permanent failure (closed broker, too large a task) and an
// unclassified one are returned at once. A task published twice because an
// accepted publish was reported lost runs twice at most: delivery is at
// least once anyway, and the publisher takes one result per dispatch.
func (p *Publisher) publish(ctx context.Context, subject string, data []byte) error {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := p.cfg.Broker.Publish(ctx, subject, data)
		if err == nil || attempt == publishAttempts || !svc.IsTransientBrokerError(err) || ctx.Err() != nil {
			return err
		}
		p.log.Warn("task publish failed; trying again", zap.String("subject", subject), zap.Int("attempt", attempt), zap.Error(err))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

func (p *Publisher) encode(env *fleetwire.Envelope) ([]byte, error) {
	if len(p.cfg.SignKey) > 0 {
		if err := env.Sign(p.cfg.SignKeyID, p.cfg.SignKey); err != nil {
			return nil, err
		}
	}
	return env.Encode()
}

func (p *Publisher) forget(key string) {
	p.mu.Lock()
	delete(p.pending, key)
	p.mu.Unlock()
}

// onResult hands a result to its waiter. A result nobody waits for (a
// duplicate, or one that came after its deadline) is dropped. Every result
// is acked: redelivering it would not find a waiter either.
func (p *Publisher) onResult(ctx context.Context, d *svc.Delivery) {
	defer func() { _ = d.Ack(context.WithoutCancel(ctx)) }()
	if fleetwire.IsBatch(d.Data) {
		p.onResults(d)
		return
	}
	env, err := fleetwire.Decode(d.Data)
	if err == nil && env.Kind != fleetwire.MsgResult {
		err = fmt.Errorf("envelope: kind %q in the inbox", env.Kind)
	}
	if err == nil && len(p.cfg.Keys) > 0 {
		err = env.Verify(p.cfg.Keys)
	}
	if err != nil {
		p.log.Warn("result refused", zap.String("message_id", d.ID), zap.Error(err))
		return
	}
	p.deliver(env)
}

// onResults hands each result of a batch to its waiter, as onResult does
// one; a batch whose signature fails is refused whole.
func (p *Publisher) onResults(d *svc.Delivery) {
	b, err := fleetwire.DecodeBatch(d.Data)
	if err == nil && b.Kind != fleetwire.MsgResults {
		err = fmt.Errorf("batch: kind %q in the inbox", b.Kind)
	}
	if err == nil && len(p.cfg.Keys) > 0 {
		err = b.Verify(p.cfg.Keys)
	}
	var envs []fleetwire.Envelope
	if err == nil {
		envs, err = b.Envelopes()
	}
	if err != nil {
		p.log.Warn("results refused", zap.String("message_id", d.ID), zap.Error(err))
		return
	}
	for i := range envs {
		p.deliver(&envs[i])
	}
}

// deliver hands a verified result to its waiter, or counts it as a
// duplicate.
func (p *Publisher) deliver(env *fleetwire.Envelope) {
	key := dispatchKey(env.SpanID, env.Attempt)
	p.mu.Lock()
	w, ok := p.pending[key]
	delete(p.pending, key)
	p.noteDuration(env.Agent, env.Result.Metadata.DurationMS)
	p.mu.Unlock()
	if !ok {
		p.dups.Add(1)
		return
	}
	if env.Delivery > 1 {
		p.noteRedelivery(env)
	}
	w.ch <- result{res: *env.Result, deltas: env.DeltaCount}
}

// Redeliveries is how many results answered tasks the broker had delivered
// more than once (their first worker died or stalled with them). It
// implements svc.RedeliveryCounter.
func (p *Publisher) Redeliveries() int64 { return p.redelivered.Load() }

// noteRedelivery counts the result of a redelivered task and logs why it
// came late: the tasks a dead worker held come back together once the ack
// wait has passed, so one line per ack wait tells of the whole batch, and
// the rest are counted.
func (p *Publisher) noteRedelivery(env *fleetwire.Envelope) {
	p.redelivered.Add(1)
	now := p.cfg.Now()
	p.mu.Lock()
	if !p.redelivery.IsZero() && now.Sub(p.redelivery) < p.cfg.AckWait {
		p.mu.Unlock()
		return
	}
	p.redelivery = now
	// The worker that lost the tasks is one that stopped or went silent
	// for longer than the ack wait: a live worker keeps extending the
	// deadline of the tasks it runs.
	var lost []string
	silent := false // a worker went silent, not only stopped
	for id, w := range p.workers {
		switch {
		case id == env.RuntimeID:
		case w.stopped:
			lost = append(lost, id+" (stopped)")
		case now.Sub(w.seen) >= p.cfg.AckWait:
			quiet := now.Sub(w.seen)
			if quiet >= 10*time.Second {
				quiet = quiet.Round(time.Second) // sub-second digits only for short ack waits
			} else {
				quiet = quiet.Round(100 * time.Millisecond)
			}
			lost = append(lost, fmt.Sprintf("%s (no heartbeat for %s)", id, quiet))
			silent = true
		}
	}
	p.mu.Unlock()
	slices.Sort(lost)
	why := "the worker that had them did not settle them within the broker's ack wait: it died or stalled"
	if len(lost) > 0 && !silent {
		why = "the worker that had them stopped before finishing them and handed them back"
	}
	if len(lost) == 0 {
		lost = []string{"unknown (no worker of the fleet has gone silent)"}
	}
	p.log.Warn("tasks redelivered: another worker ran them after the ack wait (svc serve --ack-wait; further redeliveries within it are only counted in /runtime/stats redeliveries)",
		zap.String("agent", env.Agent), zap.String("task_id", env.TaskID), zap.Int("delivery", env.Delivery),
		zap.String("ran_on", env.RuntimeID), zap.Strings("lost_by", lost), zap.String("why", why),
		zap.Duration("ack_wait", p.cfg.AckWait), zap.Int64("redeliveries", p.redelivered.Load()))
}

// Cancel broadcasts a cancel: of one task when taskID is set, else of every
// task of the run, on every worker and serve node. A whole-run cancel is
// also recorded on the broker (when it is a svc.Retainer) for
// CancelRetention, first, so a worker that starts or reconnects later still
// refuses the run's tasks left in the queue. It does not wait.
func (p *Publisher) Cancel(runID, taskID string) { p.cancelDispatch(runID, taskID, "", 0) }

// cancelDispatch is Cancel naming, for a task cancel, the dispatch (span
// and attempt) too: a worker that holds that dispatch without running it
// yet (in a batch, waiting for a slot) answers it cancelled instead of
// running it; a worker of an earlier release ignores the two fields.
func (p *Publisher) cancelDispatch(runID, taskID, span string, attempt int) {
	if runID == "" {
		return
	}
	env := fleetwire.Envelope{Kind: fleetwire.MsgCancel, RunID: runID, TaskID: taskID, RuntimeID: p.cfg.RuntimeID}
	if taskID != "" {
		env.SpanID, env.Attempt = span, attempt
	}
	data, err := p.encode(&env)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.bg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.bg.Done()
		// A lost cancel leaves a task running on a worker until its own
		// deadline, so a broker that is slow to confirm (RabbitMQ under
		// load) or briefly away gets retries for up to 30 s, each attempt
		// bounded, rather than one 5 s try; Close still ends it at once.
		ctx, cancel := context.WithTimeout(p.closeCtx, 30*time.Second)
		defer cancel()
		if r, ok := p.cfg.Broker.(svc.Retainer); ok && taskID == "" {
			// Recorded before the broadcast: a worker that hears the
			// broadcast already runs nothing of the run, and one that
			// missed it finds the record. Failing to record leaves the
			// broadcast, the best left to do; a slow record must not hold
			// the broadcast back long, so it gets a few seconds.
			rctx, rcancel := context.WithTimeout(ctx, retainTimeout)
			err := retry(rctx, func(actx context.Context) error {
				return r.Retain(actx, fleetwire.CancelledRunKey(runID), p.cfg.CancelRetention)
			})
			rcancel()
			if err != nil {
				p.log.Warn("cancel not recorded on the broker: a worker that starts later may run the run's queued tasks",
					zap.String("run_id", runID), zap.Error(err))
			}
		}
		if err := retry(ctx, func(actx context.Context) error {
			return p.cfg.Broker.Broadcast(actx, fleetwire.SubjectCancel, data)
		}); err != nil {
			p.log.Warn("cancel not broadcast", zap.String("run_id", runID), zap.Error(err))
		}
	}()
}

// retry calls op, each call bounded to 10 s, until it succeeds, fails
// permanently (a closed broker: trying again cannot help) or ctx ends; it
// returns op's last error then.
func retry(ctx context.Context, op func(context.Context) error) error {
	backoff := 100 * time.Millisecond
	for {
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		err := op(actx)
		acancel()
		if err == nil || svc.IsPermanentBrokerError(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// onCancel passes a whole-run cancel from another process to OnCancel.
func (p *Publisher) onCancel(_ context.Context, _ string, data []byte) {
	env, err := fleetwire.Decode(data)
	if err != nil || env.Kind != fleetwire.MsgCancel || env.TaskID != "" || env.RuntimeID == p.cfg.RuntimeID {
		return
	}
	if len(p.cfg.Keys) > 0 && env.Verify(p.cfg.Keys) != nil {
		return
	}
	if p.cfg.OnCancel != nil {
		p.cfg.OnCancel(env.RunID)
	}
}

// onWorker records a worker event (for served) and passes it to the
// emitter, so /runtime/stats shows the fleet's health.
func (p *Publisher) onWorker(_ context.Context, _ string, data []byte) {
	var ev svc.RuntimeEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return
	}
	id, _ := ev.Payload["runtime_id"].(string)
	if id == "" {
		return
	}
	var agents []string
	for _, k := range []string{"agents", "agent_subscriptions"} {
		if list, ok := ev.Payload[k].([]any); ok {
			for _, a := range list {
				if s, ok := a.(string); ok {
					agents = append(agents, s)
				}
			}
		}
	}
	switch ev.EventType {
	case svc.EventWorkerStarted, svc.EventWorkerHeartbeat, svc.EventWorkerStopped:
	default:
		return
	}
	p.mu.Lock()
	// A field an event does not carry keeps what an earlier one said
	// (worker_stopped has no in_flight, worker_started no in_flight).
	w := p.workers[id]
	w.seen, w.stopped = p.cfg.Now(), ev.EventType == svc.EventWorkerStopped
	if agents != nil {
		w.agents = agents
	}
	if s, ok := ev.Payload["broker_scheme"].(string); ok {
		w.scheme = s
	}
	for key, dst := range map[string]*int64{"concurrency": &w.concurrency, "concurrency_cap": &w.concurrency, "in_flight": &w.inFlight} {
		if n, ok := ev.Payload[key].(float64); ok {
			*dst = int64(n)
		}
	}
	if n, ok := ev.Payload["heartbeat_seconds"].(float64); ok {
		w.period = n
	}
	if b, ok := ev.Payload[fleetwire.BatchesPayloadKey].(bool); ok {
		w.batches = b
	}
	if w.stopped {
		w.inFlight = 0
	}
	p.workers[id] = w
	p.mu.Unlock()
	p.em.Emit(ev)
}

// Workers is the fleet as this node heard it on svc.workers since it
// started: every worker that announced itself, with its health by
// Config.Health (healthy, stale, down; down at once after worker_stopped),
// its agents, in_flight and concurrency cap, sorted by runtime id. It
// implements svc.FleetReader.
func (p *Publisher) Workers(context.Context) ([]svc.WorkerStatus, error) {
	now := p.cfg.Now()
	p.mu.Lock()
	out := make([]svc.WorkerStatus, 0, len(p.workers))
	for id, w := range p.workers {
		agents := slices.Clone(w.agents)
		if agents == nil {
			agents = []string{}
		}
		out = append(out, svc.WorkerStatus{RuntimeID: id, Status: p.cfg.Health.Status(w.seen, w.stopped, now),
			LastHeartbeat: w.seen.UTC(), InFlight: w.inFlight, Concurrency: w.concurrency, HeartbeatSeconds: w.period, Agents: agents,
			BrokerScheme: w.scheme, Stopped: w.stopped})
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b svc.WorkerStatus) int { return strings.Compare(a.RuntimeID, b.RuntimeID) })
	return out, nil
}

// served reports whether some live worker announced it serves agent.
func (p *Publisher) served(agent string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.workers {
		if p.cfg.Health.Status(w.seen, w.stopped, p.cfg.Now()) != svc.WorkerDown && slices.Contains(w.agents, agent) {
			return true
		}
	}
	return false
}

// Close stops the subscriptions; calls waiting in Dispatch end with their
// contexts. Idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	subs := p.subs
	p.mu.Unlock()
	var errs []error
	for _, s := range subs {
		if err := s.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	p.stopBg()
	p.bg.Wait()
	return errors.Join(errs...)
}

func dispatchKey(span string, n int) string { return fleetwire.DispatchKey(span, n) }

func newID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}
