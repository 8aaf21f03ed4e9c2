package svc

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RunState is the coarse lifecycle state of a submitted run:
//
//	pending → running → completed | failed | cancelled
//	pending → cancelled
//	running → waiting → running | failed | cancelled
//
// waiting is a state beyond the spec's five (issue 31): the run paused for
// a person's approval or answer (WaitRequest), and holds no goroutine or
// actor until POST /runs/{id}/resume answers it.
//
// Terminal states are final: every RunStore refuses to leave them.
type RunState string

// Run states.
const (
	RunPending   RunState = "pending"
	RunRunning   RunState = "running"
	RunCompleted RunState = "completed"
	RunFailed    RunState = "failed"
	RunCancelled RunState = "cancelled"
	RunWaiting   RunState = "waiting"
)

// Terminal reports whether s is final.
func (s RunState) Terminal() bool {
	return s == RunCompleted || s == RunFailed || s == RunCancelled
}

// Valid reports whether s is one of the six states.
func (s RunState) Valid() bool {
	switch s {
	case RunPending, RunRunning, RunCompleted, RunFailed, RunCancelled, RunWaiting:
		return true
	}
	return false
}

// CanMove reports whether a run may go from s to next.
func (s RunState) CanMove(next RunState) bool {
	switch s {
	case RunPending:
		return next == RunRunning || next == RunCancelled
	case RunRunning:
		return next == RunCompleted || next == RunFailed || next == RunCancelled || next == RunWaiting
	case RunWaiting:
		return next == RunRunning || next == RunFailed || next == RunCancelled
	}
	return false
}

// RunEventType is the type of a RunEvent.
type RunEventType string

// Run event types.
const (
	RunAgentStarted   RunEventType = "agent_started"
	RunAgentCompleted RunEventType = "agent_completed"
	RunAgentFailed    RunEventType = "agent_failed"
	RunGroupCompleted RunEventType = "group_completed"
	RunRunCancelled   RunEventType = "run_cancelled"
	// RunRunFailed is a run-level terminal event that the spec's list does
	// not have: the run failed outside its agents, so no agent_failed tells
	// the story (a run Interrupt found unfinished after its process died).
	// Agent and TaskID are null; Error carries the reason.
	RunRunFailed RunEventType = "run_failed"
	// RunRunResumed is the event a resumed run's history goes on with: a
	// new process took the run over from the one that died, and replays
	// the steps it recorded (RunStatus.Resumed counts them). Agent and
	// TaskID are null.
	RunRunResumed RunEventType = "run_resumed"
	// RunRunWaiting says the run paused for a person (issue 31): Request
	// is what it waits for; Agent and TaskID name the invocation. The
	// stream stays open: the run goes on (run_resumed) once answered.
	RunRunWaiting RunEventType = "run_waiting"
)

// ReasonInterrupted is the Reason of a run that RunStore.Interrupt failed:
// the process that ran it stopped before the run ended.
const ReasonInterrupted = "interrupted"

// InterruptedResult is the failed AgentResult that Interrupt stores for a
// run the dead process left unfinished: success false, error
// {type: AgentRuntimeError, reason: interrupted}. The record does not keep
// the task id, so task_id is empty.
func InterruptedResult(target string) json.RawMessage {
	b, _ := json.Marshal(AgentResult{AgentName: target, Error: &ErrorInfo{Type: string(KindRuntime),
		Message: "run interrupted: the process running it stopped before it ended", Reason: ReasonInterrupted}})
	return b
}

// NodeLostResult is the InterruptedResult of a run whose owner, another
// node sharing the store, stopped renewing its lease (it was killed or cut
// off): the message names the node, so an operator knows where to look.
func NodeLostResult(target, node string) json.RawMessage {
	b, _ := json.Marshal(AgentResult{AgentName: target, Error: &ErrorInfo{Type: string(KindRuntime),
		Message: "run interrupted: node " + node + " running it stopped (its lease in the run store expired) before it ended",
		Reason:  ReasonInterrupted}})
	return b
}

