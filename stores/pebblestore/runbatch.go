package pebblestore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/svc-dev/svc"
)

var _ svc.RunBatchWriter = (*Store)(nil)

// AppendBatch writes a run's progress, events and steps in one batch
// through the commit queue, with one record write; see
// svc.RunBatchWriter.
func (s *Store) AppendBatch(ctx context.Context, runID string, b svc.RunBatch) (svc.RunBatchResult, error) {
	var res svc.RunBatchResult
	if len(b.Steps) > 0 {
		if err := svc.CheckSteps(b.Steps); err != nil {
			return res, err
		}
	}
	if b.Empty() {
		// Nothing to write: only the refusals (update would rewrite the
		// record for nothing).
		rec, err := s.Get(ctx, runID)
		if err == nil && rec.State.Terminal() {
			err = svc.Errorf(svc.KindRunState, "run %q is %s: write refused", runID, rec.State)
		}
		return res, err
	}
	now := time.Now().UTC()
	err := s.update(ctx, runID, func(st *stored, pb *pebble.Batch) error {
		res = svc.RunBatchResult{}
		if err := refuseTerminal(st, "write"); err != nil {
			return err
		}
		if b.Progress != nil {
			p := *b.Progress
			st.Progress = &p
		}
		for _, ev := range b.Events {
			seq, err := appendEvent(pb, st, ev)
			if err != nil {
				return err
			}
			res.LastEvent = seq
		}
		res.Steps, res.Full = svc.FitSteps(runID, st.StepBytes, s.maxStepBytes, b.Steps)
		for _, step := range b.Steps[:res.Steps] {
			if err := putStep(pb, st, step, now); err != nil {
				return err
			}
			res.LastStep = st.StepSeq
		}
		return nil
	})
	if err != nil {
		return svc.RunBatchResult{}, err
	}
	return res, nil
}

// putStep adds step to the run's log in b as its next, counting its size.
func putStep(b *pebble.Batch, st *stored, step svc.RunStep, now time.Time) error {
	st.StepSeq++
	at := now
	if !step.Timestamp.IsZero() {
		at = step.Timestamp.UTC()
	}
	v, err := json.Marshal(stepJSON{Seq: st.StepSeq, Kind: step.Kind, Key: step.Key, Data: step.Data, Timestamp: at})
	if err != nil {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: encode step of %q", st.RunID))
	}
	if err := b.Set(seqKey(stepPrefix, st.RunID, st.StepSeq), v, nil); err != nil {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("pebblestore: write step of %q", st.RunID))
	}
	st.StepBytes += step.Size()
	return nil
}
