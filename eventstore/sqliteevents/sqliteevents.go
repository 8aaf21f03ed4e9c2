// Package sqliteevents is the event store in one SQLite file: an
// eventstore.Store whose rollups cost the number of keys rather than of
// events, with retention applied by a goroutine of its own.
package sqliteevents

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/internal/evcodec"
	"github.com/svc-dev/svc/eventstore/internal/rollup"
	"github.com/svc-dev/svc/internal/sqlitedb"
)

// Store is an eventstore.Store in one SQLite file, opened by
// internal/sqlitedb as the run store's is (WAL mode, pure-Go driver,
// busy_timeout, one writer connection and a query-only reader pool), safe
// for concurrent use. Retention is applied by a goroutine the store owns,
// every DefaultPruneInterval and once at open; between prunes the table
// may hold more than the retention allows. Close stops the goroutine.
type Store struct {
	path string
	r    eventstore.Retention
	now  func() time.Time
	// writer has one connection so this process's writers queue in Go, not
	// in SQLite's busy handler; reader is a query-only pool that WAL lets
	// read while the writer writes.
	writer, reader *sql.DB
	// stmts are the write path's statements (write.go), prepared
	// on the writer at open, by their text.
	stmts map[string]*sql.Stmt

	pruneEvery time.Duration // DefaultPruneInterval; tests shorten it
	pruned     chan struct{} // receives after each background prune, if set (tests)

	closeOnce sync.Once
	closed    atomic.Bool
	stop      context.CancelFunc // ends pruneLoop
	done      chan struct{}      // closed when pruneLoop has returned
}

var _ eventstore.Store = (*Store)(nil)

// DefaultPruneInterval is how often a store applies its retention.
const DefaultPruneInterval = 30 * time.Second

// Open opens (creating if needed) the event store in the file at
// path, with retention r, and starts its pruning goroutine.
func Open(path string, r eventstore.Retention) (*Store, error) {
	return open(path, r, DefaultPruneInterval, nil)
}

func open(path string, r eventstore.Retention, every time.Duration, pruned chan struct{}) (*Store, error) {
	fail := func(err error) error {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("eventstore: open %q", path))
	}
	switch {
	case path == "", path == ":memory:", strings.HasPrefix(path, "file:"), strings.ContainsRune(path, '?'):
		return nil, svc.Errorf(svc.KindSpecValidation,
			"eventstore: open %q: want a plain file path (for events in memory, use memevents.New)", path)
	case r.MaxRows < 0 || r.MaxAge < 0:
		return nil, svc.Errorf(svc.KindSpecValidation, "eventstore: negative retention %+v", r)
	}
	db, err := sqlitedb.Open(path, sqlitedb.Options{WriterCacheKiB: writerCacheKiB, Init: initSQLite})
	if err != nil {
		return nil, fail(err)
	}
	writer, reader := db.Writer, db.Reader
	stmts, err := prepareWrites(context.Background(), writer)
	if err != nil {
		_ = db.Close()
		return nil, fail(err)
	}
	s := &Store{
		path: path, r: r, now: time.Now, writer: writer, reader: reader, stmts: stmts,
		pruneEvery: every, pruned: pruned, done: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go s.pruneLoop(ctx)
	return s, nil
}