// InterruptedEvent is the terminal run_failed event Interrupt appends.
func InterruptedEvent(at time.Time) RunEvent {
	return RunEvent{Type: RunRunFailed, Error: ReasonInterrupted, Timestamp: at}
}

// InterruptedProgress is the progress Interrupt stores: what was running
// failed with the run, so nothing shows as running. Nil (no update was
// ever made) stays nil.
func InterruptedProgress(p *RunProgress) *RunProgress {
	if p == nil {
		return nil
	}
	q := *p
	q.Failed += q.Running
	q.Running = 0
	return &q
}

// Final reports whether an event of type t ends a run's stream: a group's
// completion, a cancel or a run-level failure. (A single agent's run ends
// with its agent_completed or agent_failed, which a group's nodes send
// too; the stream's end tells them apart.)
func (t RunEventType) Final() bool {
	switch t {
	case RunGroupCompleted, RunRunCancelled, RunRunFailed:
		return true
	}
	return false
}

// RunEvent is one frame of a run's event stream (GET /runs/{id}/stream).
// Seq numbers a run's events from 1 in the order the store took them; it is
// the SSE frame id.
type RunEvent struct {
	Seq       int64        `json:"seq"`
	Type      RunEventType `json:"type"`
	RunID     string       `json:"run_id"`
	Agent     string       `json:"agent"`   // "" (null) for run-level events
	TaskID    string       `json:"task_id"` // "" (null) for run-level events
	Error     string       `json:"error"`   // set on agent_failed, and on run_failed (the reason)
	Timestamp time.Time    `json:"timestamp"`
	// Text is a delta's fragment (Type RunDelta; written only there).
	Text string `json:"text,omitempty"`
	// Request is what a run_waiting event's run waits for.
	Request *WaitRequest `json:"request,omitempty"`
}

type runEventJSON struct {
	Seq       int64        `json:"seq"`
	Type      RunEventType `json:"type"`
	RunID     string       `json:"run_id"`
	Agent     *string      `json:"agent"`
	TaskID    *string      `json:"task_id"`
	Error     *string      `json:"error"`
	Timestamp time.Time    `json:"timestamp"`
	Text      string       `json:"text,omitempty"`
	Request   *WaitRequest `json:"request,omitempty"`
}

// MarshalJSON writes empty agent, task_id and error as null.
func (e RunEvent) MarshalJSON() ([]byte, error) {
	return json.Marshal(runEventJSON{Seq: e.Seq, Type: e.Type, RunID: e.RunID, Agent: nullable(e.Agent),
		TaskID: nullable(e.TaskID), Error: nullable(e.Error), Timestamp: e.Timestamp.UTC(), Text: e.Text, Request: e.Request})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *RunEvent) UnmarshalJSON(b []byte) error {
	var j runEventJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = RunEvent{Seq: j.Seq, Type: j.Type, RunID: j.RunID, Timestamp: j.Timestamp, Text: j.Text, Request: j.Request}
	if j.Agent != nil {
		e.Agent = *j.Agent
	}
	if j.TaskID != nil {
		e.TaskID = *j.TaskID
	}
	if j.Error != nil {
		e.Error = *j.Error
	}
	return nil
}

