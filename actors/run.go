// Package actors holds the runtime's actors and their messages: the run
// shards that supervise runs, one run actor per run (a single task or a
// gather batch), and one invocation actor per agent invocation. Slow work
// never runs in Receive: an invocation starts a goroutine for the agent loop,
// which reports back by message.
//
// What is here only to make runs cheaper (the goroutine pool, the mailbox
// dispatcher, the invocations' mailbox, the invocation's cancel state) is
// in internal/lean, which says what each buys. Package actors/plain does
// what this package does, for Run and Gather, in plain goroutines: read it
// first.
package actors

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
	"unsafe"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/internal/lean"
	"github.com/svc-dev/svc/ratelimit"
)

// Env is what every actor of one runtime shares.
type Env struct {
	Emitter svc.Emitter
	// Silent is true when Emitter drops everything, so the hot path can skip
	// building events nobody receives.
	Silent  bool
	Options svc.Options
	// Work tracks the goroutines that run agent loops, so Shutdown can wait
	// for them.
	Work *sync.WaitGroup
	// Pool runs the agent loops (only them: Dispatcher runs the mailboxes).
	Pool *lean.Pool
	// Dispatcher is given to every actor this package spawns.
	Dispatcher actor.Dispatcher
	// Stuck counts the attempts runs stopped waiting for (nil: not
	// counted). AbandonAfter is how long a run waits for an invocation
	// whose context it ended before it stops waiting
	// (DefaultAbandonAfter when 0); a shutdown does not wait.
	Stuck        *Stuck
	AbandonAfter time.Duration

	// Execute runs one attempt of an invocation and returns its outcome;
	// nil means the local agent loop (agent.Run). It is the seam of the
	// distributed mode: a publisher sets it to "send the invocation to the
	// broker and wait for its result", and the actors stay as they are:
	// the invocation actor still owns retries, the run actor the deadline
	// and cancellation (through ctx), and events and results come out the
	// same. It is called on a pooled goroutine, never in Receive, and
	// must honour ctx.
	Execute func(ctx context.Context, inv *agent.Invocation) (agent.Outcome, error)
	// Backend is where invocations run, as agent_spawned, agent_completed,
	// agent_failed and result metadata report it: svc.BackendLocal when
	// empty, "broker:<scheme>" for a publisher.
	Backend string
	// Remote is set when Execute runs the attempts on other processes
	// (a publisher's workers): agent_spawned is not emitted here, since
	// the worker emits its own and this side emits agent_dispatched (the
	// spec's rule 4: per-agent events fire on the worker).
	Remote bool
	// RemoteIf, when set, says of each invocation whether Execute runs
	// it on another process, as Remote says of all of them: a worker
	// that dispatches only the runs nested in its tasks runs the rest
	// here.
	RemoteIf func(ctx context.Context, inv *agent.Invocation) bool
	// Budget is the runtime's token budget, shared by every run (nil:
	// none).
	Budget *Budget
	// Root is the actor system's root context, which an attempt's
	// goroutine reports to its invocation actor through.
	Root *actor.RootContext

	invPropsOnce sync.Once
	invProps     *actor.Props
}

// remote reports whether Execute runs inv on another process.
func (e *Env) remote(ctx context.Context, inv *agent.Invocation) bool {
	return e.Remote || (e.RemoteIf != nil && e.RemoteIf(ctx, inv))
}

// BackendName is e.Backend, defaulted.
func (e *Env) BackendName() string {
	if e.Backend == "" {
		return svc.BackendLocal
	}
	return e.Backend
}

func (e *Env) props(p actor.Producer) *actor.Props {
	return actor.PropsFromProducer(p, actor.WithDispatcher(e.Dispatcher))
}

// invocationProps is the Props of every invocation actor: one value for
// the whole process, not one per invocation (a Props is about 300 bytes,
// a tenth of what an invocation held). An invocation is spawned blank and
// its state (*invState) comes as its first message; a restarted one gets
// it the same way (see finishAttempt). Its mailbox is lean.NewMailbox's.
func (e *Env) invocationProps() *actor.Props {
	e.invPropsOnce.Do(func() {
		e.invProps = actor.PropsFromProducer(newInvocation, actor.WithDispatcher(e.Dispatcher),
			actor.WithMailbox(lean.NewMailbox))
	})
	return e.invProps
}

