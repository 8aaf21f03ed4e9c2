package eventstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/svc-dev/svc"
)

// busyTimeoutMS bounds how long a statement waits for another process's
// write lock before failing.
const busyTimeoutMS = 5000

// Timestamps are Unix microseconds. The composite indexes serve the
// filtered queries in timestamp order; (ts) alone serves unfiltered ones
// and retention. The id (rowid) breaks timestamp ties in write order.
const sqliteSchema = `
CREATE TABLE IF NOT EXISTS events (
	id              INTEGER PRIMARY KEY,
	ts              INTEGER NOT NULL,
	event_type      TEXT NOT NULL,
	agent           TEXT NOT NULL,
	task_id         TEXT NOT NULL,
	trace_id        TEXT NOT NULL,
	parent_trace_id TEXT NOT NULL,
	payload         TEXT NOT NULL -- JSON object
);
CREATE INDEX IF NOT EXISTS events_ts ON events (ts);
CREATE INDEX IF NOT EXISTS events_trace_id ON events (trace_id, ts);
CREATE INDEX IF NOT EXISTS events_event_type ON events (event_type, ts);
`

const sqlInsert = `INSERT INTO events (ts, event_type, agent, task_id, trace_id, parent_trace_id, payload)
	VALUES (?, ?, ?, ?, ?, ?, ?)`

// SQLite is a Store in one SQLite file (WAL mode, pure-Go driver), safe for
// concurrent use. Retention is applied by a goroutine the store owns, every
// DefaultPruneInterval and once at open; between prunes the table may hold
// more than Retention allows. Close stops the goroutine.
type SQLite struct {
	path string
	r    Retention
	now  func() time.Time
	// writer has one connection so this process's writers queue in Go, not
	// in SQLite's busy handler; reader is a query-only pool that WAL lets
	// read while the writer writes.
	writer, reader *sql.DB
	insert         *sql.Stmt

	pruneEvery time.Duration // DefaultPruneInterval; tests shorten it
	pruned     chan struct{} // receives after each background prune, if set (tests)

	closeOnce sync.Once
	closed    atomic.Bool
	stop      context.CancelFunc // ends pruneLoop
	done      chan struct{}      // closed when pruneLoop has returned
}

var _ Store = (*SQLite)(nil)

// OpenSQLite opens (creating if needed) the event store in the file at
// path, with retention r, and starts its pruning goroutine.
func OpenSQLite(path string, r Retention) (*SQLite, error) {
	return openSQLite(path, r, DefaultPruneInterval, nil)
}

func openSQLite(path string, r Retention, every time.Duration, pruned chan struct{}) (*SQLite, error) {
	fail := func(err error) error {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("eventstore: open %q", path))
	}
	switch {
	case path == "", path == ":memory:", strings.HasPrefix(path, "file:"), strings.ContainsRune(path, '?'):
		return nil, svc.Errorf(svc.KindSpecValidation,
			"eventstore: open %q: want a plain file path (for events in memory, use NewMemory)", path)
	case r.MaxRows < 0 || r.MaxAge < 0:
		return nil, svc.Errorf(svc.KindSpecValidation, "eventstore: negative retention %+v", r)
	}
	params := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=synchronous(NORMAL)", busyTimeoutMS)
	writer, err := sql.Open("sqlite", path+"?"+params+"&_txlock=immediate")
	if err != nil {
		return nil, fail(err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)
	if err := initSQLite(writer); err != nil {
		writer.Close()
		return nil, fail(err)
	}
	insert, err := writer.Prepare(sqlInsert)
	if err != nil {
		writer.Close()
		return nil, fail(err)
	}
	reader, err := sql.Open("sqlite", path+"?"+params+"&_pragma=query_only(1)")
	if err != nil {
		insert.Close()
		writer.Close()
		return nil, fail(err)
	}
	reader.SetMaxOpenConns(4)
	reader.SetMaxIdleConns(4)
	s := &SQLite{
		path: path, r: r, now: time.Now, writer: writer, reader: reader, insert: insert,
		pruneEvery: every, pruned: pruned, done: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go s.pruneLoop(ctx)
	return s, nil
}

func initSQLite(db *sql.DB) error {
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("cannot turn on WAL mode (journal_mode is %s)", mode)
	}
	_, err := db.Exec(sqliteSchema)
	return err
}

