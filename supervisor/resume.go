package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/svc-dev/svc"
	"go.uber.org/zap"
)

// Durable runs (issue 30). With a persistent run store that keeps tasks and
// step logs (svc.ResumableStore, but not an in-memory one) every submitted
// run keeps its task, and its journal records each completed model call,
// tool call and group node (agent/replay.go, actors/replay.go). A new
// runtime on the store claims the runs its dead predecessor left running
// (New: Recover) and, once its agents are registered, starts them again
// (ResumeRuns): a replayed step returns its recorded result, so the run
// reaches the point where it stopped without paying for anything twice,
// and goes on. A serve node sharing a Redis store claims the runs of a node
// whose lease expired the same way (ClaimExpired).
//
// A run is not resumed, and fails with reason "interrupted" as before,
// when its target is gone from the specs, when it has been idle longer
// than the runtime's timeout (it would have timed out), or when its store
// record has no task (an older build made it).

// Resumes reports whether the runtime's store lets it resume submitted
// runs (a persistent svc.ResumableStore).
func (rt *Runtime) Resumes() bool { return rt.resumes }

// ResumeRuns starts the runs New claimed from the store (a previous process
// left them unfinished) and returns how many it started. Call it once the
// runtime's agents and groups are registered: a run whose target is not
// registered then fails (interrupted), naming it. Later calls start
// nothing.
func (rt *Runtime) ResumeRuns(ctx context.Context) int {
	rt.mu.Lock()
	recs := rt.claimed
	rt.claimed = nil
	rt.mu.Unlock()
	rt.watchWaiting()
	return rt.resumeAll(ctx, recs)
}

// ClaimExpired claims, on a run store shared by several serve nodes, the
// unfinished runs of nodes whose lease expired, resumes those it can and
// fails the others, as Sweep would, and returns how many it resumed and
// failed. Called periodically by every node (app's sweeper): of several
// nodes, one gets each run.
func (rt *Runtime) ClaimExpired(ctx context.Context) (resumed, failed int, err error) {
	s, ok := rt.store.(svc.SharedRunStore)
	if !ok || !rt.resumes {
		return 0, 0, nil
	}
	recs, failed, err := s.ClaimExpired(ctx)
	if err != nil {
		return 0, failed, fmt.Errorf("claim runs of expired nodes: %w", err)
	}
	return rt.resumeAll(ctx, recs), failed, nil
}

func (rt *Runtime) resumeAll(ctx context.Context, recs []svc.RunRecord) int {
	n := 0
	for _, rec := range recs {
		if err := rt.resume(ctx, rec); err != nil {
			rt.log.Warn("run not resumed: marked failed (interrupted)", zap.String("run_id", rec.RunID),
				zap.String("target", rec.Target), zap.Error(err))
			rt.failUnresumable(rec, err)
			continue
		}
		n++
	}
	if n > 0 {
		rt.log.Info("runs left unfinished by a previous process resumed", zap.Int("runs", n))
	}
	return n
}

// resume starts one claimed run again with the steps it recorded.
func (rt *Runtime) resume(ctx context.Context, rec svc.RunRecord) error {
	var task svc.TaskSpec
	if err := json.Unmarshal(rec.Task, &task); err != nil {
		return fmt.Errorf("its stored task does not decode: %w", err)
	}
	reg := rt.reg.Load()
	kind, err := reg.Target(rec.Target, rec.Kind)
	if err != nil {
		return fmt.Errorf("its target is not in the specs any more: %w", err)
	}
	if idle, limit := time.Since(rec.UpdatedAt), rt.opts.Timeout(); limit > 0 && idle > limit {
		return fmt.Errorf("it was idle %v, longer than timeout_seconds (%v): it would have timed out", idle.Round(time.Second), limit)
	}
	log, _ := rt.store.(svc.StepLog)
	var steps []svc.RunStep
	if log != nil {
		if steps, err = log.Steps(ctx, rec.RunID, 0); err != nil {
			return fmt.Errorf("read its steps: %w", err)
		}
	}
	history, err := rt.store.Events(ctx, rec.RunID, 0)
	if err != nil {
		return fmt.Errorf("read its events: %w", err)
	}
	if err := rt.admit(); err != nil {
		return err
	}
	node := ""
	if s, ok := rt.store.(svc.SharedRunStore); ok {
		node = s.NodeID()
	}
	rt.emitter.Emit(svc.RuntimeEvent{EventType: svc.EventRunResumed, Timestamp: time.Now().UTC(), AgentName: rec.Target,
		TaskID: task.ID, TraceID: task.RequestID,
		Payload: svc.Payload{"run_id": rec.RunID, "steps_replayed": int64(len(steps)), "node": node, "resumed": int64(rec.Resumed)}})
	rt.startSubmitted(svc.WithRequestID(context.Background(), task.RequestID), rec.RunID, kind, rec.Target, task, steps,
		history, max(rec.Resumed, 1), rec.State == svc.RunRunning)
	return nil
}

// failUnresumable ends a claimed run that cannot be resumed as Interrupt
// would have, with why in its result.
func (rt *Runtime) failUnresumable(rec svc.RunRecord, why error) {
	res, _ := json.Marshal(svc.AgentResult{AgentName: rec.Target, Error: &svc.ErrorInfo{Type: string(svc.KindRuntime),
		Message: "run interrupted and not resumed: " + why.Error(), Reason: svc.ReasonInterrupted}})
	ev := svc.InterruptedEvent(time.Now().UTC())
	if err := rt.records.Finish(rec.RunID, svc.RunFailed, svc.ReasonInterrupted, res, &ev); err != nil && !errors.Is(err, svc.ErrRunState) {
		rt.records.Failed(rec.RunID, "fail unresumable run", err)
	}
}
