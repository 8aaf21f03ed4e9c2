package supervisor

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/svc-dev/svc"
	"go.uber.org/zap"
)

// Waiting runs (issue 31; svc/wait.go). A submitted run whose agent makes a
// call that waits for a person ends its invocation with a PauseError; the
// run's execute parks it (park): its events are flushed, the run moves to
// waiting with a run_waiting event in one store step, and its goroutines
// end. ResumeRun records a decision and starts the run again by replay on
// whichever node is asked, the store's move from waiting to running being
// the claim that keeps two nodes from both resuming it. A request with a
// deadline is timed out by the node that parked it, and by every node
// that starts on the store (watchWaiting).

// park records that the run waits for req (a store that refuses the move
// had the run cancelled meanwhile).
func (rt *Runtime) park(id, target string, task svc.TaskSpec, req svc.WaitRequest) {
	now := time.Now().UTC()
	ev := &svc.RunEvent{Type: svc.RunRunWaiting, Agent: req.Agent, TaskID: req.TaskID, Request: &req, Timestamp: now}
	if err := rt.records.SetState(id, svc.RunWaiting, "", ev); err != nil {
		if !errors.Is(err, svc.ErrRunState) {
			rt.records.Failed(id, "park waiting run", err)
			rt.records.FailRun(id, target, task)
		}
		return
	}
	rt.emitter.Emit(svc.RuntimeEvent{EventType: svc.EventRunWaiting, Timestamp: now, AgentName: req.Agent,
		TaskID: req.TaskID, TraceID: task.RequestID,
		Payload: svc.Payload{"run_id": id, "request_id": req.ID, "wait_kind": string(req.Kind), "tool_name": req.Tool}})
	rt.log.Info("submitted run waits for a person", zap.String("run_id", id), zap.String("request_id", req.ID),
		zap.String("kind", string(req.Kind)), zap.String("tool", req.Tool))
	if req.Deadline != nil {
		rt.deadlines.add(id, req)
	}
}

// ResumeRun implements svc.ResumeBackend.
func (rt *Runtime) ResumeRun(ctx context.Context, id string, d svc.Decision) (svc.RunStatus, error) {
	rec, err := rt.store.Get(ctx, id)
	if err != nil {
		return svc.RunStatus{}, err
	}
	if rec.State != svc.RunWaiting {
		return svc.RunStatus{}, svc.Errorf(svc.KindRunState, "run %s is %s, not waiting: there is nothing to resume", id, rec.State)
	}
	log, ok := rt.store.(svc.StepLog)
	if !ok || !rt.resumes {
		return svc.RunStatus{}, svc.Errorf(svc.KindRunState, "run %s waits, but this runtime's run store keeps no step log to resume it from", id)
	}
	steps, err := log.Steps(ctx, id, 0)
	if err != nil {
		return svc.RunStatus{}, fmt.Errorf("resume run %s: read its steps: %w", id, err)
	}
	req, key, answered, found := svc.FindRequest(steps, d.RequestID)
	switch {
	case !found:
		open := svc.OpenRequests(steps)
		ids := make([]string, len(open))
		for i, r := range open {
			ids[i] = r.ID
		}
		return svc.RunStatus{}, svc.Errorf(svc.KindRunState, "run %s has no request %q (open: %s)", id, d.RequestID, strings.Join(ids, ", "))
	case answered:
		return svc.RunStatus{}, svc.Errorf(svc.KindRunState, "request %s of run %s was answered already", d.RequestID, id)
	}
	if err := d.Check(req); err != nil {
		return svc.RunStatus{}, err
	}
	if d.At.IsZero() {
		d.At = time.Now().UTC()
	}
	if err := rt.resumeWaiting(ctx, rec, log, steps, key, d); err != nil {
		return svc.RunStatus{}, err
	}
	return rt.RunStatus(ctx, id)
}

