// Package submitted records submitted runs in the svc.RunStore: it
// creates them (under an Idempotency-Key when one is given), moves them
// through their states, writes their events and progress in order off the
// actors' path (Writer), and ends them with their result. Every write is
// retried while its error may pass; a run whose writes cannot be made is
// failed with reason store_error, so its stream ends and /result agrees
// with /status.
//
// The runtime (package supervisor) decides what a run does and when it
// ends; this package owns how that is written down.
package submitted

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
)

// How store errors are treated: a write is tried up to storeAttempts
// times, storeBackoff then 4× that apart, each try bounded by
// storeTimeout, while its error may pass (retryable). Stop ends the
// waiting: a run whose write is still failing then is left to the next
// start's Interrupt.
const (
	storeAttempts = 3
	storeBackoff  = 50 * time.Millisecond
	storeTimeout  = 10 * time.Second
)

// ReasonStoreError is the Reason of a run failed because the store could
// not record it.
const ReasonStoreError = "store_error"

// ErrStoreWrite is the cause a Writer cancels its run with when it cannot
// record the run's events.
var ErrStoreWrite = errors.New("run store write failed")

// Recorder writes submitted runs to one store.
type Recorder struct {
	store svc.RunStore
	keys  svc.IdempotentStore // store, or localKeys over it
	ttl   time.Duration
	log   *zap.Logger
	noIO  bool // the store does no I/O (inMemory)

	quit     chan struct{} // closed by Stop: retries stop waiting
	stopOnce sync.Once
}

// New returns a Recorder over store. Idempotency-Keys live in store when
// it is a svc.IdempotentStore, else in this process's memory; ttl is how
// long a key holds its run (svc.DefaultIdempotencyTTL when 0).
func New(store svc.RunStore, ttl time.Duration, log *zap.Logger) *Recorder {
	r := &Recorder{store: store, ttl: ttl, log: log, quit: make(chan struct{})}
	if is, ok := store.(svc.IdempotentStore); ok {
		r.keys = is
	} else {
		r.keys = &localKeys{RunStore: store, keys: map[string]*localKey{}}
	}
	_, r.noIO = store.(inMemory)
	return r
}

// Stop ends the waiting between retries (the runtime is shutting down):
// each write still failing gives up after its current try.
func (r *Recorder) Stop() { r.stopOnce.Do(func() { close(r.quit) }) }

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
func (r *Recorder) retry(parent context.Context, id, op string, f func(ctx context.Context, attempt int) error) error {
	wait := storeBackoff
	for attempt := 1; ; attempt++ {
		ctx, cancel := parent, context.CancelFunc(func() {})
		if !r.noIO {
			ctx, cancel = context.WithTimeout(parent, storeTimeout)
		}
		err := f(ctx, attempt)
		timedOut := err != nil && ctx.Err() != nil && parent.Err() == nil
		cancel()
		if err == nil || !(retryable(err) || timedOut) || attempt == storeAttempts || parent.Err() != nil {
			return err
		}
		r.log.Warn("run store write failed; retrying", zap.String("run_id", id), zap.String("op", op),
			zap.Int("attempt", attempt), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.quit:
			t.Stop()
			return err
		case <-parent.Done():
			t.Stop()
			return err
		}
		wait *= 4
	}
}

// Retry is retry for the writes of a run in progress, which no request's
// end may cut short.
func (r *Recorder) Retry(id, op string, f func(ctx context.Context) error) error {
	return r.retry(context.Background(), id, op, func(ctx context.Context, _ int) error { return f(ctx) })
}

// SetProgress records a run's progress, with retries.
func (r *Recorder) SetProgress(id string, p svc.RunProgress) error {
	return r.Retry(id, "set progress", func(c context.Context) error { return r.store.SetProgress(c, id, p) })
}

// SetState moves a run with retries. A refusal after a retried try may be
// the first try's own success, its answer lost: the run's state says.
func (r *Recorder) SetState(id string, next svc.RunState, reason string, final *svc.RunEvent) error {
	return r.retry(context.Background(), id, "set state "+string(next), func(ctx context.Context, attempt int) error {
		err := r.store.SetState(ctx, id, next, reason, final)
		if attempt > 1 && errors.Is(err, svc.ErrRunState) {
			if rec, gerr := r.store.Get(ctx, id); gerr == nil && rec.State == next && rec.Reason == reason {
				return nil
			}
		}
		return err
	})
}

// Finish ends a run with its result and final event in one store step,
// with retries; a refusal after a retried try is judged as SetState's.
func (r *Recorder) Finish(id string, next svc.RunState, reason string, result json.RawMessage, final *svc.RunEvent) error {
	return r.retry(context.Background(), id, "finish "+string(next), func(ctx context.Context, attempt int) error {
		err := r.store.Finish(ctx, id, next, reason, result, final)
		if attempt > 1 && errors.Is(err, svc.ErrRunState) {
			if rec, gerr := r.store.Get(ctx, id); gerr == nil && rec.State == next && rec.Reason == reason {
				return nil
			}
		}
		return err
	})
}