// NewSpanID returns a new span id: 16 hex digits of randomness, as an
// OpenTelemetry span id. It is not a UUID on purpose: one is made per
// invocation, and this costs one small allocation.
func NewSpanID() string {
	const hex = "0123456789abcdef"
	var b [16]byte
	n := rand.Uint64()
	for i := range b {
		b[i] = hex[n&15]
		n >>= 4
	}
	return string(b[:])
}

// Task is one prepared task of a run: ids assigned, input checked.
type Task struct {
	ID    string
	Trace string
	Input json.RawMessage
	// Budget, when set, is the task's own token cap (a gather task's),
	// drawn on instead of the run's; Ctx is then the run's context with
	// that cap in its scope, so runs the task's tools start share it
	// (the run actor detaches it from cancellation when it starts the
	// task: it cancels each task itself).
	Budget *Budget
	Ctx    context.Context
	// Priority is the TaskSpec's, for its model calls' turns under rate
	// limits (Normal: the scope's).
	Priority ratelimit.Priority
}

// StartRun asks a shard to start a run. Reply receives exactly one RunReply.
type StartRun struct {
	Ctx   context.Context
	Agent *agent.Compiled
	Tasks []Task
	// MaxConcurrency bounds the invocations in flight (1 for a single run).
	MaxConcurrency int
	// Batch marks a gather: batch_started/batch_completed are emitted under
	// BatchTrace.
	Batch      bool
	BatchTrace string
	Depth      int
	// ParentTrace and ParentSpan are the trace and span of whatever started
	// the run (an invocation's tool, a group run): its invocations carry
	// them as parent_trace_id and parent_span_id. A batch has a span of its
	// own (BatchSpan), which its invocations name as their parent instead.
	ParentTrace string
	ParentSpan  string
	BatchSpan   string
	// Budget is the run's token cap (nil: none); the runtime's budget is
	// Env.Budget.
	Budget *Budget
	// Progress, when set, counts this run's invocations.
	Progress *Progress
	// Sink, when set, receives the run events of this run's invocations
	// (a submitted run's, nested runs included).
	Sink RunSink
	// Deltas, when set, receives the coalesced fragments of the answers of
	// this run's invocations as their models stream them: the DeltaSink of
	// the caller's scope (svc.WithDeltas), read once when the run starts.
	Deltas svc.DeltaSink
	// Reply receives the outcome of a top-level run. A run started by a
	// group actor has none: it reports to its parent with a *RunFinished
	// carrying Tag instead.
	Reply chan<- RunReply
	// Done, set instead of Reply, is called with the outcome on the run
	// actor's goroutine, so that no goroutine waits for the reply (the
	// message API's runs); it must not block.
	Done func(RunReply)
	Tag  string
	// Stream, when set, makes the run a streamed gather: Tasks is empty,
	// the tasks arrive as *StreamTask messages ended by a StreamEnd, and
	// each result goes to Stream.Out as soon as it finishes.
	Stream *Stream

	// env and detached are the run actor's, set when it starts: its
	// invocations reach them through their run (fewer bytes in each
	// invState).
	env      *Env
	detached context.Context
	// emitter is the invocations' emitter: env.Emitter, carrying Deltas
	// when there is one (agent.WithDeltaSink).
	emitter svc.Emitter
}

// Stream is the plumbing of a streamed gather between its caller and its
// run actor. The caller bounds what is outstanding (tasks sent whose
// results it has not taken from Out) to Out's capacity, so the run actor's
// sends to Out never block.
type Stream struct {
	// Out receives each result as it finishes; the run actor closes it
	// when the run is over, after Reply.
	Out chan<- svc.GatherItem
	// Ready receives the run actor's pid, where the tasks go (capacity 1).
	Ready chan<- *actor.PID
	// Stop tells the caller to stop sending tasks: the run was cancelled.
	// It must not block.
	Stop func()
}

// StreamTask is one task of a streamed gather. Err, when set, is why the
// task cannot run (a bad line, an input its agent refuses): it fails at
// once as its own result.
type StreamTask struct {
	Index int
	Task  Task
	Err   error
}

// IgnoreDeadLetterLogging: tasks may still be on their way to a run that
// the runtime's shutdown stopped.
func (*StreamTask) IgnoreDeadLetterLogging() {}

// StreamEnd tells a streamed gather's run actor that no more tasks come.
type StreamEnd struct{}

