package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/svc-dev/svc"
)

var _ svc.BatchStore = (*Store)(nil)

// batchSchema holds the batches (svc.BatchStore): new tables, which an
// older build never reads, so no new schema version. A batch's tasks are
// kept as chunks (a JSON array of svc.BatchChunkSize tasks a row) and its
// results one a row, with seq their finish order; the batches row carries
// the counts, updated in the transaction that adds the results.
const batchSchema = `
CREATE TABLE IF NOT EXISTS batches (
	batch_id        TEXT PRIMARY KEY,
	target          TEXT NOT NULL,
	state           TEXT NOT NULL,
	max_concurrency INTEGER NOT NULL,
	total           INTEGER NOT NULL,
	succeeded       INTEGER NOT NULL DEFAULT 0,
	failed          INTEGER NOT NULL DEFAULT 0,
	running         INTEGER NOT NULL DEFAULT 0,
	tokens          INTEGER NOT NULL DEFAULT 0,
	cost            REAL NOT NULL DEFAULT 0,
	reason          TEXT NOT NULL DEFAULT '',
	resumed         INTEGER NOT NULL DEFAULT 0,
	owner           TEXT NOT NULL DEFAULT '',
	seq             INTEGER NOT NULL DEFAULT 0, -- the last result's seq
	created_at      INTEGER NOT NULL, -- Unix microseconds
	updated_at      INTEGER NOT NULL,
	mode            TEXT NOT NULL DEFAULT '',
	provider        BLOB
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batch_chunks (
	batch_id TEXT NOT NULL,
	n        INTEGER NOT NULL,
	tasks    BLOB NOT NULL,
	PRIMARY KEY (batch_id, n)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batch_results (
	batch_id TEXT NOT NULL,
	idx      INTEGER NOT NULL,
	seq      INTEGER NOT NULL,
	result   BLOB NOT NULL,
	PRIMARY KEY (batch_id, idx)
);
CREATE UNIQUE INDEX IF NOT EXISTS batch_results_seq ON batch_results (batch_id, seq);
`

const batchColumns = `batch_id, target, state, max_concurrency, total, succeeded, failed, running, tokens, cost, reason, resumed, owner, created_at, updated_at, mode, provider`

func scanBatch(row interface{ Scan(...any) error }) (svc.BatchRecord, error) {
	var r svc.BatchRecord
	var created, updated int64
	var provider []byte
	err := row.Scan(&r.BatchID, &r.Target, &r.State, &r.MaxConcurrency, &r.Counts.Total, &r.Counts.Succeeded, &r.Counts.Failed,
		&r.Counts.Running, &r.TokensUsed, &r.CostUSD, &r.Reason, &r.Resumed, &r.Owner, &created, &updated, &r.Mode, &provider)
	if len(provider) > 0 {
		r.Provider = provider
	}
	r.CreatedAt, r.UpdatedAt = fromMicros(created), fromMicros(updated)
	return r, err
}

// PutBatchChunk stores a chunk of tasks; see svc.BatchStore.
func (s *Store) PutBatchChunk(ctx context.Context, batchID string, n int, tasks []json.RawMessage) error {
	if err := s.check(); err != nil {
		return err
	}
	if n < 0 {
		return svc.Errorf(svc.KindSpecValidation, "batch %q: negative chunk %d", batchID, n)
	}
	data, err := svc.EncodeBatchChunk(tasks)
	if err != nil {
		return err
	}
	if _, err := s.writer.ExecContext(ctx, `INSERT OR REPLACE INTO batch_chunks (batch_id, n, tasks) VALUES (?1, ?2, ?3)`,
		batchID, n, data); err != nil {
		return s.fail(ctx, err, "batch %q: store chunk %d", batchID, n)
	}
	return nil
}

// BatchChunk returns a chunk of tasks; see svc.BatchStore.
func (s *Store) BatchChunk(ctx context.Context, batchID string, n int) ([]json.RawMessage, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var data []byte
	err := s.reader.QueryRowContext(ctx, `SELECT tasks FROM batch_chunks WHERE batch_id = ?1 AND n = ?2`, batchID, n).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, svc.Errorf(svc.KindRegistry, "batch %q: no chunk %d", batchID, n)
	}
	if err != nil {
		return nil, s.fail(ctx, err, "batch %q: read chunk %d", batchID, n)
	}
	var tasks []json.RawMessage
	if err := json.Unmarshal(data, &tasks); err != nil {
		return nil, svc.Wrap(svc.KindRuntime, err, "sqlitestore: batch "+batchID+": corrupt chunk")
	}
	return tasks, nil
}