// resumeWaiting claims the waiting run rec (waiting → running: of two
// nodes resuming it at once, one wins and the other gets a RunStateError),
// records d under key and starts the run again from its steps.
func (rt *Runtime) resumeWaiting(ctx context.Context, rec svc.RunRecord, log svc.StepLog, steps []svc.RunStep, key string, d svc.Decision) error {
	var task svc.TaskSpec
	if err := json.Unmarshal(rec.Task, &task); err != nil {
		return svc.Errorf(svc.KindRunState, "run %s cannot be resumed: its stored task does not decode: %v", rec.RunID, err)
	}
	kind, err := rt.reg.Load().Target(rec.Target, rec.Kind)
	if err != nil {
		return svc.Errorf(svc.KindRunState, "run %s cannot be resumed: its target is not in the specs any more: %v", rec.RunID, err)
	}
	data, err := json.Marshal(d)
	if err != nil {
		return svc.Errorf(svc.KindSpecValidation, "decision: %v", err)
	}
	if err := rt.admit(); err != nil {
		return err
	}
	if err := rt.store.SetState(ctx, rec.RunID, svc.RunRunning, "", nil); err != nil {
		rt.leave()
		if errors.Is(err, svc.ErrRunState) {
			return svc.Errorf(svc.KindRunState, "run %s is not waiting any more (resumed or cancelled meanwhile)", rec.RunID)
		}
		return fmt.Errorf("resume run %s: %w", rec.RunID, err)
	}
	step := svc.RunStep{Kind: svc.StepDecision, Key: key, Data: data, Timestamp: d.At}
	if _, err := log.AppendSteps(ctx, rec.RunID, step); err != nil {
		// The run is ours and running: replayed without the decision it
		// waits again for the same request, which the caller may answer
		// again.
		rt.log.Warn("decision not recorded: the run waits for it again", zap.String("run_id", rec.RunID), zap.Error(err))
	} else {
		steps = append(steps, step)
	}
	history, err := rt.store.Events(ctx, rec.RunID, 0)
	if err != nil {
		history = nil // the replay then emits the start events again
	}
	rt.deadlines.remove(rec.RunID, d.RequestID)
	node := ""
	if s, ok := rt.store.(svc.SharedRunStore); ok {
		node = s.NodeID()
	}
	rt.emitter.Emit(svc.RuntimeEvent{EventType: svc.EventRunResumed, Timestamp: time.Now().UTC(), AgentName: rec.Target,
		TaskID: task.ID, TraceID: task.RequestID,
		Payload: svc.Payload{"run_id": rec.RunID, "steps_replayed": int64(len(steps)), "node": node, "resumed": int64(rec.Resumed)}})
	rt.startSubmitted(svc.WithRequestID(context.Background(), task.RequestID), rec.RunID, kind, rec.Target, task, steps,
		history, 1, true)
	return nil
}

// timeOut applies the deadline of request req of run id: a deny
// decision, or the run failed, as req.OnTimeout says. A run no longer
// waiting for it (answered, cancelled) is left alone.
func (rt *Runtime) timeOut(id string, req svc.WaitRequest) {
	ctx := context.Background()
	if req.OnTimeout == svc.TimeoutFail {
		rec, err := rt.store.Get(ctx, id)
		if err != nil || rec.State != svc.RunWaiting {
			return
		}
		res, _ := json.Marshal(svc.AgentResult{AgentName: rec.Target, Error: &svc.ErrorInfo{Type: string(svc.KindTimeout),
			Message: fmt.Sprintf("request %s (%s of %s) had no answer by its deadline %s", req.ID, req.Kind, req.Tool,
				req.Deadline.Format(time.RFC3339)), Reason: svc.ReasonApprovalTimeout}})
		ev := &svc.RunEvent{Type: svc.RunRunFailed, Error: svc.ReasonApprovalTimeout, Timestamp: time.Now().UTC()}
		if err := rt.store.Finish(ctx, id, svc.RunFailed, svc.ReasonApprovalTimeout, res, ev); err != nil && !errors.Is(err, svc.ErrRunState) {
			rt.log.Warn("waiting run not failed at its deadline", zap.String("run_id", id), zap.Error(err))
		}
		return
	}
	no := false
	_, err := rt.ResumeRun(ctx, id, svc.Decision{RequestID: req.ID, Approve: &no, TimedOut: true, Reason: "no answer by the deadline"})
	if err != nil && !errors.Is(err, svc.ErrRunState) && !errors.Is(err, svc.ErrShuttingDown) {
		rt.log.Warn("waiting run not resumed at its deadline", zap.String("run_id", id), zap.Error(err))
	}
}