// IgnoreDeadLetterLogging: as for StreamTask.
func (StreamEnd) IgnoreDeadLetterLogging() {}

// RunFinished is how a run started under a group actor reports.
type RunFinished struct {
	Tag     string
	Results []svc.AgentResult
}

// RunReply is the outcome of a run: one result per task, in task order.
// Err is set only when the run could not finish (the runtime shut down).
type RunReply struct {
	Results []svc.AgentResult
	Err     error
}

// ShutdownRuns tells a shard to cancel every run it supervises.
type ShutdownRuns struct{}

// Shard is a long-lived actor under which run actors live. The runtime keeps
// several and spreads runs over them, so no single parent serialises every
// spawn.
type Shard struct {
	env  *Env
	runs map[*actor.PID]struct{}
}

// NewShard returns the producer of a shard actor.
func NewShard(env *Env) actor.Producer {
	return func() actor.Actor { return &Shard{env: env, runs: map[*actor.PID]struct{}{}} }
}

// Receive implements actor.Actor.
func (s *Shard) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *StartRun:
		r := &runActor{env: s.env, req: m}
		pid := c.Spawn(s.env.props(func() actor.Actor { return r }))
		s.runs[pid] = struct{}{}
	case *StartGroup:
		g := &groupActor{env: s.env, req: m}
		pid := c.Spawn(s.env.props(func() actor.Actor { return g }))
		s.runs[pid] = struct{}{}
	case runEnded:
		delete(s.runs, m.pid)
	case *ShutdownRuns:
		for pid := range s.runs {
			c.Send(pid, cancelRun{cause: svc.ErrShuttingDown})
		}
	}
}

// cancelRun tells a run actor to cancel its in-flight work; cause says why
// (svc.ErrShuttingDown when the runtime stops, the caller's context error
// when the caller went away).
type cancelRun struct{ cause error }

// IgnoreDeadLetterLogging: a cancel can race the run's own end.
func (cancelRun) IgnoreDeadLetterLogging() {}

// timeoutTick wakes a run actor when its oldest invocation may be due.
type timeoutTick struct{}

func (timeoutTick) IgnoreDeadLetterLogging() {}

// runEnded tells a shard that one of its runs has replied and is stopping.
type runEnded struct{ pid *actor.PID }

// runActor supervises the invocations of one run. It is also their
// supervisor strategy: a failed attempt is restarted, which is how retries
// happen.
type runActor struct {
	env *Env
	req *StartRun

	ctx    context.Context
	cancel context.CancelCauseFunc
	// detached is the parent of the invocations' contexts: it carries the
	// run's values but not its cancellation, so creating one registers
	// nothing with the caller's context. The run actor cancels its
	// invocations itself, by message.
	detached  context.Context
	stopWatch func() bool // stops watching the caller's context
	cancelled error       // the cause, once the run was cancelled

	// pending holds the invocations in flight in start order, which is
	// deadline order (they share one timeout). One timer, for the oldest,
	// enforces timeout_seconds for all of them.
	pending []*invState
	head    int
	timer   *time.Timer
	timerAt time.Time
	self    *actor.PID
	root    *actor.RootContext

	// reap holds the invocations whose contexts the run ended, in the
	// order it did, until they report or their grace (reapEntry.at) is
	// over; reapTimer fires for the first.
	reap      []reapEntry
	reapTimer *time.Timer
	reapArmed bool

	// results holds each task's result, in task order, once its
	// invocation finished (nil until then): the results of the tasks in
	// flight take no room. res1 is results' array for a single task.
	results []*svc.AgentResult
	res1    [1]*svc.AgentResult
	next    int // index of the next task to start
	// A streamed gather's tasks waiting for a slot (queue[qhead:]), how
	// many came, and whether the last one has.
	queue    []*StreamTask
	qhead    int
	received int
	unrun    *StreamTask // the task nextTask returned, when it cannot run
	ended    bool
	closed   bool // Stream.Out
	inflight int
	done     int
	ok       int
	replied  bool
}