// CreateBatch stores a batch's record; see svc.BatchStore.
func (s *Store) CreateBatch(ctx context.Context, rec svc.BatchRecord) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := svc.CheckBatchRecord(&rec); err != nil {
		return err
	}
	t := time.Now()
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = t
	}
	res, err := s.writer.ExecContext(ctx, `INSERT OR IGNORE INTO batches (`+batchColumns+`)
		VALUES (?1, ?2, ?3, ?4, ?5, 0, 0, 0, 0, 0, ?6, ?7, ?8, ?9, ?10, ?11, ?12)`,
		rec.BatchID, rec.Target, rec.State, rec.MaxConcurrency, rec.Counts.Total, rec.Reason, rec.Resumed, rec.Owner,
		micros(rec.CreatedAt), micros(t), rec.Mode, nullBlob(rec.Provider))
	if err != nil {
		return s.fail(ctx, err, "batch %q: create", rec.BatchID)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return svc.Errorf(svc.KindRunState, "batch %q exists", rec.BatchID)
	}
	return nil
}

// GetBatch returns a batch's record; see svc.BatchStore.
func (s *Store) GetBatch(ctx context.Context, batchID string) (svc.BatchRecord, error) {
	if err := s.check(); err != nil {
		return svc.BatchRecord{}, err
	}
	return s.getBatch(ctx, s.reader, batchID)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) getBatch(ctx context.Context, q querier, batchID string) (svc.BatchRecord, error) {
	rec, err := scanBatch(q.QueryRowContext(ctx, `SELECT `+batchColumns+` FROM batches WHERE batch_id = ?1`, batchID))
	if errors.Is(err, sql.ErrNoRows) {
		return svc.BatchRecord{}, svc.UnknownBatch(batchID)
	}
	if err != nil {
		return svc.BatchRecord{}, s.fail(ctx, err, "batch %q: read", batchID)
	}
	return rec, nil
}

// ListBatches lists batches newest first (their ids are UUIDv7); see
// svc.BatchStore.
func (s *Store) ListBatches(ctx context.Context, cursor string, limit int) (svc.BatchPage, error) {
	if err := s.check(); err != nil {
		return svc.BatchPage{}, err
	}
	limit, err := svc.BatchPageLimit(limit)
	if err != nil {
		return svc.BatchPage{}, err
	}
	q := `SELECT ` + batchColumns + ` FROM batches ORDER BY batch_id DESC LIMIT ?2`
	if cursor != "" {
		q = `SELECT ` + batchColumns + ` FROM batches WHERE batch_id < ?1 ORDER BY batch_id DESC LIMIT ?2`
	}
	rows, err := s.reader.QueryContext(ctx, q, cursor, limit+1)
	if err != nil {
		return svc.BatchPage{}, s.fail(ctx, err, "list batches")
	}
	defer rows.Close()
	page := svc.BatchPage{Batches: []svc.BatchStatus{}}
	for rows.Next() {
		rec, err := scanBatch(rows)
		if err != nil {
			return svc.BatchPage{}, s.fail(ctx, err, "list batches")
		}
		if len(page.Batches) == limit {
			page.NextCursor = page.Batches[limit-1].BatchID
			break
		}
		page.Batches = append(page.Batches, rec.BatchStatus)
	}
	if err := rows.Err(); err != nil {
		return svc.BatchPage{}, s.fail(ctx, err, "list batches")
	}
	return page, nil
}

// AddBatchResults stores results; see svc.BatchStore.
func (s *Store) AddBatchResults(ctx context.Context, batchID string, running int64, results []svc.BatchResult) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	for _, r := range results {
		if !json.Valid(r.Result) || r.Index < 0 {
			return 0, svc.Errorf(svc.KindSpecValidation, "batch %q: result %d is not a JSON value at a valid index", batchID, r.Index)
		}
	}
	fail := func(err error) (int, error) { return 0, s.fail(ctx, err, "batch %q: store results", batchID) }
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	var state svc.BatchState
	var seq int64
	err = tx.QueryRowContext(ctx, `SELECT state, seq FROM batches WHERE batch_id = ?1`, batchID).Scan(&state, &seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, svc.UnknownBatch(batchID)
	}
	if err != nil {
		return fail(err)
	}
	if state.Terminal() {
		return 0, svc.BatchEnded(batchID, state)
	}
	ins, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO batch_results (batch_id, idx, seq, result) VALUES (?1, ?2, ?3, ?4)`)
	if err != nil {
		return fail(err)
	}
	defer ins.Close()
	var ok, failed, tokens int64
	var cost float64
	n := 0
	for _, r := range results {
		res, err := ins.ExecContext(ctx, batchID, r.Index, seq+1, []byte(r.Result))
		if err != nil {
			return fail(err)
		}
		if k, _ := res.RowsAffected(); k == 0 {
			continue
		}
		seq++
		n++
		if r.Success {
			ok++
		} else {
			failed++
		}
		tokens += r.Tokens
		cost += r.Cost
	}
	if _, err := tx.ExecContext(ctx, `UPDATE batches SET seq = ?2, succeeded = succeeded + ?3, failed = failed + ?4,
		tokens = tokens + ?5, cost = cost + ?6, running = ?7, updated_at = ?8 WHERE batch_id = ?1`,
		batchID, seq, ok, failed, tokens, cost, running, micros(time.Now())); err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return n, nil
}

// BatchResults reads results; see svc.BatchStore.
func (s *Store) BatchResults(ctx context.Context, batchID string, order svc.BatchOrder, after int64, limit int) ([]svc.BatchResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var q string
	switch order {
	case svc.BatchByIndex:
		q = `SELECT idx, seq, result FROM batch_results WHERE batch_id = ?1 AND idx > ?2 ORDER BY idx LIMIT ?3`
	case svc.BatchByFinish:
		q = `SELECT idx, seq, result FROM batch_results WHERE batch_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3`
	default:
		return nil, svc.Errorf(svc.KindSpecValidation, "order %q: want index or finish", order)
	}
	if _, err := s.getBatch(ctx, s.reader, batchID); err != nil {
		return nil, err
	}
	rows, err := s.reader.QueryContext(ctx, q, batchID, after, limit)
	if err != nil {
		return nil, s.fail(ctx, err, "batch %q: read results", batchID)
	}
	defer rows.Close()
	var out []svc.BatchResult
	for rows.Next() {
		var r svc.BatchResult
		var data []byte
		if err := rows.Scan(&r.Index, &r.Seq, &data); err != nil {
			return nil, s.fail(ctx, err, "batch %q: read results", batchID)
		}
		r.Result = data
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, err, "batch %q: read results", batchID)
	}
	return out, nil
}

// SetBatchState moves a batch; see svc.BatchStore.
func (s *Store) SetBatchState(ctx context.Context, batchID string, next svc.BatchState, reason string) error {
	if err := s.check(); err != nil {
		return err
	}
	fail := func(err error) error { return s.fail(ctx, err, "batch %q: set state", batchID) }
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	state, err := s.batchStateIn(ctx, tx, batchID)
	if err != nil {
		return err
	}
	if !state.CanMove(next) {
		return svc.BatchMoveRefused(batchID, state, next)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE batches SET state = ?2, reason = ?3, updated_at = ?4,
		running = CASE WHEN ?5 THEN 0 ELSE running END WHERE batch_id = ?1`,
		batchID, next, reason, micros(time.Now()), next.Terminal()); err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return nil
}

