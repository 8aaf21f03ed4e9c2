package supervisor

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/supervisor/submitted"
)

// settleProgress writes a submitted run's final progress, before its
// result and terminal state, when the store's may be out of date: the
// writer stopped on a store error (the updates after it were dropped), or
// invocations were still counted running as the run ended (they will not
// finish: they count failed). A terminal run thus never reports
// running > 0. A normal end needs no write: the writer stored the last
// update before execute closed it.
//
// It reports whether execute may go on recording the run: false when the
// store refused the write (the run is terminal already: cancelled, or
// interrupted by another process, and nothing may land on it). A write that
// fails after its retries is logged, and execute goes on: its terminal
// write meets the same store and handles its failure.
func (rt *Runtime) settleProgress(ctx context.Context, id string) bool {
	cause := context.Cause(ctx)
	if errors.Is(cause, errRunCancelled) {
		return true // CancelRun recorded the end; execute stops there
	}
	rs := runOf(ctx)
	p := rs.progress.Snapshot()
	if p.Running <= 0 && !errors.Is(cause, submitted.ErrStoreWrite) {
		return true
	}
	if p.Running > 0 {
		p.Failed += p.Running
		p.Running = 0
	}
	err := rt.records.SetProgress(id, p)
	switch {
	case err == nil:
		return true
	case errors.Is(err, svc.ErrRunState):
		return false
	}
	rt.log.Error("run store write failed: the run's final progress is not recorded", zap.String("run_id", id), zap.Error(err))
	return true
}