func (r *runActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		r.ctx, r.cancel = context.WithCancelCause(r.req.Ctx)
		r.detached = context.WithoutCancel(r.ctx)
		r.self, r.root = c.Self(), c.ActorSystem().Root
		r.req.env, r.req.detached = r.env, r.detached
		r.req.emitter = r.env.Emitter
		if r.req.Deltas != nil {
			r.req.emitter = agent.WithDeltaSink(r.env.Emitter, r.req.Deltas)
		}
		ctx, self, root := r.ctx, r.self, r.root
		r.stopWatch = context.AfterFunc(ctx, func() { root.Send(self, cancelRun{cause: context.Cause(ctx)}) })
		if n := len(r.req.Tasks); n == 1 {
			r.results = r.res1[:]
		} else {
			r.results = make([]*svc.AgentResult, n)
		}
		r.req.Progress.Add(len(r.req.Tasks), 0, 0, 0)
		if r.req.Batch {
			if !r.env.Silent && r.req.BatchSpan == "" {
				r.req.BatchSpan = NewSpanID()
			}
			p := svc.Payload{"task_count": len(r.req.Tasks), "max_concurrency": r.req.MaxConcurrency}
			if r.req.Stream != nil {
				p["task_count"], p["streamed"] = -1, true
			}
			r.emitBatch(svc.EventBatchStarted, p)
		}
		if r.req.Stream != nil {
			r.req.Stream.Ready <- r.self
			return
		}
		r.fill(c)
		r.maybeFinish(c)
	case *StreamTask:
		r.received++
		r.req.Progress.Add(1, 0, 0, 0)
		// A task that cannot run waits its turn all the same, so that
		// with max_concurrency 1 the results come in task order.
		r.queue = append(r.queue, m)
		r.fill(c)
		r.maybeFinish(c)
	case StreamEnd:
		r.ended = true
		r.maybeFinish(c)
	case *invState: // an invocation finished: its result is m.out
		m.finished = true
		r.inflight--
		r.done++
		switch _, paused := svc.Paused(m.out.Err); {
		case m.out.Success:
			r.ok++
			r.req.Progress.Add(0, -1, 1, 0)
		case paused:
			// Waiting for a person: neither done nor failed, it shows
			// running while the run waits.
		default:
			r.req.Progress.Add(0, -1, 0, 1)
		}
		if r.req.Stream != nil {
			r.req.Stream.Out <- svc.GatherItem{Index: m.index, Result: *m.out}
		} else {
			r.results[m.index] = m.out
		}
		m.out = nil
		r.fill(c)
		r.arm()
		r.maybeFinish(c)
	case timeoutTick:
		r.expire()
	case cancelRun:
		r.cancelAll(c, m.cause)
	case reapTick:
		r.reapArmed = false
		r.reapDue(c)
	case *actor.Stopping:
		if r.cancel != nil {
			r.cancelAll(nil, svc.ErrShuttingDown)
			r.stopTimer()
		}
		if !r.replied && r.topLevel() {
			r.replied = true
			r.answer(RunReply{Err: svc.Errorf(svc.KindShuttingDown, "runtime is shutting down")})
		}
		r.closeOut()
	}
}

// failUnrun answers a streamed task that cannot run with its error.
func (r *runActor) failUnrun(m *StreamTask) {
	r.done++
	r.req.Progress.Add(0, 0, 0, 1)
	res := svc.AgentResult{AgentName: r.req.Agent.Def.Name, TaskID: m.Task.ID, Err: m.Err,
		Metadata: svc.ResultMetadata{TraceID: m.Task.Trace, Backend: r.env.BackendName()}}
	r.req.Stream.Out <- svc.GatherItem{Index: m.Index, Result: res}
}

// closeOut closes a streamed gather's Out, once.
func (r *runActor) closeOut() {
	if r.req.Stream != nil && !r.closed {
		r.closed = true
		close(r.req.Stream.Out)
	}
}

// nextTask returns the next task to start and its index, or false when
// none waits.
func (r *runActor) nextTask() (*Task, int, bool) {
	if r.req.Stream == nil {
		if r.next >= len(r.req.Tasks) {
			return nil, 0, false
		}
		i := r.next
		r.next++
		return &r.req.Tasks[i], i, true
	}
	if r.qhead == len(r.queue) {
		return nil, 0, false
	}
	m := r.queue[r.qhead]
	r.queue[r.qhead] = nil
	r.qhead++
	if m.Err != nil {
		r.unrun = m // fill answers it instead of starting it
	}
	if r.qhead == len(r.queue) {
		r.queue, r.qhead = r.queue[:0], 0
	} else if r.qhead > 64 && r.qhead*2 > len(r.queue) {
		n := copy(r.queue, r.queue[r.qhead:])
		clear(r.queue[n:])
		r.queue, r.qhead = r.queue[:n], 0
	}
	return &m.Task, m.Index, true
}

