package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/svc-dev/svc"
)

var _ svc.RunBatchWriter = (*Store)(nil)

// sqlBatchLast reads what a batch is checked against and numbered from
// before any of it is written: the run's state, the Seq and log size of
// its last step and the Seq of its last event (0 for none); no row for an
// unknown run. In the writer's transaction no other write comes between
// it and the batch's inserts.
const sqlBatchLast = `SELECT r.state, COALESCE(s.seq, 0), COALESCE(s.total, 0),
	COALESCE((SELECT MAX(seq) FROM run_events WHERE run_id = ?1), 0) FROM runs r
	LEFT JOIN (SELECT seq, total FROM run_steps WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1) s ON 1
	WHERE r.run_id = ?1`

// batchChunks are the row counts of the prepared multi-row INSERTs a batch
// is written with, largest first: n rows take at most one statement per
// size (a flush of a run holds a few events and steps, rarely more than
// eight), and the shapes are prepared once, at Open.
var batchChunks = [...]int{8, 4, 2, 1}

// Columns of the multi-row INSERTs.
const (
	eventCols = 8 // run_id, seq, type, agent, task_id, error, ts, request
	stepCols  = 7 // run_id, seq, kind, key, data, ts, total
)

// batchStatements are AppendBatch's prepared statements (writer).
type batchStatements struct {
	last   *sql.Stmt
	events [len(batchChunks)]*sql.Stmt
	steps  [len(batchChunks)]*sql.Stmt
}

func multiInsert(head string, cols, rows int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", cols), ",") + ")"
	return head + " VALUES " + strings.TrimSuffix(strings.Repeat(row+",", rows), ",")
}

func (st *batchStatements) prepare(writer *sql.DB) error {
	var err error
	if st.last, err = writer.Prepare(sqlBatchLast); err != nil {
		return err
	}
	for i, n := range batchChunks {
		if st.events[i], err = writer.Prepare(multiInsert(
			`INSERT INTO run_events (run_id, seq, type, agent, task_id, error, ts, request)`, eventCols, n)); err != nil {
			return err
		}
		if st.steps[i], err = writer.Prepare(multiInsert(
			`INSERT INTO run_steps (run_id, seq, kind, key, data, ts, total)`, stepCols, n)); err != nil {
			return err
		}
	}
	return nil
}

func (st *batchStatements) close() error {
	var errs []error
	for _, stmt := range append(append([]*sql.Stmt{st.last}, st.events[:]...), st.steps[:]...) {
		if stmt != nil {
			errs = append(errs, stmt.Close())
		}
	}
	return errors.Join(errs...)
}

// insertRows writes rows (each of cols values) with the chunked statements
// of stmts.
func insertRows(ctx context.Context, tx *batchTx, stmts *[len(batchChunks)]*sql.Stmt, cols int, args []any) error {
	for len(args) > 0 {
		rows := len(args) / cols
		for i, n := range batchChunks {
			if n > rows {
				continue
			}
			if _, err := tx.stmt(ctx, stmts[i]).ExecContext(ctx, args[:n*cols]...); err != nil {
				return err
			}
			args = args[n*cols:]
			break
		}
	}
	return nil
}

// AppendBatch writes a run's progress, events and steps as one write of
// the commit queue: one read of the run's state and last Seqs, an UPDATE
// of its progress when given, and one multi-row INSERT per table (per
// chunk); see svc.RunBatchWriter.
func (s *Store) AppendBatch(ctx context.Context, runID string, b svc.RunBatch) (svc.RunBatchResult, error) {
	var res svc.RunBatchResult
	if err := s.check(); err != nil {
		return res, err
	}
	if len(b.Steps) > 0 {
		if err := svc.CheckSteps(b.Steps); err != nil {
			return res, err
		}
	}
	var progress any
	if b.Progress != nil {
		p, err := json.Marshal(b.Progress)
		if err != nil {
			return res, svc.Wrap(svc.KindRuntime, err, "sqlitestore: encode progress")
		}
		progress = string(p)
	}
	now := time.Now()
	t := micros(now)
	err := s.do(ctx, op{id: runID, what: fmt.Sprintf("write to run %q", runID), atomic: true,
		run: func(ctx context.Context, tx *batchTx) (error, error) {
			res = svc.RunBatchResult{}
			var state string
			var lastStep, total, lastEvent int64
			err := tx.stmt(ctx, s.bstmt.last).QueryRowContext(ctx, runID).Scan(&state, &lastStep, &total, &lastEvent)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return unknown(runID), nil
			case err != nil:
				return nil, err
			case svc.RunState(state).Terminal():
				return svc.Errorf(svc.KindRunState, "sqlitestore: run %q is %s and takes no more writes", runID, state), nil
			}
			if progress != nil {
				if _, err := tx.stmt(ctx, s.stmt.setProgress).ExecContext(ctx, runID, progress, t); err != nil {
					return nil, err
				}
			}
			if len(b.Events) > 0 {
				args := make([]any, 0, len(b.Events)*eventCols)
				for _, ev := range b.Events {
					lastEvent++
					a := eventArgs(runID, ev)
					args = append(args, a[0], lastEvent)
					args = append(args, a[1:]...)
				}
				if err := insertRows(ctx, tx, &s.bstmt.events, eventCols, args); err != nil {
					return nil, err
				}
				res.LastEvent = lastEvent
			}
			res.Steps, res.Full = svc.FitSteps(runID, total, s.maxStepBytes, b.Steps)
			if res.Steps > 0 {
				args := make([]any, 0, res.Steps*stepCols)
				for _, st := range b.Steps[:res.Steps] {
					at := t
					if !st.Timestamp.IsZero() {
						at = micros(st.Timestamp)
					}
					lastStep++
					total += st.Size()
					args = append(args, runID, lastStep, string(st.Kind), st.Key, []byte(st.Data), at, total)
				}
				if err := insertRows(ctx, tx, &s.bstmt.steps, stepCols, args); err != nil {
					return nil, err
				}
				res.LastStep = lastStep
			}
			return nil, nil
		}})
	if err != nil {
		return svc.RunBatchResult{}, err
	}
	return res, nil
}
