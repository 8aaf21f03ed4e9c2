// Package runstest provides Runs, a semantic in-memory svc.RunBackend for
// the tests of the HTTP server and clients: one fake shared by both, so the
// two suites test against the same rules.
package runstest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/memstore"
)

// Runs is an svc.RunBackend over an svc.Backend and a memstore, with
// the runtime's rules: targets (and a task's token_budget) are checked
// before anything is stored, a
// run goes pending → running → completed (its result stored with the
// terminal state, in one Finish), an
// agent run records agent_started and agent_completed or agent_failed, a
// group run ends with group_completed, and cancel stops the run's context
// and records cancelled with run_cancelled. Embedding the Backend, it is
// both.
type Runs struct {
	svc.Backend
	Store *memstore.Store

	mu      sync.Mutex
	cancels map[string]context.CancelFunc
	wg      sync.WaitGroup
	// Hold, when set, keeps submitted runs pending until it is closed.
	Hold chan struct{}
}

// New returns a Runs over b, stopped when the test ends.
func New(t *testing.T, b svc.Backend) *Runs {
	f := &Runs{Backend: b, Store: memstore.New(), cancels: map[string]context.CancelFunc{}}
	t.Cleanup(f.stop)
	return f
}

func (f *Runs) stop() {
	f.mu.Lock()
	for _, c := range f.cancels {
		c()
	}
	f.mu.Unlock()
	f.wg.Wait()
	f.Store.Close()
}

func (f *Runs) kindOf(ctx context.Context, req svc.SubmitRequest) (svc.TargetKind, error) {
	agents, err := f.Agents(ctx)
	if err != nil {
		return "", err
	}
	groups, err := f.Groups(ctx)
	if err != nil {
		return "", err
	}
	isAgent, isGroup := slices.Contains(agents, req.Target), slices.Contains(groups, req.Target)
	switch {
	case req.Kind == svc.TargetAgent && isAgent, req.Kind == "" && isAgent && !isGroup:
		return svc.TargetAgent, nil
	case req.Kind == svc.TargetGroup && isGroup, req.Kind == "" && isGroup && !isAgent:
		return svc.TargetGroup, nil
	case req.Kind == "" && isAgent && isGroup:
		return "", svc.Errorf(svc.KindSpecValidation, "target %q is both an agent and a group: give kind", req.Target)
	}
	// The runtime's words (clienttest checks them).
	switch {
	case req.Kind == svc.TargetAgent && isGroup:
		return "", svc.Errorf(svc.KindRegistry, "unknown agent target %q: %s is a group: submit it with kind %q", req.Target, req.Target, svc.TargetGroup)
	case req.Kind == svc.TargetGroup && isAgent:
		return "", svc.Errorf(svc.KindRegistry, "unknown group target %q: %s is an agent: submit it with kind %q", req.Target, req.Target, svc.TargetAgent)
	}
	return "", svc.Errorf(svc.KindRegistry, "unknown %s %q (registered agents: %s; registered groups: %s)",
		strings.TrimSpace(string(req.Kind)+" target"), req.Target, strings.Join(agents, ", "), strings.Join(groups, ", "))
}

func (f *Runs) Submit(ctx context.Context, req svc.SubmitRequest) (string, error) {
	kind, err := f.kindOf(ctx, req)
	if err != nil {
		return "", err
	}
	// The runtime refuses a task it would refuse to run before storing it.
	if err := req.Task.CheckTokenBudget(); err != nil {
		return "", err
	}
	id := uuid.Must(uuid.NewV7()).String()
	// The trace id is fixed here, as the runtime does: the status has it
	// from the start, and the run's task carries it.
	if req.Task.RequestID == "" {
		req.Task.RequestID = svc.RequestIDFrom(ctx)
	}
	if req.Task.RequestID == "" {
		req.Task.RequestID = uuid.Must(uuid.NewV7()).String()
	}
	rec := svc.RunRecord{RunID: id, Target: req.Target, Kind: kind, TraceID: req.Task.RequestID, State: svc.RunPending, CreatedAt: time.Now()}
	if req.IdempotencyKey != "" {
		// As the runtime does: the same key and request return the first
		// run, another request with the key is a RunStateError.
		task := req.Task
		task.RequestID = ""
		fp, err := json.Marshal([]any{req.Target, req.Kind, task})
		if err != nil {
			return "", err
		}
		got, created, err := f.Store.CreateIdempotent(ctx, req.IdempotencyKey, string(fp), rec, 0)
		if err != nil || !created {
			return got, err
		}
	} else if err := f.Store.Create(ctx, rec); err != nil {
		return "", err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.mu.Lock()
	f.cancels[id] = cancel
	hold := f.Hold
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer cancel()
		if hold != nil {
			select {
			case <-hold:
			case <-runCtx.Done():
				return
			}
		}
		f.execute(runCtx, id, kind, req)
	}()
	return id, nil
}