// pruneLoop applies the retention at open and then every pruneEvery,
// until Close. A failed prune is retried at the next tick: retention is
// best effort and must not take the store down.
func (s *SQLite) pruneLoop(ctx context.Context) {
	defer close(s.done)
	if s.r == (Retention{}) {
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
func (s *SQLite) Prune(ctx context.Context) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var deleted int64
	if s.r.MaxAge > 0 {
		cutoff := s.now().Add(-s.r.MaxAge).UnixMicro()
		res, err := s.writer.ExecContext(ctx, `DELETE FROM events WHERE ts < ?`, cutoff)
		if err != nil {
			return deleted, s.fail(ctx, err, "prune by age")
		}
		n, _ := res.RowsAffected()
		deleted += n
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
		res, err := s.writer.ExecContext(ctx, `DELETE FROM events WHERE ts < ?1 OR (ts = ?1 AND id < ?2)`, ts, id)
		if err != nil {
			return deleted, s.fail(ctx, err, "prune by rows")
		}
		n, _ := res.RowsAffected()
		deleted += n
	}
	return deleted, nil
}

// Write stores evs in one transaction; see Store.
func (s *SQLite) Write(ctx context.Context, evs []svc.RuntimeEvent) error {
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
	stmt := tx.StmtContext(ctx, s.insert)
	for _, ev := range evs {
		_, err := stmt.ExecContext(ctx, ev.Timestamp.UnixMicro(), string(ev.EventType), ev.AgentName,
			ev.TaskID, ev.TraceID, ev.ParentTraceID, encodePayload(ev.Payload))
		if err != nil {
			return s.fail(ctx, err, "write %d events", len(evs))
		}
	}
	if err := tx.Commit(); err != nil {
		return s.fail(ctx, err, "write %d events", len(evs))
	}
	return nil
}

// Query returns matching events, newest first; see Store.
func (s *SQLite) Query(ctx context.Context, q Query) ([]svc.RuntimeEvent, error) {
	q, err := q.normalize()
	if err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
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
	if q.EventType != "" {
		where, args = append(where, "event_type = ?"), append(args, string(q.EventType))
	}
	query := `SELECT ts, event_type, agent, task_id, trace_id, parent_trace_id, payload FROM events`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY ts DESC, id DESC LIMIT ?"
	args = append(args, q.Limit)

	rows, err := s.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.fail(ctx, err, "query")
	}
	defer rows.Close()
	var out []svc.RuntimeEvent
	for rows.Next() {
		var (
			ev      svc.RuntimeEvent
			ts      int64
			typ     string
			payload []byte
		)
		if err := rows.Scan(&ts, &typ, &ev.AgentName, &ev.TaskID, &ev.TraceID, &ev.ParentTraceID, &payload); err != nil {
			return nil, s.fail(ctx, err, "query")
		}
		ev.Timestamp, ev.EventType = time.UnixMicro(ts).UTC(), svc.EventType(typ)
		if ev.Payload, err = decodePayload(payload); err != nil {
			// Only another writer of the file could have put it there.
			return nil, s.fail(ctx, err, "query: payload of event at %d", ts)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, err, "query")
	}
	return out, nil
}

// Close stops the pruning goroutine and closes the file. It is safe to
// call more than once.
func (s *SQLite) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.stop()
		<-s.done // a prune in progress finishes (or is cancelled) first
		s.closed.Store(true)
		err = errors.Join(s.insert.Close(), s.reader.Close(), s.writer.Close())
		if err != nil {
			err = svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("eventstore: close %q", s.path))
		}
	})
	return err
}

func (s *SQLite) check() error {
	if s.closed.Load() {
		return errClosed(fmt.Sprintf("SQLite %q", s.path))
	}
	return nil
}

// fail wraps a database error once. When the caller's context ended, that
// is the cause that matters.
func (s *SQLite) fail(ctx context.Context, err error, format string, args ...any) error {
	msg := "eventstore: " + fmt.Sprintf(format, args...)
	if cerr := ctx.Err(); cerr != nil {
		return svc.Wrap(svc.KindOf(cerr), cerr, msg)
	}
	if s.closed.Load() {
		return svc.Wrap(svc.KindShuttingDown, err, msg)
	}
	return svc.Wrap(svc.KindRuntime, err, msg)
}
