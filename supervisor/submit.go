package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/supervisor/followers"
	"github.com/svc-dev/svc/supervisor/registry"
	"github.com/svc-dev/svc/supervisor/submitted"
	"go.uber.org/zap"
)

// Submitted runs: Submit records a run in the RunStore and starts it under a
// context of its own (the request that submitted it may end at once); the
// run's invocations report their run events to a per-run writer that
// appends them to the store in order, off the actors' path; CancelRun
// records the cancellation (with run_cancelled as the run's last event)
// before it cancels the work, so the store refuses anything that finishes
// late.
//
// Store errors (store.go): every write is retried while its error may pass,
// logged with the run id, and a write that cannot be made fails the run
// ("store_error") so its stream ends. If even that write fails, the run
// stays pending or running in the store until the next runtime opens it and
// Interrupt marks it failed ("interrupted"); the log says so.

// Submit checks and records a run, starts it and returns its id.
func (rt *Runtime) Submit(ctx context.Context, req svc.SubmitRequest) (string, error) {
	return rt.submit(ctx, req)
}

func (rt *Runtime) submit(ctx context.Context, req svc.SubmitRequest) (string, error) {
	reg := rt.reg.Load()
	kind, err := reg.Target(req.Target, req.Kind)
	if err != nil {
		return "", err
	}
	task := req.Task
	if task.ID == "" {
		task.ID = newID()
	}
	if task.RequestID == "" {
		task.RequestID = svc.RequestIDFrom(ctx)
	}
	if task.RequestID == "" {
		task.RequestID = newID()
	}
	if err := rt.checkInput(reg, kind, req.Target, task); err != nil {
		return "", err
	}
	if err := rt.refuseSpent(ctx, req.Target, task.ID, task.RequestID); err != nil {
		return "", err
	}
	if err := rt.checkCallback(ctx, req.CallbackURL); err != nil {
		return "", err
	}
	if err := rt.admit(); err != nil {
		return "", err
	}
	id := newID()
	if req.CallbackURL != "" {
		// Stored before the run, so that no run ends without its
		// callback; one whose run is never stored ends failed.
		if err := rt.callbacks.ArmCallback(ctx, svc.CallbackRun, id, req.CallbackURL); err != nil {
			rt.leave()
			return "", fmt.Errorf("submit: %w", err)
		}
	}
	rec := svc.RunRecord{RunID: id, Target: req.Target, Kind: kind, TraceID: task.RequestID, Tenant: svc.TenantFrom(ctx), CreatedAt: time.Now().UTC()}
	if rt.resumes {
		// What a resumed run runs again (resume.go).
		if rec.Task, err = json.Marshal(task); err != nil {
			rt.leave()
			return "", svc.Errorf(svc.KindSpecValidation, "submit: task: %v", err)
		}
	}
	if req.IdempotencyKey == "" {
		err := rt.records.Create(ctx, rec)
		if err != nil {
			rt.leave()
			return "", fmt.Errorf("submit: %w", err)
		}
	} else {
		key := req.IdempotencyKey
		if rec.Tenant != "" {
			// Each tenant's keys are its own: another tenant's same key
			// neither finds nor blocks its run.
			key = rec.Tenant + "/" + key
		}
		got, created, err := rt.records.CreateKeyed(ctx, key, submitted.Fingerprint(req), rec)
		if err != nil || !created {
			rt.leave()
			if err != nil && !errors.Is(err, svc.ErrRunState) {
				err = fmt.Errorf("submit: %w", err)
			}
			return got, err
		}
	}
	rt.startSubmitted(context.WithoutCancel(ctx), id, kind, req.Target, task, nil, nil, 0, false)
	return id, nil
}

// startSubmitted starts a submitted run that was admitted: a new one, or one a
// previous process left unfinished (resumed), with the steps it recorded.
//
// A resumed run was resumed resumes times in all (RunStatus.Resumed);
// running says the store has it running already.
func (rt *Runtime) startSubmitted(base context.Context, id string, kind svc.TargetKind, target string, task svc.TaskSpec, steps []svc.RunStep, history []svc.RunEvent, resumes int, running bool) *submitted.Journal {
	resumed := resumes > 0
	runCtx, cancel := context.WithCancelCause(base)
	rt.submitted.Store(id, cancel)
	w := rt.records.NewWriter(id, cancel)
	runCtx = withRunSink(runCtx, id, w.Event, w.Progress)
	runCtx = svc.WithDeltas(runCtx, rt.follow.Open(id))
	var j *submitted.Journal
	if rt.resumes {
		j = submitted.NewJournal(w, task.ID, steps, history)
		runCtx = svc.WithJournal(runCtx, j)
	}
	if resumed {
		// One run_resumed per resume (RunStatus.Resumed): those of lives
		// that died before writing theirs too.
		n := 0
		for _, ev := range history {
			if ev.Type == svc.RunRunResumed {
				n++
			}
		}
		now := time.Now().UTC()
		for range max(resumes-n, 1) {
			w.Event(svc.RunEvent{Type: svc.RunRunResumed, Timestamp: now})
		}
	}
	go rt.execute(runCtx, cancel, w, id, kind, target, task, running)
	return j
}

