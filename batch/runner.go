package batch

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
)

// A runner runs one batch: it reads the batch's tasks a chunk at a time,
// skipping those whose result is stored (a resumed batch), hands them to
// the runtime's streamed gather, and stores the results in groups. Memory
// is the gather's window plus a chunk and a group of results, whatever the
// batch's size.

// flushSize and flushEvery bound a group of results: written together in
// one store transaction, they wait at most flushEvery while more keep
// coming.
const (
	flushSize  = 256
	flushEvery = 50 * time.Millisecond
)

type runner struct {
	m   *Manager
	rec svc.BatchRecord

	// pos maps the gather's index of a task (its place among the tasks
	// handed over in this life) to its index in the batch.
	mu  sync.Mutex
	pos map[int]int64
	// readErr is why reading the tasks stopped early.
	readErr error
}

func (r *runner) log() *zap.Logger { return r.m.log.With(zap.String("batch_id", r.rec.BatchID)) }

func (r *runner) run(ctx context.Context) {
	st := r.m.cfg.Store
	id := r.rec.BatchID
	if r.rec.State == svc.BatchQueued {
		if err := st.SetBatchState(ctx, id, svc.BatchRunning, ""); err != nil {
			if ctx.Err() == nil && svc.KindOf(err) != svc.KindRunState {
				r.log().Error("starting a batch failed; it stays queued until a process resumes it", zap.Error(err))
			}
			return
		}
	}
	// The batch id is the trace id of its tasks' events, in every life,
	// so /usage?group_by=trace and /runs/{id}/tree find the batch by it.
	ctx = svc.WithRequestID(ctx, id)
	// A cancel made on another node reaches this one through the store.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		r.watch(ctx, cancel)
	}()
	defer func() { cancel(nil); <-watchDone }()
	if r.rec.Mode == svc.BatchProvider {
		r.runProvider(ctx) // provider.go
		return
	}

	r.pos = map[int]int64{}
	var buf []svc.BatchResult
	last := time.Now()
	var flushErr error
	flush := func() bool {
		if len(buf) == 0 {
			return true
		}
		r.mu.Lock()
		running := int64(min(len(r.pos), r.rec.MaxConcurrency))
		r.mu.Unlock()
		// The results in buf are done: they are written even when ctx
		// ended meanwhile (a shutdown), so that a resume does not run
		// them again.
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, err := st.AddBatchResults(wctx, id, running, buf)
		wcancel()
		buf, last = buf[:0], time.Now()
		if err != nil {
			flushErr = err
			cancel(err)
			return false
		}
		return true
	}
	var runErr error
	for item, err := range r.m.cfg.Runner.GatherStream(ctx, r.rec.Target, r.tasks(ctx), r.rec.MaxConcurrency) {
		if err != nil {
			runErr = err
			continue
		}
		r.mu.Lock()
		idx, ok := r.pos[item.Index]
		delete(r.pos, item.Index)
		r.mu.Unlock()
		if !ok || ctx.Err() != nil || item.Result.Error != nil && item.Result.Error.Type == string(svc.KindShuttingDown) {
			// Stopping: the task failed for that, not for itself, and
			// runs again when the batch resumes.
			continue
		}
		data, err := json.Marshal(item.Result)
		if err != nil {
			data, _ = json.Marshal(svc.AgentResult{AgentName: item.Result.AgentName, TaskID: item.Result.TaskID,
				Error: &svc.ErrorInfo{Type: string(svc.KindRuntime), Message: "encoding the result: " + err.Error()}})
		}
		md := item.Result.Metadata
		buf = append(buf, svc.BatchResult{Index: idx, Result: data, Success: item.Result.Success, Tokens: md.TokensUsed, Cost: md.CostUSD})
		if len(buf) >= flushSize || !item.More || time.Since(last) >= flushEvery {
			if !flush() {
				break
			}
		}
	}
	flush()
	switch {
	case flushErr != nil:
		if svc.KindOf(flushErr) == svc.KindRunState {
			return // cancelled (or ended) elsewhere
		}
		r.log().Error("storing a batch's results failed; the batch stops here and resumes in the next process", zap.Error(flushErr))
		return
	case ctx.Err() != nil:
		return // cancelled, or this process stops: the store says which
	case r.readErr != nil:
		r.log().Error("reading a batch's tasks failed; it resumes in the next process", zap.Error(r.readErr))
		return
	case runErr != nil:
		// A rejection of the whole batch (its agent is gone after a
		// restart, the runtime is shutting down).
		if svc.KindOf(runErr) == svc.KindShuttingDown || svc.KindOf(runErr) == svc.KindCancelled {
			return
		}
		r.end(svc.BatchFailed, runErr.Error())
		return
	}
	r.end(svc.BatchCompleted, "")
}

func (r *runner) end(state svc.BatchState, reason string) {
	ctx, cancel := context.WithTimeout(r.m.ctx, 10*time.Second)
	defer cancel()
	err := r.m.cfg.Store.SetBatchState(ctx, r.rec.BatchID, state, reason)
	if err != nil && svc.KindOf(err) != svc.KindRunState && r.m.ctx.Err() == nil {
		r.log().Error("ending a batch failed", zap.String("state", string(state)), zap.Error(err))
	}
	r.m.ended(r.rec.BatchID)
}

// watch stops the batch once the store says it ended (cancelled on any
// node).
func (r *runner) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(max(r.m.cfg.Poll, time.Second/2))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rec, err := r.m.cfg.Store.GetBatch(ctx, r.rec.BatchID)
		if err == nil && rec.State.Terminal() {
			cancel(svc.BatchEnded(rec.BatchID, rec.State))
			return
		}
	}
}

// tasks yields the batch's tasks that have no stored result, a chunk at a
// time.
func (r *runner) tasks(ctx context.Context) func(yield func(svc.TaskSpec) bool) {
	return func(yield func(svc.TaskSpec) bool) {
		st := r.m.cfg.Store
		id := r.rec.BatchID
		total := r.rec.Counts.Total
		i := 0
		for first := int64(0); first < total; first += svc.BatchChunkSize {
			chunk, err := st.BatchChunk(ctx, id, int(first/svc.BatchChunkSize))
			if err != nil {
				r.readErr = err
				return
			}
			done := map[int64]bool{}
			if r.rec.Resumed > 0 {
				res, err := st.BatchResults(ctx, id, svc.BatchByIndex, first-1, svc.BatchChunkSize)
				if err != nil {
					r.readErr = err
					return
				}
				for _, x := range res {
					done[x.Index] = true
				}
			}
			for j, raw := range chunk {
				idx := first + int64(j)
				if done[idx] {
					continue
				}
				t := decodeTask(raw)
				r.mu.Lock()
				r.pos[i] = idx
				r.mu.Unlock()
				i++
				if !yield(t) {
					return
				}
			}
		}
	}
}