// RunStatus is what GET /runs/{id}/status serves.
type RunStatus struct {
	RunID    string       `json:"run_id"`
	State    RunState     `json:"state"`
	Progress *RunProgress `json:"progress"` // null until the first update
	// Reason says why a run failed or was cancelled ("interrupted",
	// "store_error", "timeout", "cancelled"); absent otherwise. The spec's
	// RunStatus has no such field: it is an addition, omitted when empty, so
	// a client reading the spec's three fields is unaffected.
	Reason string `json:"reason,omitempty"`
	// TraceID is the run's trace id: the trace_id of its runtime events,
	// the key of GET /runs/{trace_id}/tree and /usage?group_by=trace. It is
	// fixed at submit (the task's request_id, else the submit request's,
	// else a new id), so it is there from the first status; absent only for
	// a run stored by an earlier version. Like Reason, an addition to the
	// spec's RunStatus, omitted when empty.
	TraceID string `json:"trace_id,omitempty"`
	// Resumed is how many times the run was resumed after the process
	// running it stopped (RunRecord.Resumed); absent for a run never
	// resumed. An addition to the spec's RunStatus, like Reason.
	Resumed int `json:"resumed,omitempty"`
	// Steps is how many steps the run's step log holds (see StepLog): the
	// completed model calls, tool calls and group nodes a resume would
	// replay; absent while there are none. An addition, like Reason.
	Steps int64 `json:"steps,omitempty"`
	// CurrentStep is where the run has got to: the last step of its step
	// log (its Seq is Steps), absent while there is none. A resume replays
	// up to it and makes the next one. An addition, like Reason.
	CurrentStep *StepRef `json:"current_step,omitempty"`
	// Waiting lists what a waiting run waits for: its wait requests that
	// have no decision yet (issue 31); absent in any other state.
	Waiting []WaitRequest `json:"waiting,omitempty"`
	// Tenant is the tenant the run belongs to: the tenant of the API key
	// that submitted it (svc serve --api-keys); absent for the default
	// tenant. An addition, like Reason.
	Tenant string `json:"tenant,omitempty"`
	// Callback is the delivery log of the run's callback_url (see
	// SubmitRequest); absent without one. An addition, like Reason.
	Callback *CallbackStatus `json:"callback,omitempty"`
}

// StepRef names one step of a run's step log, without its data.
type StepRef struct {
	Seq  int64    `json:"seq"`
	Kind StepKind `json:"kind"`
	// Key is the step's RunStep.Key: the invocation's path (task id and
	// agent) and the call's index, or the group node's path.
	Key string `json:"key"`
	// At is when the step was recorded.
	At time.Time `json:"at"`
}

