package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
)

// How the submit path treats store errors: a write is tried up to
// storeAttempts times, storeBackoff then 4× that apart, each try bounded by
// storeTimeout, while its error may pass (retryable). Shutdown ends the
// waiting: a run whose write is still failing then is left to the next
// start's Interrupt.
const (
	storeAttempts = 3
	storeBackoff  = 50 * time.Millisecond
	storeTimeout  = 10 * time.Second
	// reasonStoreError is the Reason of a run failed because the store
	// could not record it.
	reasonStoreError = "store_error"
)

// errStoreWrite is the cause the run writer cancels a run with when it
// cannot record the run's events.
var errStoreWrite = errors.New("run store write failed")

// retryable reports whether a store error may pass on a retry: the store's
// own failures (AgentRuntimeError: a lost connection, a busy file) may; its
// answers (a refused transition, an unknown run, a bad argument, a closed
// store) and the caller's cancellation will not.
func retryable(err error) bool {
	switch svc.KindOf(err) {
	case svc.KindRunState, svc.KindRegistry, svc.KindSpecValidation, svc.KindTopology, svc.KindPayloadTooLarge,
		svc.KindShuttingDown, svc.KindCancelled, svc.KindTimeout:
		return false
	}
	return true
}

// inMemory is a store that does no I/O (memstore): a write cannot hang, so
// it needs no timer of its own. A timer per try is most of what a write to
// such a store costs (six writes a run; BENCHMARKS.md, Submit).
type inMemory interface{ InMemory() bool }

// retry runs f until it succeeds, fails for good, or storeAttempts tries
// were made; f gets the try's number from 1. A try cut by storeTimeout is
// retried, unlike one whose parent ended.
func (rt *Runtime) retry(parent context.Context, id, op string, f func(ctx context.Context, attempt int) error) error {
	wait := storeBackoff
	_, noIO := rt.store.(inMemory)
	for attempt := 1; ; attempt++ {
		ctx, cancel := parent, context.CancelFunc(func() {})
		if !noIO {
			ctx, cancel = context.WithTimeout(parent, storeTimeout)
		}
		err := f(ctx, attempt)
		timedOut := err != nil && ctx.Err() != nil && parent.Err() == nil
		cancel()
		if err == nil || !(retryable(err) || timedOut) || attempt == storeAttempts || parent.Err() != nil {
			return err
		}
		rt.log.Warn("run store write failed; retrying", zap.String("run_id", id), zap.String("op", op),
			zap.Int("attempt", attempt), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-rt.quit:
			t.Stop()
			return err
		case <-parent.Done():
			t.Stop()
			return err
		}
		wait *= 4
	}
}

// storeRetry is retry for the writes of a run in progress, which no
// request's end may cut short.
func (rt *Runtime) storeRetry(id, op string, f func(ctx context.Context) error) error {
	return rt.retry(context.Background(), id, op, func(ctx context.Context, _ int) error { return f(ctx) })
}

// setState moves a run with retries. A refusal after a retried try may be
// the first try's own success, its answer lost: the run's state says.
func (rt *Runtime) setState(id string, next svc.RunState, reason string, final *svc.RunEvent) error {
	return rt.retry(context.Background(), id, "set state "+string(next), func(ctx context.Context, attempt int) error {
		err := rt.store.SetState(ctx, id, next, reason, final)
		if attempt > 1 && errors.Is(err, svc.ErrRunState) {
			if rec, gerr := rt.store.Get(ctx, id); gerr == nil && rec.State == next && rec.Reason == reason {
				return nil
			}
		}
		return err
	})
}

// finish ends a run with its result and final event in one store step,
// with retries; a refusal after a retried try is judged as setState's.
func (rt *Runtime) finish(id string, next svc.RunState, reason string, result json.RawMessage, final *svc.RunEvent) error {
	return rt.retry(context.Background(), id, "finish "+string(next), func(ctx context.Context, attempt int) error {
		err := rt.store.Finish(ctx, id, next, reason, result, final)
		if attempt > 1 && errors.Is(err, svc.ErrRunState) {
			if rec, gerr := rt.store.Get(ctx, id); gerr == nil && rec.State == next && rec.Reason == reason {
				return nil
			}
		}
		return err
	})
}

// createRun stores a new run, with retries; the caller's context bounds
// them. A duplicate after a retried try is the first try's own write.
func (rt *Runtime) createRun(ctx context.Context, rec svc.RunRecord) error {
	return rt.retry(ctx, rec.RunID, "create", func(ctx context.Context, attempt int) error {
		err := rt.store.Create(ctx, rec)
		if attempt > 1 && errors.Is(err, svc.ErrRunState) && rt.exists(ctx, rec.RunID) {
			return nil
		}
		return err
	})
}

// createKeyed stores a new run under an Idempotency-Key, with retries (a
// retry of the same key and request is what keys are for). created is
// false when the key already held a run, whose id it returns.
func (rt *Runtime) createKeyed(ctx context.Context, key, fp string, rec svc.RunRecord) (id string, created bool, err error) {
	err = rt.retry(ctx, rec.RunID, "create", func(ctx context.Context, attempt int) error {
		var err error
		id, created, err = rt.keys.CreateIdempotent(ctx, key, fp, rec, rt.idemTTL)
		if attempt > 1 && id == rec.RunID {
			created = true // the first try made it; its answer was lost
		}
		return err
	})
	return id, created, err
}