// pruneLoop applies the retention at open and then every pruneEvery,
// until Close. A failed prune is retried at the next tick: retention is
// best effort and must not take the store down.
func (s *Store) pruneLoop(ctx context.Context) {
	defer close(s.done)
	if s.r == (eventstore.Retention{}) {
		return
	}
	t := time.NewTicker(s.pruneEvery)
	defer t.Stop()
	for {
		_, _ = s.Prune(ctx) // Close cancels ctx, interrupting a long prune
		if s.pruned != nil {
			select {
			case s.pruned <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Prune applies the retention now and returns how many events it deleted.
// The background goroutine calls it; it is exported for operators and
// tests that cannot wait for the next tick.
func (s *Store) Prune(ctx context.Context) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var deleted int64
	if s.r.MaxAge > 0 {
		cutoff := s.now().Add(-s.r.MaxAge).UnixMicro()
		n, err := s.deleteWhere(ctx, `ts < ?1`, cutoff)
		deleted += n
		if err != nil {
			return deleted, s.fail(ctx, err, "prune by age")
		}
	}
	if s.r.MaxRows > 0 {
		// Find the oldest event to keep, then delete everything older: two
		// index walks instead of an OFFSET subquery per row.
		var ts, id int64
		err := s.writer.QueryRowContext(ctx,
			`SELECT ts, id FROM events ORDER BY ts DESC, id DESC LIMIT 1 OFFSET ?`, s.r.MaxRows-1).Scan(&ts, &id)
		if errors.Is(err, sql.ErrNoRows) {
			return deleted, nil // fewer rows than the cap
		}
		if err != nil {
			return deleted, s.fail(ctx, err, "prune by rows")
		}
		n, err := s.deleteWhere(ctx, `ts < ?1 OR (ts = ?1 AND id < ?2)`, ts, id)
		deleted += n
		if err != nil {
			return deleted, s.fail(ctx, err, "prune by rows")
		}
	}
	return deleted, nil
}

// deleteWhere deletes the events matching cond and takes them out of the
// totals, in one transaction.
func (s *Store) deleteWhere(ctx context.Context, cond string, args ...any) (int64, error) {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	t, err := totalsWhere(ctx, tx, cond, args, -1)
	if err != nil {
		return 0, err
	}
	stmts := newTxStmts(ctx, tx, s.stmts)
	if err := t.apply(stmts); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE `+cond, args...)
	if err != nil {
		return 0, err
	}
	// The run history's rows of the traces that lost events: those left
	// with none go, the others are summed again from what is left.
	traces := make([]string, 0, len(t.traces))
	for tr := range t.traces {
		traces = append(traces, tr)
	}
	if err := rebuildRuns(ctx, tx, traces); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// Write stores evs in one transaction; see eventstore.Store.
func (s *Store) Write(ctx context.Context, evs []svc.RuntimeEvent) error {
	if err := s.check(); err != nil {
		return err
	}
	if len(evs) == 0 {
		return nil
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(ctx, err, "write %d events", len(evs))
	}
	defer tx.Rollback()
	stmts := newTxStmts(ctx, tx, s.stmts)
	t := newTotals()
	args := make([]any, 0, insertWidth*min(len(evs), maxChunk))
	var payloads []byte
	for start := 0; start < len(evs); {
		// A chunk of rows at a time, so that args and payloads stay small.
		end := start + min(len(evs)-start, maxChunk)
		args, payloads = args[:0], payloads[:0]
		for i := start; i < end; i++ {
			ev := &evs[i]
			f := rollup.FactsOf(ev)
			var payload []byte
			payload, payloads = evcodec.Append(payloads, ev.Payload)
			args = append(args, ev.Timestamp.UnixMicro(), string(ev.EventType), ev.AgentName,
				ev.TaskID, ev.TraceID, ev.ParentTraceID, payload,
				f.Tokens, durationArg(f), f.Model, f.Tool, f.ErrKind, f.Runtime, ev.SpanID, ev.ParentSpanID, f.CostNanos, f.Cached, f.RunFlags)
			t.addEvent(ev, ev.Timestamp.UnixMicro(), &f)
		}
		if err := stmts.writeEvents(args); err != nil {
			return s.fail(ctx, err, "write %d events", len(evs))
		}
		start = end
	}
	if err := t.apply(stmts); err != nil {
		return s.fail(ctx, err, "write %d events", len(evs))
	}
	if err := tx.Commit(); err != nil {
		return s.fail(ctx, err, "write %d events", len(evs))
	}
	return nil
}

// Query returns matching events, newest first; see eventstore.Store.
func (s *Store) Query(ctx context.Context, q svc.EventQuery) ([]svc.RuntimeEvent, error) {
	return s.Events(ctx, q)
}

// Events returns matching events, newest first; see svc.EventReader.
func (s *Store) Events(ctx context.Context, q svc.EventQuery) ([]svc.RuntimeEvent, error) {
	q, err := rollup.CheckQuery(q)
	if err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	query, args := eventsSQL(q)
	rows, err := s.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.fail(ctx, err, "query")
	}
	out := []svc.RuntimeEvent{}
	err = scanEvents(rows, func(se rollup.StoredEvent) { out = append(out, se.Ev) })
	if err != nil {
		return nil, s.fail(ctx, err, "query")
	}
	return out, nil
}

// eventsSQL is the query of Events for q (normalized).
func eventsSQL(q svc.EventQuery) (string, []any) {
	var (
		where []string
		args  []any
	)
	if !q.Since.IsZero() {
		where, args = append(where, "ts >= ?"), append(args, q.Since.UnixMicro())
	}
	if !q.Until.IsZero() {
		where, args = append(where, "ts < ?"), append(args, q.Until.UnixMicro())
	}
	if q.TraceID != "" {
		where, args = append(where, "trace_id = ?"), append(args, q.TraceID)
	}
	switch q.EventType {
	case "":
	case svc.EventAgentCompleted:
		// The conditions of the partial indexes, as they are written
		// there, so that SQLite uses them (schema.go).
		where = append(where, whereCompleted)
	default:
		where, args = append(where, "event_type = ?", whereNotCompleted), append(args, string(q.EventType))
	}
	query := `SELECT ` + eventColumns + ` FROM events`
	// Without statistics SQLite would rather walk an index in the order
	// asked for, or by the type, and read every row it finds to check the
	// rest; one trace's events are few, and one type's are in a partial
	// index.
	switch {
	case q.TraceID != "":
		query += ` INDEXED BY events_trace_id`
	case q.EventType == svc.EventAgentCompleted:
		query += ` INDEXED BY events_completed_ts`
	}
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY ts DESC, id DESC LIMIT ?"
	args = append(args, q.Limit)

	return query, args
}

// eventColumns are the columns scanEvents reads, in its order.
const eventColumns = `id, ts, event_type, agent, task_id, trace_id, parent_trace_id, span_id, parent_span_id, payload`

// scanEvents reads rows of eventColumns into f and closes rows.
func scanEvents(rows *sql.Rows, f func(rollup.StoredEvent)) error {
	defer rows.Close()
	for rows.Next() {
		var (
			se      rollup.StoredEvent
			ev      = &se.Ev
			typ     string
			payload []byte
			err     error
		)
		if err := rows.Scan(&se.At.Seq, &se.At.US, &typ, &ev.AgentName, &ev.TaskID, &ev.TraceID, &ev.ParentTraceID, &ev.SpanID, &ev.ParentSpanID, &payload); err != nil {
			return err
		}
		ev.Timestamp, ev.EventType = time.UnixMicro(se.At.US).UTC(), svc.EventType(typ)
		if ev.Payload, err = evcodec.Decode(payload); err != nil {
			// Only another writer of the file could have put it there.
			return fmt.Errorf("payload of event %d: %w", se.At.Seq, err)
		}
		f(se)
	}
	return rows.Err()
}

// Close stops the pruning goroutine and closes the file. It is safe to
// call more than once.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.stop()
		<-s.done // a prune in progress finishes (or is cancelled) first
		s.closed.Store(true)
		err = errors.Join(closeStmts(s.stmts), s.reader.Close(), s.writer.Close())
		if err != nil {
			err = svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("eventstore: close %q", s.path))
		}
	})
	return err
}

func (s *Store) check() error {
	if s.closed.Load() {
		return rollup.ErrClosed(fmt.Sprintf("SQLite %q", s.path))
	}
	return nil
}

// fail wraps a database error once; see sqlitedb.Fail for the kinds.
func (s *Store) fail(ctx context.Context, err error, format string, args ...any) error {
	return sqlitedb.Fail(ctx, err, s.closed.Load(), "eventstore: "+fmt.Sprintf(format, args...))
}
