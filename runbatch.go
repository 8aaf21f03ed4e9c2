package svc

import "context"

// RunBatch is what a RunBatchWriter writes to one run in one atomic step:
// a submitted run's writer hands the store everything queued for the run
// since its last write (its latest progress, its events and its steps) at
// once, so they share one store op, one retry and one commit instead of a
// write each.
type RunBatch struct {
	// Progress, when not nil, replaces the run's progress.
	Progress *RunProgress
	// Events are appended in order, numbered as Append numbers them.
	Events []RunEvent
	// Steps are appended to the run's step log in order, numbered and
	// checked as AppendSteps does them, while they fit its bound.
	Steps []RunStep
}

// Empty reports whether b writes nothing.
func (b RunBatch) Empty() bool { return b.Progress == nil && len(b.Events) == 0 && len(b.Steps) == 0 }

// RunBatchResult is what an AppendBatch wrote.
type RunBatchResult struct {
	// LastEvent is the Seq of the batch's last event (0 without events).
	LastEvent int64
	// LastStep is the Seq of the batch's last step written (0 when none
	// was).
	LastStep int64
	// Steps is how many of the batch's steps were written: all of them,
	// unless the step log would pass its bound; Full then says so.
	Steps int
	// Full is the StepLogFull error of the first step that would have
	// taken the run's step log past its bound: that step and every later
	// one of the batch were not written (the log stays a prefix of what
	// the run recorded); the progress, the events and the steps before it
	// were. nil when every step was written.
	Full error
}

// RunBatchWriter is a store that writes a RunBatch in one atomic step
// (one transaction, one script, one group-commit entry). Every store in
// stores/ implements it (storetest's Batch subtests check it); a caller
// falls back to SetProgress, Append and AppendSteps for a store without
// it.
//
// AppendBatch refuses, writing nothing, a batch whose steps CheckSteps
// refuses (SpecValidationError), a run that is terminal (RunStateError)
// and an unknown run (RegistryError). A full step log is not a refusal:
// the events of a batch are the run's history and are never dropped for
// its steps, which only save a resumed run a call; see RunBatchResult.Full.
// A batch with neither progress nor events nor steps writes nothing and
// succeeds.
type RunBatchWriter interface {
	StepLog
	AppendBatch(ctx context.Context, runID string, b RunBatch) (RunBatchResult, error)
}

// FitSteps is how many of steps, from the first, fit in a step log that
// holds have bytes of limit, and the StepLogFull error of the first that
// does not (nil when all fit): the part of an AppendBatch that every store
// shares.
func FitSteps(runID string, have, limit int64, steps []RunStep) (n int, full error) {
	for i, st := range steps {
		if have+st.Size() > limit {
			return i, StepLogFull(runID, have, st.Size(), limit)
		}
		have += st.Size()
	}
	return len(steps), nil
}