// RunRecord is everything a RunStore keeps about one run but its events.
type RunRecord struct {
	RunID  string     `json:"run_id"`
	Target string     `json:"target"`
	Kind   TargetKind `json:"kind"`
	State  RunState
	// Progress is nil until the first SetProgress.
	Progress *RunProgress
	// Result is the AgentResult or GroupResult JSON, served verbatim; nil
	// until set.
	Result json.RawMessage
	// Reason says why a run failed or was cancelled ("interrupted", ...).
	Reason string
	// TraceID is the run's trace id, set at Create and never changed
	// (RunStatus.TraceID).
	TraceID string
	// Tenant is the run's tenant (RunStatus.Tenant), set at Create and
	// never changed; "" for the default tenant and for runs stored before
	// tenants.
	Tenant string
	// Task is the submitted TaskSpec as JSON, given at Create (or
	// CreateIdempotent) and kept byte-exact, never changed: what a resumed
	// run runs again. Nil for a run created without one (by an earlier
	// build, or a caller that does not resume): such a run cannot be
	// resumed. A Task that is not one JSON value is refused at Create.
	Task json.RawMessage `json:"task,omitempty"`
	// Resumed counts the times ResumableStore.Recover or
	// SharedRunStore.ClaimExpired claimed the run for a new process; 0
	// for a run still in the life that created it. Create ignores it.
	Resumed int
	// Steps is how many steps the run's step log holds, and CurrentStep
	// its last (nil without steps), filled by Get; Create ignores both.
	Steps       int64
	CurrentStep *StepRef
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Status is the record's RunStatus.
func (r *RunRecord) Status() RunStatus {
	return RunStatus{RunID: r.RunID, State: r.State, Progress: r.Progress, Reason: r.Reason, TraceID: r.TraceID,
		Resumed: r.Resumed, Steps: r.Steps, CurrentStep: r.CurrentStep, Tenant: r.Tenant}
}

// Resumable reports whether a resumed process can run the record again:
// it was stored with its Task.
func (r *RunRecord) Resumable() bool { return len(r.Task) > 0 }

// CheckTask refuses, as a SpecValidationError, a Task a store must not
// keep: one that is given (not empty) but is not one JSON value. Every
// store calls it at Create and CreateIdempotent before writing anything.
func CheckTask(runID string, task json.RawMessage) error {
	if len(task) > 0 && !json.Valid(task) {
		return Errorf(KindSpecValidation, "run %q: task is not a JSON value", runID)
	}
	return nil
}

// RunStore persists submitted runs. Implementations are safe for concurrent
// use and enforce the state machine themselves: a transition RunState.CanMove
// refuses, and any change to a run in a terminal state (state, result,
// progress, a new event), fails with a RunStateError. An unknown run id is a
// RegistryError. Package stores/storetest is the contract suite every
// implementation passes.
type RunStore interface {
	// Create registers a new run in state pending. A duplicate id is a
	// RunStateError.
	Create(ctx context.Context, rec RunRecord) error
	// Get returns a run's record.
	Get(ctx context.Context, runID string) (RunRecord, error)
	// SetState moves a run to next. reason is kept with the record; final,
	// when not nil, is appended as the run's last event in the same atomic
	// step (run_cancelled, group_completed), so no event can follow it.
	SetState(ctx context.Context, runID string, next RunState, reason string, final *RunEvent) error
	// SetProgress replaces a run's progress.
	SetProgress(ctx context.Context, runID string, p RunProgress) error
	// SetResult stores a run's result while it is not terminal. A run that
	// ends with a result should use Finish, which writes both at once.
	SetResult(ctx context.Context, runID string, result json.RawMessage) error
	// Finish ends a run in one atomic step: it moves the run to next (a
	// terminal state the run's state may move to), keeps reason, replaces
	// the result with result when it is not nil, and appends final, when
	// not nil, as the run's last event. A crash leaves either none or all
	// of it. A refused move (a non-terminal next, or a run that is already
	// terminal) is a RunStateError and changes nothing.
	Finish(ctx context.Context, runID string, next RunState, reason string, result json.RawMessage, final *RunEvent) error
	// Append adds an event and returns its sequence number (from 1).
	Append(ctx context.Context, runID string, ev RunEvent) (int64, error)
	// Events returns the events with Seq > after, in order.
	Events(ctx context.Context, runID string, after int64) ([]RunEvent, error)
	// Stream delivers the events with Seq > after, then the new ones as
	// they are appended, and closes the channel once the run is terminal and
	// all its events were sent, or when ctx ends.
	Stream(ctx context.Context, runID string, after int64) (<-chan RunEvent, error)
	// Interrupt marks every pending or running run failed with reason
	// "interrupted" (at startup, for runs a dead process left behind) and
	// returns how many it marked. Each run is written in one atomic step,
	// as Finish does: state failed, reason ReasonInterrupted, the result
	// InterruptedResult(target), progress InterruptedProgress, and
	// InterruptedEvent as its last event.
	Interrupt(ctx context.Context) (int, error)
	// Close releases the store; it is idempotent.
	Close() error
}

// SharedRunStore is a RunStore several serve nodes share (redisstore):
// each node's Store owns the runs it creates and keeps a lease on them
// alive in the store while it is open. Interrupt then fails only the
// unfinished runs no live node owns: those of this node's id from an
// earlier life, those whose owner's lease expired, and those created
// without an owner; the runs of the other live nodes are left alone. Sweep
// fails the runs of dead owners only (not this node's, nor ownerless
// ones, which an older build may still be running), and is called
// periodically by every node, so the survivors fail a killed node's runs
// once its lease expires (reason ReasonInterrupted, the result
// NodeLostResult naming the node). Package stores/storetest checks it
// (Shared).
type SharedRunStore interface {
	RunStore
	// NodeID is the owner this Store writes into the runs it creates.
	NodeID() string
	// LeaseTTL is how long the node's lease outlives its last renewal.
	LeaseTTL() time.Duration
	// Sweep fails the unfinished runs whose owner is another node whose
	// lease expired, as Interrupt does, and returns how many it failed
	// and, for the log, the nodes they belonged to.
	Sweep(ctx context.Context) (n int, nodes []string, err error)
	// ClaimExpired is Sweep's counterpart for a node that resumes: in one
	// pass it claims for this node (the run's owner becomes NodeID, its
	// Resumed goes up by one, its state stays) every unfinished run with a
	// Task whose owner is another node whose lease expired, and returns
	// their records, oldest first; the runs without a Task it fails as
	// Sweep does, and returns how many. Each claim is atomic: of several
	// nodes calling ClaimExpired (or Recover) at once, exactly one gets
	// each run.
	ClaimExpired(ctx context.Context) (claimed []RunRecord, interrupted int, err error)
}

// ResumableStore is a RunStore whose unfinished runs a new process can
// resume rather than fail: it keeps each run's task and step log. Every
// store in stores/ implements it; package stores/storetest checks it
// (the Recover subtests, and RunReopen for the persistent stores).
//
// A call of Recover is a process's start: it claims every unfinished run
// it may (as Interrupt would fail it), whatever an earlier call claimed,
// so calling it twice in one process claims the runs twice (Resumed 2).
// What keeps two processes from both claiming a run is the store's: a
// file store (sqlitestore, pebblestore) has one serve process, which
// holds its lock; a shared store (redisstore) claims only the runs no live
// node owns, one atomic script per run.
type ResumableStore interface {
	RunStore
	StepLog
	// Recover is Interrupt for a runtime that resumes: in one pass it
	// claims for this process every unfinished run (pending or running)
	// that Interrupt would fail and that has a Task, increments their
	// Resumed and returns their records, oldest first (state unchanged, so
	// the caller decides; CurrentStep may be nil: the resume reads the
	// whole step log); the runs without a Task it fails exactly as
	// Interrupt does, and returns how many. Each claim is atomic: two
	// processes calling Recover (or ClaimExpired) at once never both get a
	// run.
	Recover(ctx context.Context) (claimed []RunRecord, interrupted int, err error)
}

// SortClaimed orders the records Recover and ClaimExpired return: oldest
// first (by CreatedAt, then RunID), so a resuming runtime starts the runs
// in the order they were submitted.
func SortClaimed(recs []RunRecord) {
	slices.SortFunc(recs, func(a, b RunRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.RunID, b.RunID)
	})
}