// fill starts invocations until the concurrency bound is reached.
func (r *runActor) fill(c actor.Context) {
	for r.inflight < r.req.MaxConcurrency {
		task, index, ok := r.nextTask()
		if !ok {
			break
		}
		if r.req.Stream != nil && r.unrun != nil {
			r.failUnrun(r.unrun)
			r.unrun = nil
			continue
		}
		if task.Ctx != nil {
			// The run actor cancels each task itself (cancelAll), so the
			// task's context is detached from cancellation like the run's.
			task.Ctx = context.WithoutCancel(task.Ctx)
		}
		st := &invState{run: r.req, task: task, index: index, start: sinceEpoch()}
		if r.cancelled != nil {
			st.cancel(r.cancelled) // the run is over; this task fails at once
		}
		r.pending = append(r.pending, st)
		st.pid = c.Spawn(r.env.invocationProps())
		c.Send(st.pid, st)
		r.inflight++
		r.req.Progress.Add(0, 1, 0, 0)
	}
	r.arm()
}

// arm drops finished invocations from the front of pending and makes sure
// the timer fires no later than the oldest one's deadline.
func (r *runActor) arm() {
	for r.head < len(r.pending) && r.pending[r.head].finished {
		r.pending[r.head] = nil
		r.head++
	}
	if r.head > 64 && r.head*2 > len(r.pending) {
		n := copy(r.pending, r.pending[r.head:])
		clear(r.pending[n:])
		r.pending, r.head = r.pending[:n], 0
	}
	if r.head == len(r.pending) {
		return
	}
	due := r.pending[r.head].deadline()
	if r.timer != nil && !r.timerAt.IsZero() && !r.timerAt.After(due) {
		return // it fires early enough; expire re-arms for what remains
	}
	r.timerAt = due
	if r.timer == nil {
		self, root := r.self, r.root
		r.timer = time.AfterFunc(time.Until(due), func() { root.Send(self, timeoutTick{}) })
		return
	}
	r.timer.Reset(time.Until(due))
}

// expire cancels every invocation past its deadline, with
// context.DeadlineExceeded as the cause, then re-arms the timer.
func (r *runActor) expire() {
	r.timerAt = time.Time{}
	now := time.Now()
	for r.head < len(r.pending) {
		st := r.pending[r.head]
		if !st.finished {
			if st.deadline().After(now) {
				break
			}
			st.cancel(context.DeadlineExceeded)
			r.watch(st, now)
		}
		r.pending[r.head] = nil
		r.head++
	}
	r.arm()
	r.armReap()
}

// reapEntry is an invocation whose context the run ended, and when the
// run stops waiting for it.
type reapEntry struct {
	st *invState
	at time.Time
}

// watch starts st's grace: if it has not reported by then, the run stops
// waiting for it (reapDue).
func (r *runActor) watch(st *invState, now time.Time) {
	r.reap = append(r.reap, reapEntry{st: st, at: now.Add(r.env.abandonAfter())})
}

func (e *Env) abandonAfter() time.Duration {
	if e.AbandonAfter > 0 {
		return e.AbandonAfter
	}
	return DefaultAbandonAfter
}

// armReap makes sure the reap timer fires for the earliest grace of the
// invocations watched, if any.
func (r *runActor) armReap() {
	if r.reapArmed || len(r.reap) == 0 {
		return
	}
	first := r.reap[0].at
	for _, e := range r.reap[1:] {
		if e.at.Before(first) {
			first = e.at
		}
	}
	r.reapArmed = true
	d := time.Until(first)
	if r.reapTimer == nil {
		self, root := r.self, r.root
		r.reapTimer = time.AfterFunc(d, func() { root.Send(self, reapTick{}) })
		return
	}
	r.reapTimer.Reset(d)
}

// reapDue abandons the attempts of the watched invocations whose grace is
// over and that have not reported, and re-arms for the rest. The
// invocation actor decides, against its attempt's own report, which wins.
func (r *runActor) reapDue(c actor.Context) {
	now := time.Now()
	keep := r.reap[:0]
	for _, e := range r.reap {
		switch {
		case e.st.finished:
		case e.at.After(now):
			keep = append(keep, e)
		default:
			c.Send(e.st.pid, abandonAttempt{})
		}
	}
	clear(r.reap[len(keep):])
	r.reap = keep
	r.armReap()
}