// batchStateIn reads a batch's state in tx: an unknown batch is svc's
// UnknownBatch error, any other failure wrapped as a write's.
func (s *Store) batchStateIn(ctx context.Context, tx *sql.Tx, batchID string) (svc.BatchState, error) {
	var state svc.BatchState
	err := tx.QueryRowContext(ctx, `SELECT state FROM batches WHERE batch_id = ?1`, batchID).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", svc.UnknownBatch(batchID)
	}
	if err != nil {
		return "", s.fail(ctx, err, "batch %q: read state", batchID)
	}
	return state, nil
}

// nullBlob is b, or NULL when empty.
func nullBlob(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// SetBatchProvider replaces a batch's Provider value; see svc.BatchStore.
func (s *Store) SetBatchProvider(ctx context.Context, batchID string, provider json.RawMessage) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := svc.CheckBatchProvider(batchID, provider); err != nil {
		return err
	}
	fail := func(err error) error { return s.fail(ctx, err, "batch %q: set provider", batchID) }
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	state, err := s.batchStateIn(ctx, tx, batchID)
	if err != nil {
		return err
	}
	if state.Terminal() {
		return svc.BatchEnded(batchID, state)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE batches SET provider = ?2, updated_at = ?3 WHERE batch_id = ?1`,
		batchID, nullBlob(provider), micros(time.Now())); err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return nil
}

// ClaimBatches claims every unfinished batch of another owner: one
// process serves the file (it holds the data directory's lock), so any
// other owner is a process that stopped; see svc.BatchStore.
func (s *Store) ClaimBatches(ctx context.Context, owner string) ([]svc.BatchRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	fail := func(err error) ([]svc.BatchRecord, error) { return nil, s.fail(ctx, err, "claim batches") }
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `UPDATE batches SET owner = ?1, resumed = resumed + 1
		WHERE state IN ('queued', 'running') AND owner != ?1 RETURNING `+batchColumns, owner)
	if err != nil {
		return fail(err)
	}
	var out []svc.BatchRecord
	for rows.Next() {
		rec, err := scanBatch(rows)
		if err != nil {
			rows.Close()
			return fail(err)
		}
		out = append(out, rec)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	slices.SortFunc(out, func(a, b svc.BatchRecord) int { return strings.Compare(a.BatchID, b.BatchID) })
	return out, nil
}

// DeleteBatch removes a batch; see svc.BatchStore.
func (s *Store) DeleteBatch(ctx context.Context, batchID string) error {
	if err := s.check(); err != nil {
		return err
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(ctx, err, "batch %q: delete", batchID)
	}
	defer tx.Rollback()
	for _, q := range []string{`DELETE FROM batches WHERE batch_id = ?1`, `DELETE FROM batch_chunks WHERE batch_id = ?1`,
		`DELETE FROM batch_results WHERE batch_id = ?1`} {
		if _, err := tx.ExecContext(ctx, q, batchID); err != nil {
			return s.fail(ctx, err, "batch %q: delete", batchID)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.fail(ctx, err, "batch %q: delete", batchID)
	}
	return nil
}