// checkInput refuses a task the target's entry agents would refuse, before
// anything is stored.
func (rt *Runtime) checkInput(reg *registry.Snapshot, kind svc.TargetKind, target string, task svc.TaskSpec) error {
	if kind == svc.TargetAgent {
		c, _ := reg.Agent(target)
		_, err := prepare(c, task, task.RequestID, -1)
		return err
	}
	g, _ := reg.Group(target)
	if g.Team != nil {
		_, err := prepare(g.Team, task, task.RequestID, -1)
		return err
	}
	for _, e := range g.Graph.Entry {
		c, _ := reg.Agent(g.Graph.Nodes[e].Agent)
		if _, err := prepare(c, task, task.RequestID, -1); err != nil {
			return err
		}
	}
	return nil
}

// execute runs a submitted run to its end and records the outcome. It owns
// the writer and is owned by the runtime (inflight), which waits for it.
func (rt *Runtime) execute(ctx context.Context, cancel context.CancelCauseFunc, w *submitted.Writer, id string, kind svc.TargetKind, target string, task svc.TaskSpec, running bool) {
	defer rt.leave()
	defer rt.follow.Close(id)
	defer rt.settled(id)
	defer cancel(nil)
	if running {
		// Resumed: the store has it running already.
	} else if err := rt.records.SetState(id, svc.RunRunning, "", nil); err != nil {
		w.Close()
		if !errors.Is(err, svc.ErrRunState) { // a refusal: cancelled while pending
			rt.records.Failed(id, "set state running", err)
			rt.records.FailRun(id, target, task)
		}
		return
	}
	var (
		result  any
		success bool
		err     error
	)
	if kind == svc.TargetAgent {
		var r svc.AgentResult
		r, err = rt.Run(ctx, target, task)
		result, success = r, r.Success
	} else {
		var r svc.RunResult
		r, err = rt.RunGroup(ctx, target, task)
		result, success = r, r.Success()
	}
	w.Close() // every run event is in the store before the terminal state
	if rt.resumes && (!success || err != nil) && rt.closing() {
		// Cut by a shutdown: the run stays running in the store, and the
		// next process on it resumes it from its steps (a run that failed
		// on its own meanwhile runs its failed step again then).
		rt.log.Info("submitted run left to resume: the runtime is shutting down", zap.String("run_id", id))
		return
	}
	if req, ok := svc.Paused(err); ok && context.Cause(ctx) == nil {
		rt.park(id, target, task, req)
		return
	}
	if !rt.settleProgress(ctx, id) {
		return
	}
	reason := ""
	if err != nil {
		success = false
		reason = svc.ReasonOf(err)
		result = svc.AgentResult{AgentName: target, TaskID: task.ID, Error: svc.ErrorInfoOf(err),
			Metadata: svc.ResultMetadata{TraceID: task.RequestID, Backend: svc.BackendLocal}}
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errRunCancelled):
		return // CancelRun recorded the end already
	case errors.Is(cause, submitted.ErrStoreWrite):
		// The writer lost an event or a progress update and stopped the
		// work: the run fails, and so does its result (one that said
		// success would contradict the state).
		success, reason = false, submitted.ReasonStoreError
		result = json.RawMessage(submitted.StoreErrorResult(target, task))
	}
	body, merr := json.Marshal(result)
	if merr != nil {
		body, _ = json.Marshal(svc.AgentResult{AgentName: target, TaskID: task.ID, Error: svc.ErrorInfoOf(merr)})
	}
	state := svc.RunCompleted
	if !success {
		state = svc.RunFailed
	}
	var final *svc.RunEvent
	switch {
	case reason == submitted.ReasonStoreError:
		final = submitted.StoreErrorEvent() // the history has a hole: say why it ends
	case kind == svc.TargetGroup:
		final = &svc.RunEvent{Type: svc.RunGroupCompleted, Timestamp: time.Now().UTC()}
	}
	// Result, terminal state and final event are one store step, so a crash
	// cannot leave a failed run whose result says success. A refusal here
	// means the run was cancelled meanwhile: the cancel won.
	if err := rt.records.Finish(id, state, reason, body, final); err != nil && !errors.Is(err, svc.ErrRunState) {
		rt.records.Failed(id, "finish "+string(state), err)
		rt.records.FailRun(id, target, task)
	}
}

var errRunCancelled = errors.New("run cancelled by request")

// CancelRun cancels a submitted run: the store records the cancellation and
// run_cancelled first, then the run's work is cancelled. Idempotent.
func (rt *Runtime) CancelRun(ctx context.Context, id string) error {
	rec, err := rt.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if rec.State.Terminal() {
		return nil
	}
	final := &svc.RunEvent{Type: svc.RunRunCancelled, Timestamp: time.Now().UTC()}
	if err := rt.store.SetState(ctx, id, svc.RunCancelled, "cancelled", final); err != nil && !errors.Is(err, svc.ErrRunState) {
		return err
	}
	rt.CancelLocal(id)
	if rt.dispatcher != nil {
		// Every worker running a task of the run, and every other serve
		// node (which may own the run), cancels its part.
		rt.dispatcher.Cancel(id, "")
	}
	rt.callbackEnded(id) // a waiting run has no execute to say so
	return nil
}

