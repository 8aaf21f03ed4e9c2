package faultstore

import (
	"context"

	"github.com/svc-dev/svc"
)

// AppendBatch names svc.RunBatchWriter's method (Batching).
const AppendBatch Method = "AppendBatch"

// Batching is a Resumable over a store that also writes batches
// (svc.RunBatchWriter), so tests see which writes a caller makes as one
// batch and which alone, and can fail the batches.
type Batching struct {
	*Resumable
	inner svc.RunBatchWriter
}

// BatchingStore is what Batching wraps: every store in stores/ is one.
type BatchingStore interface {
	svc.ResumableStore
	svc.RunBatchWriter
}

var _ svc.RunBatchWriter = (*Batching)(nil)

// NewBatching wraps inner.
func NewBatching(inner BatchingStore) *Batching {
	return &Batching{Resumable: NewResumable(inner), inner: inner}
}

// AppendBatch implements svc.RunBatchWriter.
func (s *Batching) AppendBatch(ctx context.Context, runID string, b svc.RunBatch) (svc.RunBatchResult, error) {
	if err := s.check(AppendBatch, ""); err != nil {
		return svc.RunBatchResult{}, err
	}
	return s.inner.AppendBatch(ctx, runID, b)
}