// cancelAll cancels the run and every invocation in flight with cause.
// Those that do not report within their grace are abandoned; at once when
// the runtime shuts down, whose own grace is over by then.
func (r *runActor) cancelAll(c actor.Context, cause error) {
	if r.cancelled != nil {
		return
	}
	if cause == nil {
		cause = context.Canceled
	}
	r.cancelled = cause
	r.cancel(cause)
	if r.req.Stream != nil {
		r.req.Stream.Stop() // no more tasks: those on their way fail at once
	}
	now := time.Now()
	if errors.Is(cause, svc.ErrShuttingDown) {
		now = now.Add(-r.env.abandonAfter())
	}
	for _, st := range r.pending[r.head:] {
		if !st.finished {
			st.cancel(cause)
			r.watch(st, now)
		}
	}
	if c != nil && errors.Is(cause, svc.ErrShuttingDown) {
		r.reapDue(c)
		return
	}
	r.armReap()
}

func (r *runActor) stopTimer() {
	if r.timer != nil {
		r.timer.Stop()
	}
	if r.reapTimer != nil {
		r.reapTimer.Stop()
	}
	if r.stopWatch != nil {
		r.stopWatch()
	}
}

func (r *runActor) maybeFinish(c actor.Context) {
	total := len(r.req.Tasks)
	if r.req.Stream != nil {
		if !r.ended {
			return
		}
		total = r.received
	}
	if r.done < total || r.replied {
		return
	}
	if r.req.Batch {
		r.emitBatch(svc.EventBatchCompleted, svc.Payload{
			"task_count": total, "success_count": r.ok, "failure_count": r.done - r.ok,
		})
	}
	r.replied = true
	r.stopTimer()
	r.cancel(nil)
	results := r.collect()
	if r.topLevel() {
		r.answer(RunReply{Results: results})
		r.closeOut()
		c.Send(c.Parent(), runEnded{c.Self()})
	} else {
		c.Send(c.Parent(), &RunFinished{Tag: r.req.Tag, Results: results})
	}
	c.Stop(c.Self())
}

// collect gathers the results, in task order, into the slice the run
// answers with (none for a streamed gather, whose results went to
// Stream.Out). A single task's result is the slice's one element as it
// is, not a copy.
func (r *runActor) collect() []svc.AgentResult {
	if r.req.Stream != nil {
		return []svc.AgentResult{}
	}
	if len(r.results) == 1 && r.results[0] != nil {
		return unsafe.Slice(r.results[0], 1)
	}
	out := make([]svc.AgentResult, len(r.results))
	for i, p := range r.results {
		if p != nil {
			out[i] = *p
			r.results[i] = nil
		}
	}
	return out
}

// topLevel: the run answers its caller (Reply or Done), not a group actor.
func (r *runActor) topLevel() bool { return r.req.Reply != nil || r.req.Done != nil }

// answer gives a top-level run's outcome to its caller.
func (r *runActor) answer(rr RunReply) {
	if r.req.Done != nil {
		r.req.Done(rr)
		return
	}
	r.req.Reply <- rr
}

func (r *runActor) emitBatch(t svc.EventType, p svc.Payload) {
	r.env.Emitter.Emit(svc.RuntimeEvent{
		EventType: t, Timestamp: time.Now().UTC(), AgentName: r.req.Agent.Def.Name,
		TraceID: r.req.BatchTrace, ParentTraceID: r.req.ParentTrace,
		SpanID: r.req.BatchSpan, ParentSpanID: r.req.ParentSpan, Payload: p,
	})
}

// HandleFailure makes the run actor the supervisor strategy of its
// invocations. An invocation fails on purpose (a *retry) when an attempt
// failed and attempts remain: restarting it runs the next attempt. Anything
// else that escapes an invocation stops it; the invocation reports its own
// result before that can happen, so the run still completes.
func (r *runActor) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, _ any) {
	// Restart even when the run was cancelled meanwhile: the new attempt sees
	// the cancelled context at once and reports its failure, so the run
	// never waits on a child that went quiet.
	if _, ok := reason.(*retry); ok {
		sup.RestartChildren(child)
		return
	}
	sup.StopChildren(child)
}

var _ actor.SupervisorStrategy = (*runActor)(nil)
