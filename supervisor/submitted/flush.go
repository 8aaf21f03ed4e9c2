package submitted

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
)

// flush writes what the writer took from its queue (the latest progress,
// then the events and steps in the order they were queued) as one
// AppendBatch: one store op, one retry loop and one commit for the lot,
// where a write each cost a commit-queue entry, a retry closure and a
// wake-up each (BENCHMARKS.md, issue 30 part 6). The batch is atomic, so a
// step is still never in the store ahead of the events queued before it;
// each Step waiting in the batch is released once it is committed (or
// could not be). stopped says an earlier write was refused or failed; the
// answer says whether the writer must stop writing.
func (w *Writer) flush(bw svc.RunBatchWriter, stopped bool, prog *svc.RunProgress, entries []entry) bool {
	defer func() {
		for _, e := range entries {
			if e.done != nil {
				close(e.done)
			}
		}
	}()
	if stopped {
		return true
	}
	b := svc.RunBatch{Progress: prog}
	for _, e := range entries {
		if e.step != nil {
			b.Steps = append(b.Steps, *e.step)
		} else {
			b.Events = append(b.Events, e.ev)
		}
	}
	if b.Empty() {
		return false
	}
	res, err := w.appendBatch(bw, b)
	if svc.KindOf(err) == svc.KindSpecValidation && len(b.Steps) > 0 {
		// A step the store refuses (not one JSON value: a bug upstream)
		// must not cost the run its events: write them without the steps,
		// then each step alone, so the log names the one refused.
		steps := b.Steps
		b.Steps = nil
		if res, err = w.appendBatch(bw, b); err == nil {
			for i := range steps {
				w.writeStep(&steps[i])
			}
			return false
		}
	}
	if err != nil {
		if len(b.Events) == 0 && b.Progress == nil && !errors.Is(err, svc.ErrRunState) {
			// Steps alone: not worth failing the run for (see writeStep).
			w.r.log.Warn("run steps not recorded: a resume would pay for them again", zap.String("run_id", w.id),
				zap.Int("steps", len(b.Steps)), zap.Error(err))
			return false
		}
		return w.check("write events", err)
	}
	if res.Full != nil && !w.full {
		w.full = true
		w.r.log.Warn("run's step log is full: later steps are not recorded, and a resume would pay for them again",
			zap.String("run_id", w.id), zap.Error(res.Full))
	}
	return false
}

// appendBatch is one AppendBatch with the writer's retries. A retry may
// store the batch twice if the store applied the first try but its answer
// was lost: a duplicate is better than a hole (a step recorded twice under
// one key replays the later, which is the same).
func (w *Writer) appendBatch(bw svc.RunBatchWriter, b svc.RunBatch) (svc.RunBatchResult, error) {
	var res svc.RunBatchResult
	err := w.r.Retry(w.id, "write batch", func(c context.Context) error {
		var err error
		res, err = bw.AppendBatch(c, w.id, b)
		return err
	})
	return res, err
}
