package memstore

import (
	"context"

	"github.com/svc-dev/svc"
)

var _ svc.RunBatchWriter = (*Store)(nil)

// AppendBatch writes a run's progress, events and steps under one lock;
// see svc.RunBatchWriter.
func (s *Store) AppendBatch(_ context.Context, runID string, b svc.RunBatch) (svc.RunBatchResult, error) {
	var res svc.RunBatchResult
	if len(b.Steps) > 0 {
		if err := svc.CheckSteps(b.Steps); err != nil {
			return res, err
		}
	}
	t := now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.live(runID, "writes")
	if err != nil {
		return res, err
	}
	if b.Empty() {
		return res, nil
	}
	if b.Progress != nil {
		p := *b.Progress
		r.rec.Progress, r.rec.UpdatedAt = &p, t
	}
	for _, ev := range b.Events {
		res.LastEvent = r.add(ev)
	}
	res.Steps, res.Full = svc.FitSteps(runID, r.stepBytes, s.maxStepBytes, b.Steps)
	for _, st := range b.Steps[:res.Steps] {
		st.Seq = int64(len(r.steps)) + 1
		st.Data = cloneBytes(st.Data)
		if st.Timestamp.IsZero() {
			st.Timestamp = t
		} else {
			st.Timestamp = normTime(st.Timestamp)
		}
		r.steps = append(r.steps, st)
		r.stepBytes += st.Size()
		res.LastStep = st.Seq
	}
	if len(b.Events) > 0 {
		r.broadcast()
	}
	return res, nil
}
