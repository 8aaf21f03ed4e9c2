package memstore

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/svc-dev/svc"
)

var _ svc.BatchStore = (*Store)(nil)

// batches are the store's batches, under their own mutex: a batch's
// writes never wait for the runs'.
type batches struct {
	mu     sync.Mutex
	m      map[string]*batch
	chunks map[string]map[int][]json.RawMessage // by batch id, before and after CreateBatch
}

type batch struct {
	rec     svc.BatchRecord
	results map[int64]svc.BatchResult
	// byFinish[i] is the index of the result with Seq i+1.
	byFinish []int64
}

func (b *batches) init() {
	if b.m == nil {
		b.m = map[string]*batch{}
		b.chunks = map[string]map[int][]json.RawMessage{}
	}
}

// PutBatchChunk stores a chunk of tasks; see svc.BatchStore.
func (s *Store) PutBatchChunk(_ context.Context, batchID string, n int, tasks []json.RawMessage) error {
	if n < 0 {
		return svc.Errorf(svc.KindSpecValidation, "batch %q: negative chunk %d", batchID, n)
	}
	cp := make([]json.RawMessage, len(tasks))
	for i, t := range tasks {
		cp[i] = slices.Clone(t)
	}
	b := &s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	if b.chunks[batchID] == nil {
		b.chunks[batchID] = map[int][]json.RawMessage{}
	}
	b.chunks[batchID][n] = cp
	return nil
}

// BatchChunk returns a chunk of tasks; see svc.BatchStore.
func (s *Store) BatchChunk(_ context.Context, batchID string, n int) ([]json.RawMessage, error) {
	b := &s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	c, ok := b.chunks[batchID][n]
	if !ok {
		return nil, svc.Errorf(svc.KindRegistry, "batch %q: no chunk %d", batchID, n)
	}
	return c, nil
}

// CreateBatch stores a batch's record; see svc.BatchStore.
func (s *Store) CreateBatch(_ context.Context, rec svc.BatchRecord) error {
	if err := svc.CheckBatchRecord(&rec); err != nil {
		return err
	}
	t := now()
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = t
	}
	rec.UpdatedAt = t
	b := &s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	if _, ok := b.m[rec.BatchID]; ok {
		return svc.Errorf(svc.KindRunState, "batch %q exists", rec.BatchID)
	}
	rec.Provider = slices.Clone(rec.Provider)
	b.m[rec.BatchID] = &batch{rec: rec, results: map[int64]svc.BatchResult{}}
	return nil
}

func (b *batches) get(batchID string) (*batch, error) {
	b.init()
	x, ok := b.m[batchID]
	if !ok {
		return nil, svc.UnknownBatch(batchID)
	}
	return x, nil
}

// GetBatch returns a batch's record; see svc.BatchStore.
func (s *Store) GetBatch(_ context.Context, batchID string) (svc.BatchRecord, error) {
	b := &s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	x, err := b.get(batchID)
	if err != nil {
		return svc.BatchRecord{}, err
	}
	rec := x.rec
	rec.Provider = slices.Clone(rec.Provider)
	return rec, nil
}

// ListBatches lists batches newest first (their ids are UUIDv7); see
// svc.BatchStore.
func (s *Store) ListBatches(_ context.Context, cursor string, limit int) (svc.BatchPage, error) {
	limit, err := svc.BatchPageLimit(limit)
	if err != nil {
		return svc.BatchPage{}, err
	}
	b := &s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	ids := make([]string, 0, len(b.m))
	for id := range b.m {
		if cursor == "" || id < cursor {
			ids = append(ids, id)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(ids)))
	page := svc.BatchPage{Batches: []svc.BatchStatus{}}
	for i, id := range ids {
		if i == limit {
			page.NextCursor = page.Batches[limit-1].BatchID
			break
		}
		page.Batches = append(page.Batches, b.m[id].rec.BatchStatus)
	}
	return page, nil
}

