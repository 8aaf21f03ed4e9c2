package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/svc-dev/svc"
)

var _ svc.BatchStore = (*Store)(nil)

// Batches (svc.BatchStore): "batch/<id>" holds a batch's record (JSON),
// "bchunk/<id>/<n>" its chunks of tasks (a JSON array each),
// "bres/<id>/<index>" each result (its seq, 8 big-endian bytes, then the
// result's JSON) and "bfin/<id>/<seq>" the index of the seq-th result to
// finish, numbers zero-padded as events' are. A write is one Batch under
// the write lock, as a run's is.
const (
	batchPrefix  = "batch/"
	bchunkPrefix = "bchunk/"
	bresPrefix   = "bres/"
	bfinPrefix   = "bfin/"
)

// storedBatch is a batch's record as kept: Seq is the last result's.
type storedBatch struct {
	svc.BatchRecord
	Seq int64 `json:"seq"`
}

func batchKey(id string) []byte { return []byte(batchPrefix + id) }

func (s *Store) loadBatch(id string) (*storedBatch, error) {
	v, closer, err := s.db.Get(batchKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, svc.UnknownBatch(id)
	}
	if err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: read batch "+strconv.Quote(id))
	}
	defer closer.Close()
	var st storedBatch
	if err := json.Unmarshal(v, &st); err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: corrupt batch "+strconv.Quote(id))
	}
	return &st, nil
}

func putBatch(b *pebble.Batch, st *storedBatch) error {
	data, err := json.Marshal(st)
	if err != nil {
		return svc.Wrap(svc.KindRuntime, err, "pebblestore: encode batch")
	}
	return b.Set(batchKey(st.BatchID), data, nil)
}

// rlock takes the read lock of a reader, or says the store is closed.
func (s *Store) rlock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return errClosed()
	}
	return nil
}

// PutBatchChunk stores a chunk of tasks; see svc.BatchStore.
func (s *Store) PutBatchChunk(ctx context.Context, batchID string, n int, tasks []json.RawMessage) error {
	if n < 0 {
		return svc.Errorf(svc.KindSpecValidation, "batch %q: negative chunk %d", batchID, n)
	}
	data, err := svc.EncodeBatchChunk(tasks)
	if err != nil {
		return err
	}
	return s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		return []string{batchPrefix + batchID}, b.Set(seqKey(bchunkPrefix, batchID, int64(n)), data, nil)
	})
}

// BatchChunk returns a chunk of tasks; see svc.BatchStore.
func (s *Store) BatchChunk(ctx context.Context, batchID string, n int) ([]json.RawMessage, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	v, closer, err := s.db.Get(seqKey(bchunkPrefix, batchID, int64(n)))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, svc.Errorf(svc.KindRegistry, "batch %q: no chunk %d", batchID, n)
	}
	if err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: read a batch chunk")
	}
	defer closer.Close()
	var tasks []json.RawMessage
	if err := json.Unmarshal(v, &tasks); err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: corrupt batch chunk")
	}
	return tasks, nil
}

// CreateBatch stores a batch's record; see svc.BatchStore.
func (s *Store) CreateBatch(ctx context.Context, rec svc.BatchRecord) error {
	if err := svc.CheckBatchRecord(&rec); err != nil {
		return err
	}
	t := time.Now().UTC().Truncate(time.Microsecond)
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = t
	}
	rec.UpdatedAt = t
	return s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		if _, err := s.loadBatch(rec.BatchID); err == nil {
			return nil, svc.Errorf(svc.KindRunState, "batch %q exists", rec.BatchID)
		} else if svc.KindOf(err) != svc.KindRegistry {
			return nil, err
		}
		return []string{batchPrefix + rec.BatchID}, putBatch(b, &storedBatch{BatchRecord: rec})
	})
}

// GetBatch returns a batch's record; see svc.BatchStore.
func (s *Store) GetBatch(ctx context.Context, batchID string) (svc.BatchRecord, error) {
	if err := s.rlock(ctx); err != nil {
		return svc.BatchRecord{}, err
	}
	defer s.mu.RUnlock()
	st, err := s.loadBatch(batchID)
	if err != nil {
		return svc.BatchRecord{}, err
	}
	return st.BatchRecord, nil
}