// execute runs a submitted run; store errors after a cancel (the run is
// terminal) are expected and dropped.
func (f *Runs) execute(ctx context.Context, id string, kind svc.TargetKind, req svc.SubmitRequest) {
	st := f.Store
	if st.SetState(ctx, id, svc.RunRunning, "", nil) != nil {
		return
	}
	ev := func(typ svc.RunEventType, agent, errText string) svc.RunEvent {
		return svc.RunEvent{Type: typ, RunID: id, Agent: agent, TaskID: req.Task.ID, Error: errText, Timestamp: time.Now()}
	}
	var (
		result any
		final  *svc.RunEvent
		failed bool
	)
	if kind == svc.TargetAgent {
		_, _ = st.Append(ctx, id, ev(svc.RunAgentStarted, req.Target, ""))
		res, err := f.Run(ctx, req.Target, req.Task)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			res = svc.AgentResult{AgentName: req.Target, TaskID: req.Task.ID, Error: svc.ErrorInfoOf(err)}
		}
		if res.Success {
			_, _ = st.Append(ctx, id, ev(svc.RunAgentCompleted, req.Target, ""))
		} else {
			_, _ = st.Append(ctx, id, ev(svc.RunAgentFailed, req.Target, res.Error.Message))
		}
		result, failed = res, !res.Success
	} else {
		res, err := f.RunGroup(ctx, req.Target, req.Task)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			_ = st.SetState(ctx, id, svc.RunFailed, err.Error(), nil)
			return
		}
		if res.Agent != nil {
			result = res.Agent
		} else {
			result = res.Group
		}
		final, failed = &svc.RunEvent{Type: svc.RunGroupCompleted, RunID: id, Timestamp: time.Now()}, !res.Success()
	}
	data, _ := json.Marshal(result)
	next := svc.RunCompleted
	if failed {
		next = svc.RunFailed
	}
	_ = st.Finish(ctx, id, next, "", data, final)
}

func (f *Runs) RunStatus(ctx context.Context, id string) (svc.RunStatus, error) {
	rec, err := f.Store.Get(ctx, id)
	if err != nil {
		return svc.RunStatus{}, err
	}
	return rec.Status(), nil
}

func (f *Runs) RunResult(ctx context.Context, id string) (json.RawMessage, error) {
	rec, err := f.Store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !rec.State.Terminal() || rec.State == svc.RunCancelled || rec.Result == nil {
		return nil, svc.Errorf(svc.KindRunState, "run %q is %s: no result", id, rec.State)
	}
	return rec.Result, nil
}

func (f *Runs) CancelRun(ctx context.Context, id string) error {
	rec, err := f.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	if !rec.State.Terminal() {
		err := f.Store.SetState(ctx, id, svc.RunCancelled, "cancelled",
			&svc.RunEvent{Type: svc.RunRunCancelled, RunID: id, Timestamp: time.Now()})
		if err != nil && !errors.Is(err, svc.ErrRunState) {
			return err
		}
	}
	f.mu.Lock()
	if c := f.cancels[id]; c != nil {
		c()
	}
	f.mu.Unlock()
	return nil
}

func (f *Runs) RunEvents(ctx context.Context, id string, after int64) (<-chan svc.RunEvent, error) {
	return f.Store.Stream(ctx, id, after)
}

// SetProgress records progress for a run, as the runtime does while it
// runs.
func (f *Runs) SetProgress(t *testing.T, id string, p svc.RunProgress) {
	t.Helper()
	if err := f.Store.SetProgress(t.Context(), id, p); err != nil {
		t.Fatal(err)
	}
}