// Create stores a new run, with retries; ctx bounds them. A duplicate
// after a retried try is the first try's own write.
func (r *Recorder) Create(ctx context.Context, rec svc.RunRecord) error {
	return r.retry(ctx, rec.RunID, "create", func(ctx context.Context, attempt int) error {
		err := r.store.Create(ctx, rec)
		if attempt > 1 && errors.Is(err, svc.ErrRunState) && r.exists(ctx, rec.RunID) {
			return nil
		}
		return err
	})
}

// CreateKeyed stores a new run under an Idempotency-Key, with retries (a
// retry of the same key and request is what keys are for); fp is the
// request's Fingerprint. created is false when the key already held a
// run, whose id it returns.
func (r *Recorder) CreateKeyed(ctx context.Context, key, fp string, rec svc.RunRecord) (id string, created bool, err error) {
	err = r.retry(ctx, rec.RunID, "create", func(ctx context.Context, attempt int) error {
		var err error
		id, created, err = r.keys.CreateIdempotent(ctx, key, fp, rec, r.ttl)
		if attempt > 1 && id == rec.RunID {
			created = true // the first try made it; its answer was lost
		}
		return err
	})
	return id, created, err
}

// Fingerprint is the digest a key's reservation keeps of the request. The
// request id is tracing, not content: a retry may carry a new one.
func Fingerprint(req svc.SubmitRequest) string {
	task := req.Task
	task.RequestID = ""
	body, _ := json.Marshal(struct {
		T string       `json:"t"`
		K string       `json:"k"`
		R svc.TaskSpec `json:"r"`
		C string       `json:"c,omitempty"`
	}{req.Target, string(req.Kind), task, req.CallbackURL})
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

func (r *Recorder) exists(ctx context.Context, id string) bool {
	_, err := r.store.Get(ctx, id)
	return err == nil
}

// Failed logs a write that could not be made; the caller fails the run.
func (r *Recorder) Failed(id, op string, err error) {
	r.log.Error("run store write failed; failing the run", zap.String("run_id", id), zap.String("op", op), zap.Error(err))
}

// StoreErrorResult is the failed AgentResult of a run that failed because
// the store could not record it (reason store_error): a failed run never
// keeps a result that says success.
func StoreErrorResult(target string, task svc.TaskSpec) json.RawMessage {
	b, _ := json.Marshal(svc.AgentResult{AgentName: target, TaskID: task.ID,
		Error:    &svc.ErrorInfo{Type: string(svc.KindRuntime), Message: "the run store could not record the run", Reason: ReasonStoreError},
		Metadata: svc.ResultMetadata{TraceID: task.RequestID, Backend: svc.BackendLocal}})
	return b
}

// StoreErrorEvent is the terminal event of a run failed with store_error.
func StoreErrorEvent() *svc.RunEvent {
	return &svc.RunEvent{Type: svc.RunRunFailed, Error: ReasonStoreError, Timestamp: time.Now().UTC()}
}

// FailRun marks a run failed with reason store_error after a write that
// could not be made, with its failed result and run_failed as its last
// event (one Finish), so its stream ends and /result agrees with /status.
// A pending run goes through running (the state machine has no pending →
// failed). When this too fails, the run stays as the store has it until
// the next runtime's Interrupt marks it failed ("interrupted"); the log
// says so.
func (r *Recorder) FailRun(id, target string, task svc.TaskSpec) {
	result := StoreErrorResult(target, task)
	// Without its result when even that small one cannot be stored: a
	// failed run with no result (409) beats a run left open.
	end := func() error {
		err := r.Finish(id, svc.RunFailed, ReasonStoreError, result, StoreErrorEvent())
		if err != nil && !errors.Is(err, svc.ErrRunState) {
			err = r.SetState(id, svc.RunFailed, ReasonStoreError, StoreErrorEvent())
		}
		return err
	}
	err := end()
	if errors.Is(err, svc.ErrRunState) {
		var rec svc.RunRecord
		err = r.Retry(id, "get", func(ctx context.Context) error {
			var err error
			rec, err = r.store.Get(ctx, id)
			return err
		})
		switch {
		case err != nil:
		case rec.State.Terminal():
			return // it ended meanwhile (a cancel): nothing is left open
		case rec.State == svc.RunPending:
			if err = r.SetState(id, svc.RunRunning, "", nil); err == nil {
				err = end()
			}
		}
	}
	if err != nil {
		r.log.Error("cannot mark the run failed after a store error: the store keeps it unfinished "+
			"until the next start marks it failed (interrupted)", zap.String("run_id", id), zap.Error(err))
	}
}