// ListBatches lists batches newest first (their ids are UUIDv7); see
// svc.BatchStore.
func (s *Store) ListBatches(ctx context.Context, cursor string, limit int) (svc.BatchPage, error) {
	limit, err := svc.BatchPageLimit(limit)
	if err != nil {
		return svc.BatchPage{}, err
	}
	if err := s.rlock(ctx); err != nil {
		return svc.BatchPage{}, err
	}
	defer s.mu.RUnlock()
	upper := prefixEnd(batchPrefix)
	if cursor != "" {
		upper = batchKey(cursor)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(batchPrefix), UpperBound: upper})
	if err != nil {
		return svc.BatchPage{}, svc.Wrap(svc.KindRuntime, err, "pebblestore: list batches")
	}
	defer it.Close()
	page := svc.BatchPage{Batches: []svc.BatchStatus{}}
	for ok := it.Last(); ok; ok = it.Prev() {
		if len(page.Batches) == limit {
			page.NextCursor = page.Batches[limit-1].BatchID
			break
		}
		var st storedBatch
		if err := json.Unmarshal(it.Value(), &st); err != nil {
			return svc.BatchPage{}, svc.Wrap(svc.KindRuntime, err, "pebblestore: corrupt batch")
		}
		page.Batches = append(page.Batches, st.BatchStatus)
	}
	return page, it.Error()
}

// AddBatchResults stores results; see svc.BatchStore.
func (s *Store) AddBatchResults(ctx context.Context, batchID string, running int64, results []svc.BatchResult) (int, error) {
	for _, r := range results {
		if !json.Valid(r.Result) || r.Index < 0 {
			return 0, svc.Errorf(svc.KindSpecValidation, "batch %q: result %d is not a JSON value at a valid index", batchID, r.Index)
		}
	}
	n := 0
	err := s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		n = 0
		st, err := s.loadBatch(batchID)
		if err != nil {
			return nil, err
		}
		if st.State.Terminal() {
			return nil, svc.BatchEnded(batchID, st.State)
		}
		seen := map[int64]bool{}
		for _, r := range results {
			key := seqKey(bresPrefix, batchID, r.Index)
			if seen[r.Index] {
				continue
			}
			_, closer, err := s.db.Get(key)
			if err == nil {
				closer.Close()
				continue
			}
			if !errors.Is(err, pebble.ErrNotFound) {
				return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: read a batch result")
			}
			seen[r.Index] = true
			st.Seq++
			n++
			v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(r.Result)), uint64(st.Seq))
			if err := b.Set(key, append(v, r.Result...), nil); err != nil {
				return nil, err
			}
			if err := b.Set(seqKey(bfinPrefix, batchID, st.Seq), strconv.AppendInt(nil, r.Index, 10), nil); err != nil {
				return nil, err
			}
			if r.Success {
				st.Counts.Succeeded++
			} else {
				st.Counts.Failed++
			}
			st.TokensUsed += r.Tokens
			st.CostUSD += r.Cost
		}
		st.Counts.Running = running
		st.UpdatedAt = time.Now().UTC().Truncate(time.Microsecond)
		return []string{batchPrefix + batchID}, putBatch(b, st)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// BatchResults reads results; see svc.BatchStore.