func (rt *Runtime) exists(ctx context.Context, id string) bool {
	_, err := rt.store.Get(ctx, id)
	return err == nil
}

// storeFailed logs a write that could not be made.
func (rt *Runtime) storeFailed(id, op string, err error) {
	rt.log.Error("run store write failed; failing the run", zap.String("run_id", id), zap.String("op", op), zap.Error(err))
}

// storeErrorResult is the failed AgentResult of a run that failed because
// the store could not record it (reason store_error): a failed run never
// keeps a result that says success.
func storeErrorResult(target string, task svc.TaskSpec) json.RawMessage {
	b, _ := json.Marshal(svc.AgentResult{AgentName: target, TaskID: task.ID,
		Error:    &svc.ErrorInfo{Type: string(svc.KindRuntime), Message: "the run store could not record the run", Reason: reasonStoreError},
		Metadata: svc.ResultMetadata{TraceID: task.RequestID, Backend: svc.BackendLocal}})
	return b
}

// storeErrorEvent is the terminal event of a run failed with store_error.
func storeErrorEvent() *svc.RunEvent {
	return &svc.RunEvent{Type: svc.RunRunFailed, Error: reasonStoreError, Timestamp: time.Now().UTC()}
}

// failRun marks a run failed with reason store_error after a write that
// could not be made, with its failed result and run_failed as its last
// event (one Finish), so its stream ends and /result agrees with /status.
// A pending run goes through running (the state machine has no pending →
// failed). When this too fails, the run stays as the store has it until
// the next runtime's Interrupt marks it failed ("interrupted"); the log
// says so.
func (rt *Runtime) failRun(id, target string, task svc.TaskSpec) {
	result := storeErrorResult(target, task)
	// Without its result when even that small one cannot be stored: a
	// failed run with no result (409) beats a run left open.
	end := func() error {
		err := rt.finish(id, svc.RunFailed, reasonStoreError, result, storeErrorEvent())
		if err != nil && !errors.Is(err, svc.ErrRunState) {
			err = rt.setState(id, svc.RunFailed, reasonStoreError, storeErrorEvent())
		}
		return err
	}
	err := end()
	if errors.Is(err, svc.ErrRunState) {
		var rec svc.RunRecord
		err = rt.storeRetry(id, "get", func(ctx context.Context) error {
			var err error
			rec, err = rt.store.Get(ctx, id)
			return err
		})
		switch {
		case err != nil:
		case rec.State.Terminal():
			return // it ended meanwhile (a cancel): nothing is left open
		case rec.State == svc.RunPending:
			if err = rt.setState(id, svc.RunRunning, "", nil); err == nil {
				err = end()
			}
		}
	}
	if err != nil {
		rt.log.Error("cannot mark the run failed after a store error: the store keeps it unfinished "+
			"until the next start marks it failed (interrupted)", zap.String("run_id", id), zap.Error(err))
	}
}

// localKeys keeps Idempotency-Keys in memory for a store that is no
// svc.IdempotentStore: one process, forgotten at restart. No lock is held
// while the store creates the run: the key is reserved first, and a retry
// racing the first call waits for that call's outcome.
type localKeys struct {
	svc.RunStore
	mu   sync.Mutex
	keys map[string]*localKey
}

type localKey struct {
	fp, runID string
	expires   time.Time
	ready     chan struct{} // closed once the run is created or failed
	failed    bool          // written under mu before ready closes
}

func (l *localKeys) CreateIdempotent(ctx context.Context, key, fp string, rec svc.RunRecord, ttl time.Duration) (string, bool, error) {
	if ttl <= 0 {
		ttl = svc.DefaultIdempotencyTTL
	}
	for {
		now := time.Now()
		l.mu.Lock()
		if k, ok := l.keys[key]; ok && now.Before(k.expires) {
			l.mu.Unlock()
			select {
			case <-k.ready:
			case <-ctx.Done():
				return "", false, ctx.Err()
			}
			l.mu.Lock()
			failed := k.failed
			l.mu.Unlock()
			switch {
			case failed:
				continue // its call failed and dropped the key: try ours
			case k.fp != fp:
				return "", false, svc.IdempotencyConflict(key, k.runID)
			}
			return k.runID, false, nil
		}
		if len(l.keys) >= svc.MaxIdempotencyKeys {
			l.evict(now)
		}
		k := &localKey{fp: fp, runID: rec.RunID, expires: now.Add(ttl), ready: make(chan struct{})}
		l.keys[key] = k
		l.mu.Unlock()
		err := l.Create(ctx, rec)
		l.mu.Lock()
		if err != nil {
			k.failed = true
			if l.keys[key] == k {
				delete(l.keys, key)
			}
		}
		l.mu.Unlock()
		close(k.ready)
		if err != nil {
			return "", false, err
		}
		return rec.RunID, true, nil
	}
}

// evict drops the expired keys, or else the oldest settled one; l.mu is
// held.
func (l *localKeys) evict(now time.Time) {
	oldest := ""
	for key, k := range l.keys {
		select {
		case <-k.ready:
		default:
			continue // its run is being created
		}
		if !now.Before(k.expires) {
			delete(l.keys, key)
		} else if oldest == "" || k.expires.Before(l.keys[oldest].expires) {
			oldest = key
		}
	}
	if len(l.keys) >= svc.MaxIdempotencyKeys && oldest != "" {
		delete(l.keys, oldest)
	}
}