// IdempotentStore is a RunStore that also keeps Idempotency-Keys, so a
// retried submit finds the run its first attempt made, across restarts for a
// persistent store and across processes for a shared one. Every store in
// stores/ implements it; package stores/storetest checks it.
//
// A key is reserved for ttl from the moment it is first used; after that it
// is forgotten and the same key makes a new run. A store keeps at most
// MaxIdempotencyKeys live keys: past that, reserving a new key forgets the
// one closest to expiring (the oldest), so only a retry older than that many
// keyed submits can make a second run.
type IdempotentStore interface {
	RunStore
	// CreateIdempotent reserves key for fingerprint (a digest of the
	// request) and creates rec as Create does, in one atomic step, so two
	// calls racing with the same key make one run. When the key is live it
	// creates nothing: with the same fingerprint it returns the run that
	// holds the key and created false; with another fingerprint it fails
	// with a RunStateError naming that run. ttl <= 0 means
	// DefaultIdempotencyTTL.
	CreateIdempotent(ctx context.Context, key, fingerprint string, rec RunRecord, ttl time.Duration) (runID string, created bool, err error)
}

// Idempotency-Key limits of every IdempotentStore.
const (
	// DefaultIdempotencyTTL is how long a key is kept when the caller gives
	// no TTL.
	DefaultIdempotencyTTL = 24 * time.Hour
	// MaxIdempotencyKeys bounds the live keys one store keeps.
	MaxIdempotencyKeys = 100_000
)