func (s *Store) BatchResults(ctx context.Context, batchID string, order svc.BatchOrder, after int64, limit int) ([]svc.BatchResult, error) {
	if order != svc.BatchByIndex && order != svc.BatchByFinish {
		return nil, svc.Errorf(svc.KindSpecValidation, "order %q: want index or finish", order)
	}
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	if _, err := s.loadBatch(batchID); err != nil {
		return nil, err
	}
	prefix := bresPrefix
	if order == svc.BatchByFinish {
		prefix = bfinPrefix
	}
	lower := seqKey(prefix, batchID, max(after+1, 0))
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix + batchID + "/")})
	if err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: read batch results")
	}
	defer it.Close()
	var out []svc.BatchResult
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		v := it.Value()
		if order == svc.BatchByFinish {
			idx, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: corrupt batch result index")
			}
			rv, closer, err := s.db.Get(seqKey(bresPrefix, batchID, idx))
			if err != nil {
				return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: read a batch result")
			}
			v = bytes.Clone(rv)
			closer.Close()
			out = append(out, svc.BatchResult{Index: idx, Seq: int64(binary.BigEndian.Uint64(v[:8])), Result: v[8:]})
			continue
		}
		k := it.Key()
		idx, err := strconv.ParseInt(string(k[bytes.LastIndexByte(k, '/')+1:]), 10, 64)
		if err != nil || len(v) < 8 {
			return nil, svc.Errorf(svc.KindRuntime, "pebblestore: corrupt batch result %q", k)
		}
		out = append(out, svc.BatchResult{Index: idx, Seq: int64(binary.BigEndian.Uint64(v[:8])), Result: bytes.Clone(v[8:])})
	}
	return out, it.Error()
}

// SetBatchState moves a batch; see svc.BatchStore.
func (s *Store) SetBatchState(ctx context.Context, batchID string, next svc.BatchState, reason string) error {
	return s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		st, err := s.loadBatch(batchID)
		if err != nil {
			return nil, err
		}
		if !st.State.CanMove(next) {
			return nil, svc.BatchMoveRefused(batchID, st.State, next)
		}
		st.State, st.Reason, st.UpdatedAt = next, reason, time.Now().UTC().Truncate(time.Microsecond)
		if next.Terminal() {
			st.Counts.Running = 0
		}
		return []string{batchPrefix + batchID}, putBatch(b, st)
	})
}

// SetBatchProvider replaces a batch's Provider value; see svc.BatchStore.
func (s *Store) SetBatchProvider(ctx context.Context, batchID string, provider json.RawMessage) error {
	if err := svc.CheckBatchProvider(batchID, provider); err != nil {
		return err
	}
	return s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		st, err := s.loadBatch(batchID)
		if err != nil {
			return nil, err
		}
		if st.State.Terminal() {
			return nil, svc.BatchEnded(batchID, st.State)
		}
		st.Provider, st.UpdatedAt = provider, time.Now().UTC().Truncate(time.Microsecond)
		return []string{batchPrefix + batchID}, putBatch(b, st)
	})
}

// ClaimBatches claims every unfinished batch of another owner: one
// process holds the directory, so any other owner stopped; see
// svc.BatchStore.
func (s *Store) ClaimBatches(ctx context.Context, owner string) ([]svc.BatchRecord, error) {
	var out []svc.BatchRecord
	err := s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		out = out[:0]
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(batchPrefix), UpperBound: prefixEnd(batchPrefix)})
		if err != nil {
			return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: claim batches")
		}
		defer it.Close()
		var ids []string
		for ok := it.First(); ok; ok = it.Next() {
			var st storedBatch
			if err := json.Unmarshal(it.Value(), &st); err != nil {
				return nil, svc.Wrap(svc.KindRuntime, err, "pebblestore: corrupt batch")
			}
			if st.State.Terminal() || st.Owner == owner {
				continue
			}
			st.Owner = owner
			st.Resumed++
			if err := putBatch(b, &st); err != nil {
				return nil, err
			}
			out = append(out, st.BatchRecord)
			ids = append(ids, batchPrefix+st.BatchID)
		}
		return ids, it.Error()
	})
	slices.SortFunc(out, func(a, b svc.BatchRecord) int { return strings.Compare(a.BatchID, b.BatchID) })
	return out, err
}

// DeleteBatch removes a batch; see svc.BatchStore.
func (s *Store) DeleteBatch(ctx context.Context, batchID string) error {
	return s.write(ctx, func(b *pebble.Batch) ([]string, error) {
		if err := b.Delete(batchKey(batchID), nil); err != nil {
			return nil, err
		}
		for _, p := range []string{bchunkPrefix, bresPrefix, bfinPrefix} {
			if err := b.DeleteRange([]byte(p+batchID+"/"), prefixEnd(p+batchID+"/"), nil); err != nil {
				return nil, err
			}
		}
		return []string{batchPrefix + batchID}, nil
	})
}