// checkCallback refuses a callback_url before anything is stored.
func (rt *Runtime) checkCallback(ctx context.Context, url string) error {
	switch {
	case url == "":
		return nil
	case rt.callbacks == nil:
		return svc.Errorf(svc.KindSpecValidation, "callback_url: this server sends no callbacks (start svc serve with --webhook-key-file)")
	}
	return rt.callbacks.CheckCallback(ctx, url)
}

// callbackEnded tells the callbacks that run id may have ended.
func (rt *Runtime) callbackEnded(id string) {
	if rt.callbacks != nil {
		rt.callbacks.Ended(svc.CallbackRun, id)
	}
}

// RunStatus returns a run's state and progress.
func (rt *Runtime) RunStatus(ctx context.Context, id string) (svc.RunStatus, error) {
	rec, err := rt.store.Get(ctx, id)
	if err != nil {
		return svc.RunStatus{}, err
	}
	st := rec.Status()
	st.Progress = settledProgress(st.State, st.Progress)
	if st.State == svc.RunWaiting {
		if log, ok := rt.store.(svc.StepLog); ok {
			steps, err := log.Steps(ctx, id, 0)
			if err != nil {
				return svc.RunStatus{}, fmt.Errorf("run %s: read its wait requests: %w", id, err)
			}
			st.Waiting = svc.OpenRequests(steps)
		}
	}
	if rt.callbacks != nil {
		st.Callback = rt.callbacks.Callback(ctx, svc.CallbackRun, id)
	}
	return st, nil
}

// settledProgress is the progress a run in state reports. A terminal run
// has nothing running: execute settles its progress before it ends a run,
// but a cancel ends it first, and the store then refuses the update of the
// invocations the cancel stopped, so the stored progress may still count
// them running. They count failed, as for an interrupted run.
func settledProgress(state svc.RunState, p *svc.RunProgress) *svc.RunProgress {
	if !state.Terminal() || p == nil || p.Running == 0 {
		return p
	}
	return svc.InterruptedProgress(p)
}

// RunResult returns a finished run's stored result.
func (rt *Runtime) RunResult(ctx context.Context, id string) (json.RawMessage, error) {
	rec, err := rt.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	switch {
	case rec.State == svc.RunCancelled:
		return nil, svc.Errorf(svc.KindRunState, "run %s was cancelled: it has no result", id)
	case !rec.State.Terminal() || len(rec.Result) == 0:
		return nil, svc.Errorf(svc.KindRunState, "run %s is %s: no result yet", id, rec.State)
	}
	return rec.Result, nil
}

// RunEvents streams a run's events after the sequence number after.
func (rt *Runtime) RunEvents(ctx context.Context, id string, after int64) (<-chan svc.RunEvent, error) {
	return rt.store.Stream(ctx, id, after)
}

// RunEventsWithDeltas is RunEvents with, while the run executes here, its
// deltas merged in live (package followers). Following them makes the
// run's models stream unless their agents say not to.
func (rt *Runtime) RunEventsWithDeltas(ctx context.Context, id string, after int64) (<-chan svc.RunEvent, error) {
	stored, err := rt.store.Stream(ctx, id, after)
	if err != nil {
		return nil, err
	}
	live, stop, ok := rt.follow.Follow(id)
	if !ok {
		return stored, nil
	}
	out := make(chan svc.RunEvent, followers.Queue)
	// The merge ends with the stored stream, which the store closes after
	// the run's last event or when ctx ends.
	go func() {
		defer close(out)
		defer stop()
		send := func(ev svc.RunEvent) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			select {
			case ev, ok := <-stored:
				if !ok || ev.Type.Final() {
					// Deltas already taken go before the end of the run.
					for drained := live == nil; !drained; {
						select {
						case d, more := <-live:
							drained = !more || !send(d)
						default:
							drained = true
						}
					}
				}
				if !ok || !send(ev) {
					return
				}
			case d, ok := <-live:
				if !ok {
					live = nil // the run ended here; the store says the rest
					continue
				}
				if !send(d) {
					return
				}
			}
		}
	}()
	return out, nil
}

var (
	_ svc.RunBackend       = (*Runtime)(nil)
	_ svc.RunDeltaStreamer = (*Runtime)(nil)
)

// CancelLocal cancels this process's part of a submitted run that another
// process cancelled (a cancel broadcast by another serve node): the run's
// work stops here, and its record, which the other node already wrote,
// is left alone.
func (rt *Runtime) CancelLocal(runID string) {
	if c, ok := rt.submitted.Load(runID); ok {
		c.(context.CancelCauseFunc)(errRunCancelled)
	}
}