// IdempotencyConflict is the RunStateError of a key reused for a different
// request: it names the run that holds the key.
func IdempotencyConflict(key, runID string) error {
	return Errorf(KindRunState, "Idempotency-Key %q was used for a different request (run %s)", key, runID)
}

// SubmitRequest is the body of POST /submit: a target (an agent or group
// name), the task, and optionally which kind of target it is ("agent" or
// "group"), required only when a name is both.
type SubmitRequest struct {
	Target string     `json:"target"`
	Task   TaskSpec   `json:"task"`
	Kind   TargetKind `json:"kind,omitempty"`
	// IdempotencyKey (the Idempotency-Key header) makes a retried submit
	// safe: the same key with the same request returns the first run's id;
	// with a different request it is a RunStateError. The run store keeps
	// keys for a TTL (see IdempotentStore).
	IdempotencyKey string `json:"-"`
	// CallbackURL, when set, gets one signed POST when the run ends (see
	// Callbacks): its RunStatus and result.
	CallbackURL string `json:"callback_url,omitempty"`
}

// TargetKind says what the target of a submitted run is: the "kind" of a
// SubmitRequest, a RunRecord and a RunSummary. It is its own type so that
// a name means one thing: an error's kind is a Kind, what an envelope of
// the fleet carries is a fleetwire.MsgKind.
type TargetKind string

// Target kinds; the values are the wire's.
const (
	TargetAgent TargetKind = "agent"
	TargetGroup TargetKind = "group"
)

// RunBackend is the asynchronous half of the call surface: submit a run,
// then come back for it. The runtime implements it over a RunStore.
type RunBackend interface {
	// Submit checks the request (unknown or ambiguous targets and bad input
	// are refused before anything is stored), records the run as pending,
	// starts it and returns its id.
	Submit(ctx context.Context, req SubmitRequest) (string, error)
	// RunStatus returns a run's state and live progress.
	RunStatus(ctx context.Context, runID string) (RunStatus, error)
	// RunResult returns the stored AgentResult or GroupResult JSON,
	// verbatim; a RunStateError while the run is pending or running, or
	// when it was cancelled.
	RunResult(ctx context.Context, runID string) (json.RawMessage, error)
	// CancelRun cancels a run: idempotent for a known run, RegistryError for
	// an unknown one.
	CancelRun(ctx context.Context, runID string) error
	// RunEvents streams a run's events after the sequence number after:
	// history first, then live, closing after the terminal state.
	RunEvents(ctx context.Context, runID string, after int64) (<-chan RunEvent, error)
}

// RunDeltaStreamer is a RunBackend that can follow a run's deltas too
// (GET /runs/{id}/stream?deltas=true): RunEventsWithDeltas is RunEvents
// with the run's delta events (RunDelta, Seq 0) merged in as they come,
// while the run executes on this process. Deltas are never replayed.
type RunDeltaStreamer interface {
	RunEventsWithDeltas(ctx context.Context, runID string, after int64) (<-chan RunEvent, error)
}

// StepKind says what a RunStep records.
type StepKind string

// Step kinds; the values are what the stores keep.
const (
	// StepModelCall records a completed model call: its response, with
	// usage and cost.
	StepModelCall StepKind = "model_call"
	// StepToolCall records a completed tool call: its result.
	StepToolCall StepKind = "tool_call"
	// StepGroupNode records a completed group node: its AgentResult.
	StepGroupNode StepKind = "group_node"
	// StepWait records a call that waits for a person: its WaitRequest,
	// under the call's tool-call key.
	StepWait StepKind = "wait"
	// StepDecision records the answer to a wait (a Decision), under the
	// same key as its StepWait.
	StepDecision StepKind = "decision"
)

// Valid reports whether k is one of the step kinds.
func (k StepKind) Valid() bool {
	switch k {
	case StepModelCall, StepToolCall, StepGroupNode, StepWait, StepDecision:
		return true
	}
	return false
}