// AddBatchResults stores results; see svc.BatchStore.
func (s *Store) AddBatchResults(_ context.Context, batchID string, running int64, results []svc.BatchResult) (int, error) {
	for _, r := range results {
		if !json.Valid(r.Result) || r.Index < 0 {
			return 0, svc.Errorf(svc.KindSpecValidation, "batch %q: result %d is not a JSON value at a valid index", batchID, r.Index)
		}
	}
	b := &s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	x, err := b.get(batchID)
	if err != nil {
		return 0, err
	}
	if x.rec.State.Terminal() {
		return 0, svc.BatchEnded(batchID, x.rec.State)
	}
	n := 0
	for _, r := range results {
		if _, dup := x.results[r.Index]; dup {
			continue
		}
		n++
		x.byFinish = append(x.byFinish, r.Index)
		x.results[r.Index] = svc.BatchResult{Index: r.Index, Seq: int64(len(x.byFinish)), Result: slices.Clone(r.Result)}
		if r.Success {
			x.rec.Counts.Succeeded++
		} else {
			x.rec.Counts.Failed++
		}
		x.rec.TokensUsed += r.Tokens
		x.rec.CostUSD += r.Cost
	}
	x.rec.Counts.Running = running
	x.rec.UpdatedAt = now()
	return n, nil
}

// BatchResults reads results; see svc.BatchStore.
func (s *Store) BatchResults(_ context.Context, batchID string, order svc.BatchOrder, after int64, limit int) ([]svc.BatchResult, error) {
	b := &s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	x, err := b.get(batchID)
	if err != nil {
		return nil, err
	}
	var out []svc.BatchResult
	switch order {
	case svc.BatchByFinish:
		for i := max(after, 0); i < int64(len(x.byFinish)) && len(out) < limit; i++ {
			out = append(out, x.results[x.byFinish[i]])
		}
	case svc.BatchByIndex:
		// Walk the indexes up to the total: a map has no order.
		for i := max(after+1, 0); i < x.rec.Counts.Total && len(out) < limit; i++ {
			if r, ok := x.results[i]; ok {
				out = append(out, r)
			}
		}
	default:
		return nil, svc.Errorf(svc.KindSpecValidation, "order %q: want index or finish", order)
	}
	return out, nil
}

// SetBatchState moves a batch; see svc.BatchStore.
func (s *Store) SetBatchState(_ context.Context, batchID string, next svc.BatchState, reason string) error {
	b := &s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	x, err := b.get(batchID)
	if err != nil {
		return err
	}
	if !x.rec.State.CanMove(next) {
		return svc.BatchMoveRefused(batchID, x.rec.State, next)
	}
	x.rec.State, x.rec.Reason, x.rec.UpdatedAt = next, reason, now()
	if next.Terminal() {
		x.rec.Counts.Running = 0
	}
	return nil
}

// SetBatchProvider replaces a batch's Provider value; see svc.BatchStore.
func (s *Store) SetBatchProvider(_ context.Context, batchID string, provider json.RawMessage) error {
	if err := svc.CheckBatchProvider(batchID, provider); err != nil {
		return err
	}
	b := &s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	x, err := b.get(batchID)
	if err != nil {
		return err
	}
	if x.rec.State.Terminal() {
		return svc.BatchEnded(batchID, x.rec.State)
	}
	x.rec.Provider, x.rec.UpdatedAt = slices.Clone(provider), now()
	return nil
}

// ClaimBatches claims the unfinished batches of other owners: memstore
// lives in one process, so an owner that is not owner is gone; see
// svc.BatchStore.
func (s *Store) ClaimBatches(_ context.Context, owner string) ([]svc.BatchRecord, error) {
	b := &s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	var out []svc.BatchRecord
	for _, x := range b.m {
		if x.rec.State.Terminal() || x.rec.Owner == owner {
			continue
		}
		x.rec.Owner = owner
		x.rec.Resumed++
		out = append(out, x.rec)
	}
	slices.SortFunc(out, func(a, b svc.BatchRecord) int { return strings.Compare(a.BatchID, b.BatchID) })
	return out, nil
}

// DeleteBatch removes a batch; see svc.BatchStore.
func (s *Store) DeleteBatch(_ context.Context, batchID string) error {
	b := &s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	delete(b.m, batchID)
	delete(b.chunks, batchID)
	return nil
}