// watchWaiting finds the waiting runs of the store whose open requests
// have deadlines, so that this node times them out too (their node may be
// gone). It pages through the waiting runs once, off the caller's path.
func (rt *Runtime) watchWaiting() {
	lister, ok := rt.store.(svc.RunLister)
	log, ok2 := rt.store.(svc.StepLog)
	if !ok || !ok2 || !rt.resumes {
		return
	}
	rt.work.Add(1)
	go func() {
		defer rt.work.Done()
		ctx := context.Background()
		cursor := ""
		for !rt.closing() {
			page, err := lister.ListRuns(ctx, svc.RunFilter{State: svc.RunWaiting, Limit: svc.MaxRunPage, Cursor: cursor})
			if err != nil {
				rt.log.Warn("waiting runs not listed: their deadlines are watched by the nodes that parked them", zap.Error(err))
				return
			}
			for _, r := range page.Runs {
				steps, err := log.Steps(ctx, r.RunID, 0)
				if err != nil {
					continue
				}
				for _, req := range svc.OpenRequests(steps) {
					if req.Deadline != nil {
						rt.deadlines.add(r.RunID, req)
					}
				}
			}
			if cursor = page.NextCursor; cursor == "" {
				return
			}
		}
	}()
}

// deadlines are the request deadlines this node watches: a heap, an
// index by run and request (a store with many waiting runs adds and
// removes in O(log n)), and one timer for the earliest. A fired deadline
// runs on the timer's goroutine, which Shutdown awaits (stop).
type deadlines struct {
	mu      sync.Mutex
	h       deadlineHeap
	byKey   map[deadlineKey]*deadline
	timer   *time.Timer
	stopped bool
	fire    func(id string, req svc.WaitRequest)
	running sync.WaitGroup
}

type deadlineKey struct{ run, req string }

type deadline struct {
	at    time.Time
	id    string
	req   svc.WaitRequest
	index int // in the heap
}

type deadlineHeap []*deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *deadlineHeap) Push(x any) {
	d := x.(*deadline)
	d.index = len(*h)
	*h = append(*h, d)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (d *deadlines) add(id string, req svc.WaitRequest) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := deadlineKey{id, req.ID}
	if d.stopped || d.fire == nil || d.byKey[k] != nil {
		return
	}
	if d.byKey == nil {
		d.byKey = make(map[deadlineKey]*deadline)
	}
	x := &deadline{at: *req.Deadline, id: id, req: req}
	d.byKey[k] = x
	heap.Push(&d.h, x)
	d.arm()
}

func (d *deadlines) remove(id, reqID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := deadlineKey{id, reqID}
	if x := d.byKey[k]; x != nil {
		delete(d.byKey, k)
		heap.Remove(&d.h, x.index)
		d.arm()
	}
}

// arm sets the timer for the earliest deadline; d.mu is held.
func (d *deadlines) arm() {
	if d.timer != nil {
		if d.timer.Stop() {
			d.running.Done() // its function will not run
		}
		d.timer = nil
	}
	if len(d.h) == 0 || d.stopped {
		return
	}
	d.running.Add(1)
	var t *time.Timer
	t = time.AfterFunc(time.Until(d.h[0].at), func() {
		defer d.running.Done()
		d.mu.Lock()
		if d.timer != t || d.stopped {
			d.mu.Unlock()
			return
		}
		d.timer = nil
		var due []*deadline
		for len(d.h) > 0 && !d.h[0].at.After(time.Now()) {
			x := heap.Pop(&d.h).(*deadline)
			delete(d.byKey, deadlineKey{x.id, x.req.ID})
			due = append(due, x)
		}
		d.arm()
		d.mu.Unlock()
		for _, x := range due {
			d.fire(x.id, x.req)
		}
	})
	d.timer = t
}

// stop stops the timer and waits for a deadline being applied.
func (d *deadlines) stop() {
	d.mu.Lock()
	d.stopped = true
	if d.timer != nil && d.timer.Stop() {
		d.running.Done() // its function will not run
	}
	d.timer = nil
	d.mu.Unlock()
	d.running.Wait()
}