// RunStep is one entry of a run's step log: a completed step whose result
// a resumed run replays instead of paying for it again. Seq numbers a run's
// steps from 1 in the order the store took them (the store assigns it, as
// it does an event's). Key identifies the step within the run independently
// of timing (StepKey), so a replay that reaches the same point asks for the
// same key; Data is the recorded result, kept byte-exact.
type RunStep struct {
	Seq       int64           `json:"seq"`
	Kind      StepKind        `json:"kind"`
	Key       string          `json:"key"`
	Data      json.RawMessage `json:"data"`
	Timestamp time.Time       `json:"timestamp"`
}

// StepKey is the Key of the index-th call (from 0) of its kind made by the
// invocation at path (the invocation's span path, or a group node's name):
// a deterministic run makes the same calls in the same order, so a replay
// finds each recorded step under the key it computes again.
func StepKey(path string, index int) string { return path + "#" + strconv.Itoa(index) }

// Size is what the step counts against a run's step-log bound: its key and
// its data, the parts a caller chooses.
func (s RunStep) Size() int64 { return int64(len(s.Key) + len(s.Data)) }

// CheckSteps refuses, as a SpecValidationError, a batch of steps a store
// must not keep: none at all, an unknown kind, an empty key, or data that
// is not one JSON value. Every StepLog calls it before writing anything, so
// a refused batch changes nothing.
func CheckSteps(steps []RunStep) error {
	if len(steps) == 0 {
		return Errorf(KindSpecValidation, "no steps to append")
	}
	for i, st := range steps {
		switch {
		case !st.Kind.Valid():
			return Errorf(KindSpecValidation, "step %d: unknown kind %q", i, st.Kind)
		case st.Key == "":
			return Errorf(KindSpecValidation, "step %d: empty key", i)
		case !json.Valid(st.Data):
			return Errorf(KindSpecValidation, "step %d (%s): data is not a JSON value", i, st.Key)
		}
	}
	return nil
}

// DefaultMaxStepBytes bounds a run's step log (the sum of its steps' Size)
// when a store is given no bound: far above what a long agent run records
// (a model response is a few KiB), low enough that a runaway loop cannot
// fill the store.
const DefaultMaxStepBytes int64 = 8 << 20

// StepLogFull is the PayloadTooLargeError (413) of an append that would take
// a run's step log past its bound: the whole batch is refused, so a replay
// never sees half of it.
func StepLogFull(runID string, have, adding, limit int64) error {
	return Errorf(KindPayloadTooLarge, "run %q: step log full: %d bytes recorded, %d more would pass the bound of %d",
		runID, have, adding, limit)
}

// StepLog is a run's step log, the record a resumed run replays. Every
// store in stores/ implements it beside RunStore (storetest's Steps
// subtests check it); it is its own interface, not part of RunStore, so
// the RunStores that only wrap or fake a store (faultstore, tests) need not
// grow it until replay uses it, and a caller asks for it where it needs it.
// Steps are kept as long as their run is, and deleted with it.
type StepLog interface {
	// AppendSteps adds steps to a run that is not terminal, in order and in
	// one atomic step (all of them or none, in the same group commit as
	// the run's other writes where the store has one), and returns the Seq
	// of the last. Seq is assigned by the store; a zero Timestamp becomes
	// now. A batch CheckSteps refuses is a SpecValidationError, one that
	// would pass the bound a StepLogFull error, a terminal run a
	// RunStateError, an unknown run a RegistryError; none writes anything.
	AppendSteps(ctx context.Context, runID string, steps ...RunStep) (int64, error)
	// Steps returns a run's steps with Seq > after, in order (empty, not an
	// error, for a run that has none).
	Steps(ctx context.Context, runID string, after int64) ([]RunStep, error)
	// MaxStepBytes is the bound of each run's step log.
	MaxStepBytes() int64
}
