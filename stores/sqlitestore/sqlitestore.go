// Package sqlitestore is the svc.RunStore kept in one SQLite file, through
// the pure-Go modernc.org/sqlite driver (no cgo).
//
// The file is opened by internal/sqlitedb, as the event store's is: WAL
// mode, so readers (Get, Events, streams) never wait for the writer; one
// writer connection, which queues this process's writers in Go rather than
// in SQLite's sleeping busy handler; busy_timeout for other processes
// writing the same file; synchronous=NORMAL (a process crash loses nothing
// committed, a power cut may lose the last commits). A busy file is an
// AgentRuntimeError matching sqlitedb.ErrBusy, which callers may retry.
//
// Group commit: every write of a run goes through a commit queue
// (stores/internal/groupcommit). Its one writer goroutine takes everything
// queued and makes it in one transaction, then answers each caller, so
// concurrent writes share a commit and a caller still hears back only once
// its write is committed. A write the state machine refuses changes
// nothing and fails alone; a database error rolls the batch back and each
// of its writes is made again alone. OpenWith with MaxBatch 1 turns it off.
//
// The state machine is enforced in SQL: every change is a conditional UPDATE
// (or INSERT … SELECT) that matches only runs in a state that allows it, so
// a late writer in any process is refused by the store itself.
//
// Streams run the stores' follow loop (stores/internal/follow): they replay
// from the run_events table and then wait for a signal from this process's
// writers, with a slow poll (PollInterval) for writers in other processes.
//
// ListRuns reads one page with one indexed query: runs_created orders the
// unfiltered listing and runs_state_created the listing of one state, so a
// page costs its own rows whatever the table holds. Open adds both indexes
// to a file made before them.
package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/sqlitedb"
	"github.com/svc-dev/svc/stores/internal/follow"
	"github.com/svc-dev/svc/stores/internal/groupcommit"
	"github.com/svc-dev/svc/stores/internal/runlist"
)

// PollInterval is how often a waiting stream re-reads its run, to see
// changes made by other processes sharing the file; changes made through
// the same Store wake it at once.
const PollInterval = 250 * time.Millisecond

// schemaVersion is stored in PRAGMA user_version; a file from a newer
// version is refused rather than misread. The listing indexes did not bump
// it: indexes change nothing an older build reads or writes (SQLite keeps
// them up to date for it too), so it may still open the file. Nor did the
// trace_id column (see migrate): an older build names the columns it
// writes and reads, so it still works with the file, leaving the runs it
// creates without a trace id, as if it had created them before. The step
// log (run_steps) did not either, for the same reasons: an older build
// never reads it. Nor did the task and resumed
// columns of resumable runs: the runs an older build creates have no task,
// so a later Recover fails them as Interrupt would.
const schemaVersion = 1

// pageSize is how many events a stream reads per query, bounding its memory
// on long histories.
const pageSize = 512

const schema = `
CREATE TABLE IF NOT EXISTS runs (
	run_id     TEXT PRIMARY KEY,
	target     TEXT NOT NULL,
	kind       TEXT NOT NULL,
	state      TEXT NOT NULL,
	progress   TEXT,             -- RunProgress JSON, NULL until the first update
	result     BLOB,             -- served verbatim, NULL until set
	reason     TEXT NOT NULL DEFAULT '',
	trace_id   TEXT NOT NULL DEFAULT '', -- see addedColumns
	tenant     TEXT NOT NULL DEFAULT '', -- see addedColumns
	-- the submitted task (RunRecord.Task), NULL for a run created without
	-- one, and how many times the run was resumed; see addedColumns
	task       BLOB,
	resumed    INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL, -- Unix microseconds
	updated_at INTEGER NOT NULL
);
-- The listing order (newest first, then by run id); runs_state_created also
-- serves Interrupt's search by state, which runs_state served before it.
CREATE INDEX IF NOT EXISTS runs_created ON runs (created_at, run_id);
CREATE INDEX IF NOT EXISTS runs_state_created ON runs (state, created_at, run_id);
DROP INDEX IF EXISTS runs_state;
CREATE TABLE IF NOT EXISTS run_events (
	run_id  TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	type    TEXT NOT NULL,
	agent   TEXT NOT NULL,
	task_id TEXT NOT NULL,
	error   TEXT NOT NULL,
	ts      INTEGER NOT NULL,    -- Unix microseconds
	request BLOB,                -- a run_waiting event's WaitRequest JSON; see addedColumns
	PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
-- A run's step log (svc.StepLog). total is the log's size (the sum of
-- RunStep.Size) up to and with this step: an append reads the run's last
-- step, not the whole log, for its bound and its Seq, and writes nothing
-- but its step (a counter in the runs row cost an UPDATE of the row per
-- step). A rowid table, unlike run_events: a step's data (a model's
-- answer, a node's result) is large, and rows appended at the table's end
-- with a small index beside them cost about half of keeping them in a
-- (run_id, seq) B-tree, which splits its pages at every run's position
-- (BenchmarkAppendStepsParallel). migrateSteps rewrites the WITHOUT ROWID
-- table of the build before.
CREATE TABLE IF NOT EXISTS run_steps (
	run_id TEXT NOT NULL,
	seq    INTEGER NOT NULL,
	kind   TEXT NOT NULL,
	key    TEXT NOT NULL,
	data   BLOB NOT NULL,
	ts     INTEGER NOT NULL,     -- Unix microseconds
	total  INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS run_steps_seq ON run_steps (run_id, seq);
-- Idempotency-Keys (CreateIdempotent). A new table needs no new schema
-- version either: an older build never reads it.
CREATE TABLE IF NOT EXISTS idempotency (
	key         TEXT PRIMARY KEY,
	fingerprint TEXT NOT NULL,
	run_id      TEXT NOT NULL,
	expires_at  INTEGER NOT NULL -- Unix microseconds
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idempotency_expires ON idempotency (expires_at);
`

// SQL statements. ?1 is always the run id. A state list of two is enough:
// no state is reachable from more than two others.
const (
	sqlCreate = `INSERT INTO runs (run_id, target, kind, state, created_at, updated_at, trace_id, task, tenant)
		VALUES (?1, ?2, ?3, 'pending', ?4, ?4, ?5, ?6, ?7) ON CONFLICT (run_id) DO NOTHING`
	// sqlGet reads the run with its last step (NULLs without steps).
	sqlGet = `SELECT r.target, r.kind, r.state, r.progress, r.result, r.reason, r.trace_id, r.tenant, r.task, r.resumed,
		s.seq, s.kind, s.key, s.ts, r.created_at, r.updated_at
		FROM runs r LEFT JOIN (SELECT seq, kind, key, ts FROM run_steps WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1) s ON 1
		WHERE r.run_id = ?1`
	sqlState    = `SELECT state FROM runs WHERE run_id = ?1`
	sqlSetState = `UPDATE runs SET state = ?2, reason = ?3, updated_at = ?4
		WHERE run_id = ?1 AND state IN (?5, ?6, ?9)`
	// sqlFinish is SetState with the result: ?7 replaces the result when
	// ?8 is 1 (a NULL result is no result).
	sqlFinish = `UPDATE runs SET state = ?2, reason = ?3, updated_at = ?4,
		result = CASE WHEN ?8 = 1 THEN ?7 ELSE result END
		WHERE run_id = ?1 AND state IN (?5, ?6, ?9)`
	sqlSetProgress = `UPDATE runs SET progress = ?2, updated_at = ?3
		WHERE run_id = ?1 AND state IN ('pending', 'running')`
	sqlSetResult = `UPDATE runs SET result = ?2, updated_at = ?3
		WHERE run_id = ?1 AND state IN ('pending', 'running')`
	// sqlAppend numbers and inserts an event in one statement, and only
	// while the run is not terminal: the statement takes the write lock
	// before it reads, so no other writer can slip in between.
	sqlAppend = `INSERT INTO run_events (run_id, seq, type, agent, task_id, error, ts, request)
		SELECT ?1, COALESCE((SELECT MAX(seq) FROM run_events WHERE run_id = ?1), 0) + 1, ?2, ?3, ?4, ?5, ?6, ?7
		FROM runs WHERE run_id = ?1 AND state IN ('pending', 'running')
		RETURNING seq`
	// sqlAppendFinal appends SetState's final event inside its transaction,
	// after the state has already moved to terminal.
	sqlAppendFinal = `INSERT INTO run_events (run_id, seq, type, agent, task_id, error, ts, request)
		VALUES (?1, COALESCE((SELECT MAX(seq) FROM run_events WHERE run_id = ?1), 0) + 1, ?2, ?3, ?4, ?5, ?6, ?7)`
	// sqlEvents reads a run's state with a page of its events, from one
	// snapshot: when the state is terminal, the events are complete. A run
	// without events yields one row of NULL events; an unknown run, none.
	sqlEvents = `SELECT r.state, e.seq, e.type, e.agent, e.task_id, e.error, e.ts, e.request
		FROM runs r LEFT JOIN run_events e ON e.run_id = r.run_id AND e.seq > ?2
		WHERE r.run_id = ?1 ORDER BY e.seq LIMIT ?3`
	// sqlStepsLast reads what a step batch is checked against before any
	// of it is written, so a refused batch writes nothing: the run's state,
	// and the Seq and log size of its last step (0, 0 without steps); no
	// row for an unknown run. It runs in the writer's transaction, which
	// no other write can enter before the batch's inserts.
	sqlStepsLast = `SELECT r.state, COALESCE(s.seq, 0), COALESCE(s.total, 0) FROM runs r
		LEFT JOIN (SELECT seq, total FROM run_steps WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1) s ON 1
		WHERE r.run_id = ?1`
	sqlStepInsert = `INSERT INTO run_steps (run_id, seq, kind, key, data, ts, total) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)`
	// sqlStepAppend is sqlStepsLast and sqlStepInsert in one statement,
	// for the common batch of one step (?6: its size, ?7: the bound): no
	// row is inserted, and none returned, when the run is unknown or
	// terminal or the step would pass the bound.
	sqlStepAppend = `INSERT INTO run_steps (run_id, seq, kind, key, data, ts, total)
		SELECT ?1, COALESCE(s.seq, 0) + 1, ?2, ?3, ?4, ?5, COALESCE(s.total, 0) + ?6 FROM runs r
		LEFT JOIN (SELECT seq, total FROM run_steps WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1) s ON 1
		WHERE r.run_id = ?1 AND r.state IN ('pending', 'running') AND COALESCE(s.total, 0) + ?6 <= ?7
		RETURNING seq`
	// sqlSteps reads the run's existence with a page of its steps, as
	// sqlEvents does.
	sqlSteps = `SELECT e.seq, e.kind, e.key, e.data, e.ts
		FROM runs r LEFT JOIN run_steps e ON e.run_id = r.run_id AND e.seq > ?2
		WHERE r.run_id = ?1 ORDER BY e.seq LIMIT ?3`
	sqlIdemGet = `SELECT fingerprint, run_id FROM idempotency WHERE key = ?1 AND expires_at > ?2`
	sqlIdemPut = `INSERT INTO idempotency (key, fingerprint, run_id, expires_at) VALUES (?1, ?2, ?3, ?4)
		ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, run_id = excluded.run_id,
		expires_at = excluded.expires_at`
	// sqlIdemExpire drops a bounded batch of expired keys per call, so no
	// call pays for a long backlog; sqlIdemTrim then keeps the bound,
	// dropping the keys closest to expiry.
	sqlIdemExpire = `DELETE FROM idempotency WHERE key IN
		(SELECT key FROM idempotency WHERE expires_at <= ?1 ORDER BY expires_at LIMIT 64)`
	sqlIdemTrim = `DELETE FROM idempotency WHERE key IN (SELECT key FROM idempotency ORDER BY expires_at
		LIMIT max(0, (SELECT count(*) FROM idempotency) - ?1))`
	sqlInterruptList = `SELECT run_id, target, progress, task IS NOT NULL AND length(task) > 0
		FROM runs WHERE state IN ('pending', 'running')`
	sqlClaim = `UPDATE runs SET resumed = resumed + 1, updated_at = ?2
		WHERE run_id = ?1 AND state IN ('pending', 'running')`
	sqlInterrupt = `UPDATE runs SET state = 'failed', reason = ?2, result = ?3, progress = ?4, updated_at = ?5
		WHERE run_id = ?1 AND state IN ('pending', 'running')`
)

// listQuery is a page of ListRuns: ?1 the row count, ?2 the state, ?3 and
// ?4 the cursor's created_at and run_id. The row value comparison keeps the
// scan on the index from the cursor on; the four variants keep a filter
// that does not apply out of the query, where it would defeat the index.
func listQuery(state, cursor bool) string {
	// ?5, a tenant, filters unless it is '': a residual test on the rows
	// the index gives (there is no index by tenant).
	where := []string{"(?5 = '' OR tenant = ?5)"}
	if state {
		where = append(where, "state = ?2")
	}
	if cursor {
		where = append(where, "(created_at, run_id) < (?3, ?4)")
	}
	q := `SELECT run_id, target, kind, state, progress, reason, trace_id, tenant, created_at, updated_at FROM runs`
	q += " WHERE " + strings.Join(where, " AND ")
	return q + " ORDER BY created_at DESC, run_id DESC LIMIT ?1"
}

// Store is a svc.RunStore in one SQLite file. It is safe for concurrent
// use, and several processes may share the file.
type Store struct {
	path string
	// writer has a single connection, so this process's writes queue in
	// database/sql instead of spinning in SQLite's busy handler.
	writer *sql.DB
	// reader is a small pool of query-only connections; WAL lets them read
	// while the writer writes.
	reader *sql.DB
	stmt   statements
	bstmt  batchStatements // AppendBatch's

	// q is the commit queue every write of a run goes through (nil when
	// Options.MaxBatch is 1: each write commits alone, in its caller).
	q *groupcommit.Queue[op]
	// commits counts the transactions the writes committed (Commits).
	commits atomic.Int64

	notify notifier
	poll   time.Duration // PollInterval; tests raise it to prove the signals
	// closeMu orders Stream's registration of a goroutine against Close.
	closeMu sync.Mutex
	closed  atomic.Bool
	done    chan struct{} // closed by Close, ends every stream
	streams sync.WaitGroup

	maxStepBytes int64 // Options.MaxStepBytes
}

var (
	_ svc.RunStore        = (*Store)(nil)
	_ svc.RunLister       = (*Store)(nil)
	_ svc.IdempotentStore = (*Store)(nil)
	_ svc.StepLog         = (*Store)(nil)
	_ svc.ResumableStore  = (*Store)(nil)
)

// Options tune OpenWith; the zero value is Open's defaults.
type Options struct {
	// MaxBatch is the most writes one transaction commits for many
	// callers (groupcommit.DefaultMaxBatch when 0). 1 turns group commit
	// off: each write is its own transaction, committed by its caller, as
	// before group commit (the baseline of the benchmarks).
	MaxBatch int
	// Queue bounds the writes waiting for the writer
	// (groupcommit.DefaultQueue when 0).
	Queue int
	// MaxStepBytes bounds each run's step log (svc.DefaultMaxStepBytes
	// when 0).
	MaxStepBytes int64
}

// Open opens the store in the file at path, creating the file and its
// tables if needed. The directory must exist.
func Open(path string) (*Store, error) { return OpenWith(path, Options{}) }

// OpenWith is Open with options.
func OpenWith(path string, opts Options) (*Store, error) {
	abs, err := checkPath(path)
	if err != nil {
		return nil, err
	}
	fail := func(err error) error {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("sqlitestore: open %q", path))
	}
	// An absolute path never starts with "file:", so the driver passes it
	// to SQLite as a plain file name, not a URI.
	db, err := sqlitedb.Open(abs, sqlitedb.Options{Init: initSchema})
	if err != nil {
		return nil, fail(err)
	}
	writer, reader := db.Writer, db.Reader
	s := &Store{
		path: path, writer: writer, reader: reader, poll: PollInterval,
		notify: notifier{chans: map[string]chan struct{}{}}, done: make(chan struct{}),
		maxStepBytes: opts.MaxStepBytes,
	}
	if s.maxStepBytes <= 0 {
		s.maxStepBytes = svc.DefaultMaxStepBytes
	}
	if err := errors.Join(s.stmt.prepare(writer, reader), s.bstmt.prepare(writer)); err != nil {
		_ = s.stmt.close()
		_ = s.bstmt.close()
		reader.Close()
		writer.Close()
		return nil, fail(err)
	}
	if opts.MaxBatch != 1 {
		s.q = groupcommit.New(groupcommit.Options{MaxBatch: opts.MaxBatch, Queue: opts.Queue}, s.commit, s.closedErr)
	}
	return s, nil
}

// statements are prepared once: preparing costs as much as running these
// small statements. database/sql prepares each again, lazily, on every
// connection of its pool that runs it.
type statements struct {
	create, setState, finish, setProgress, setResult, append, appendFinal, stateW, getW *sql.Stmt // writer
	stepsLast, stepInsert, stepAppend                                                   *sql.Stmt // writer
	get, state, events, steps                                                           *sql.Stmt // reader
	// list[state filter][cursor] are the ListRuns queries (reader).
	list [2][2]*sql.Stmt
}

func (st *statements) prepare(writer, reader *sql.DB) error {
	for _, p := range []struct {
		db    *sql.DB
		query string
		stmt  **sql.Stmt
	}{
		{writer, sqlCreate, &st.create},
		{writer, sqlSetState, &st.setState},
		{writer, sqlFinish, &st.finish},
		{writer, sqlSetProgress, &st.setProgress},
		{writer, sqlSetResult, &st.setResult},
		{writer, sqlAppend, &st.append},
		{writer, sqlAppendFinal, &st.appendFinal},
		{writer, sqlState, &st.stateW},
		{writer, sqlGet, &st.getW},
		{writer, sqlStepsLast, &st.stepsLast},
		{writer, sqlStepInsert, &st.stepInsert},
		{writer, sqlStepAppend, &st.stepAppend},
		{reader, sqlSteps, &st.steps},
		{reader, sqlGet, &st.get},
		{reader, sqlState, &st.state},
		{reader, sqlEvents, &st.events},
		{reader, listQuery(false, false), &st.list[0][0]},
		{reader, listQuery(false, true), &st.list[0][1]},
		{reader, listQuery(true, false), &st.list[1][0]},
		{reader, listQuery(true, true), &st.list[1][1]},
	} {
		stmt, err := p.db.Prepare(p.query)
		if err != nil {
			return err
		}
		*p.stmt = stmt
	}
	return nil
}

func (st *statements) close() error {
	var errs []error
	for _, stmt := range []*sql.Stmt{st.create, st.setState, st.finish, st.setProgress, st.setResult, st.append, st.appendFinal, st.stateW, st.getW,
		st.stepsLast, st.stepInsert, st.stepAppend, st.steps, st.get, st.state, st.events, st.list[0][0], st.list[0][1], st.list[1][0], st.list[1][1]} {
		if stmt != nil {
			errs = append(errs, stmt.Close())
		}
	}
	return errors.Join(errs...)
}

// checkPath refuses what SQLite would misread or fail on with a vague
// message, and returns the absolute path.
func checkPath(path string) (string, error) {
	bad := func(why string) error {
		return svc.Errorf(svc.KindRuntime, "sqlitestore: open %q: %s", path, why)
	}
	switch {
	case path == "":
		return "", bad("empty path")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return "", bad("want a file path (for a store in memory, use memstore)")
	case strings.ContainsRune(path, '?'):
		return "", bad("a file path may not contain '?'")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("sqlitestore: open %q", path))
	}
	dir := filepath.Dir(abs)
	fi, err := os.Stat(dir)
	if err != nil {
		why := "cannot read its directory"
		if errors.Is(err, fs.ErrNotExist) {
			why = "its directory does not exist"
		}
		return "", svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("sqlitestore: open %q: %s", path, why))
	}
	if !fi.IsDir() {
		return "", bad(dir + " is not a directory")
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return "", bad("is a directory")
	}
	return abs, nil
}

// initSchema creates the tables and checks the schema version.
func initSchema(db *sql.DB) error {
	var version int
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	if version > schemaVersion {
		return fmt.Errorf("schema version %d is newer than this build's %d", version, schemaVersion)
	}
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := migrateSteps(tx); err != nil {
		return fmt.Errorf("migrating the step log: %w", err)
	}
	if _, err := tx.Exec(schema); err != nil {
		return err
	}
	if _, err := tx.Exec(batchSchema); err != nil {
		return err
	}
	if _, err := tx.Exec(webhookSchema); err != nil {
		return err
	}
	if err := addColumns(tx); err != nil {
		return fmt.Errorf("migrating the runs table: %w", err)
	}
	if _, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
		return err
	}
	return tx.Commit()
}

// addedColumns are the columns of the runs and run_steps tables that files
// made by earlier versions lack, in the form ALTER TABLE ADD COLUMN takes: CREATE
// TABLE IF NOT EXISTS leaves such a table as it is, so addColumns adds
// them, once, in initSchema's transaction (the writer's transactions are
// IMMEDIATE: two processes opening one old file add them one after the
// other, the second finding them there). Rows written before have the
// default: trace_id ” (RunStatus.TraceID absent), tenant ” (the
// default tenant), task NULL (a run that
// cannot be resumed) and resumed 0. Files of the build that kept the step
// log's size in the runs row keep its columns (step_bytes, step_count),
// which nothing reads or writes any more.
var addedColumns = []struct{ table, column string }{
	{"runs", `trace_id TEXT NOT NULL DEFAULT ''`},
	{"runs", `tenant TEXT NOT NULL DEFAULT ''`},
	{"runs", `task BLOB`},
	{"runs", `resumed INTEGER NOT NULL DEFAULT 0`},
	{"run_events", `request BLOB`},
	{"batches", `mode TEXT NOT NULL DEFAULT ''`},
	{"batches", `provider BLOB`},
}

// migrateSteps rewrites the run_steps table of the build before (WITHOUT
// ROWID, keyed by (run_id, seq), without total) into the rowid table of
// schema, keeping every step and computing each one's total; the schema's
// CREATE statements then find it there.
func migrateSteps(tx *sql.Tx) error {
	var ddl string
	err := tx.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'run_steps'`).Scan(&ddl)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !strings.Contains(strings.ToUpper(ddl), "WITHOUT ROWID")) {
		return nil // none yet, or already the rowid table
	}
	if err != nil {
		return err
	}
	_, err = tx.Exec(`ALTER TABLE run_steps RENAME TO run_steps_old;
CREATE TABLE run_steps (run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
	data BLOB NOT NULL, ts INTEGER NOT NULL, total INTEGER NOT NULL);
INSERT INTO run_steps (run_id, seq, kind, key, data, ts, total)
	SELECT run_id, seq, kind, key, data, ts,
		SUM(length(CAST(key AS BLOB)) + length(data)) OVER (PARTITION BY run_id ORDER BY seq)
	FROM run_steps_old ORDER BY run_id, seq;
DROP TABLE run_steps_old;`)
	return err
}

// addColumns adds the addedColumns the tables lack.
func addColumns(tx *sql.Tx) error {
	have := map[string]bool{} // table.column
	for _, table := range []string{"runs", "run_events", "batches"} {
		rows, err := tx.Query(`SELECT name FROM pragma_table_info(?)`, table)
		if err != nil {
			return err
		}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				rows.Close()
				return err
			}
			have[table+"."+name] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	for _, c := range addedColumns {
		if name, _, _ := strings.Cut(c.column, " "); !have[c.table+"."+name] {
			if _, err := tx.Exec(`ALTER TABLE ` + c.table + ` ADD COLUMN ` + c.column); err != nil {
				return err
			}
		}
	}
	return nil
}

// Commits is how many transactions the writes of runs have committed
// since Open: with group commit, fewer than the writes.
func (s *Store) Commits() int64 { return s.commits.Load() }

// Path returns the path the store was opened with.
func (s *Store) Path() string { return s.path }

// Create registers a new pending run; see svc.RunStore.
func (s *Store) Create(ctx context.Context, rec svc.RunRecord) error {
	if err := s.check(); err != nil {
		return err
	}
	if rec.RunID == "" {
		return svc.Errorf(svc.KindSpecValidation, "sqlitestore: empty run id")
	}
	if err := svc.CheckTask(rec.RunID, rec.Task); err != nil {
		return err
	}
	created := time.Now()
	if !rec.CreatedAt.IsZero() {
		created = rec.CreatedAt
	}
	return s.do(ctx, op{id: rec.RunID, what: fmt.Sprintf("create run %q", rec.RunID),
		run: func(ctx context.Context, tx *batchTx) (error, error) {
			res, err := tx.stmt(ctx, s.stmt.create).ExecContext(ctx, rec.RunID, rec.Target, string(rec.Kind), micros(created), rec.TraceID, task(rec), rec.Tenant)
			if err != nil {
				return nil, err
			}
			if n, err := res.RowsAffected(); err != nil {
				return nil, err
			} else if n == 0 {
				return svc.Errorf(svc.KindRunState, "sqlitestore: run %q already exists", rec.RunID), nil
			}
			return nil, nil
		}})
}

// CreateIdempotent reserves key and creates rec in one transaction; see
// svc.IdempotentStore. The writer's transactions are IMMEDIATE, so the
// check of the key and the writes are one step for every process sharing
// the file. Each call also drops up to 64 expired keys, and counts the keys
// to keep svc.MaxIdempotencyKeys (a scan of an index, about a millisecond at
// the bound).
func (s *Store) CreateIdempotent(ctx context.Context, key, fingerprint string, rec svc.RunRecord, ttl time.Duration) (string, bool, error) {
	if err := s.check(); err != nil {
		return "", false, err
	}
	if rec.RunID == "" {
		return "", false, svc.Errorf(svc.KindSpecValidation, "sqlitestore: empty run id")
	}
	if err := svc.CheckTask(rec.RunID, rec.Task); err != nil {
		return "", false, err
	}
	if ttl <= 0 {
		ttl = svc.DefaultIdempotencyTTL
	}
	now := time.Now()
	created := now
	if !rec.CreatedAt.IsZero() {
		created = rec.CreatedAt
	}
	var held string
	err := s.do(ctx, op{id: rec.RunID, what: fmt.Sprintf("create run %q with Idempotency-Key %q", rec.RunID, key), atomic: true,
		run: func(ctx context.Context, tx *batchTx) (error, error) {
			held = ""
			var heldFP, heldRun string
			switch err := tx.queryRow(ctx, sqlIdemGet, key, micros(now)).Scan(&heldFP, &heldRun); {
			case err == nil:
				if heldFP != fingerprint {
					return svc.IdempotencyConflict(key, heldRun), nil
				}
				held = heldRun
				return nil, nil
			case !errors.Is(err, sql.ErrNoRows):
				return nil, err
			}
			res, err := tx.stmt(ctx, s.stmt.create).ExecContext(ctx, rec.RunID, rec.Target, string(rec.Kind), micros(created), rec.TraceID, task(rec), rec.Tenant)
			if err != nil {
				return nil, err
			}
			if n, err := res.RowsAffected(); err != nil {
				return nil, err
			} else if n == 0 {
				return svc.Errorf(svc.KindRunState, "sqlitestore: run %q already exists", rec.RunID), nil
			}
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{sqlIdemPut, []any{key, fingerprint, rec.RunID, micros(now.Add(ttl))}},
				{sqlIdemExpire, []any{micros(now)}},
				{sqlIdemTrim, []any{svc.MaxIdempotencyKeys}},
			} {
				if _, err := tx.exec(ctx, q.sql, q.args...); err != nil {
					return nil, err
				}
			}
			return nil, nil
		}})
	switch {
	case err != nil:
		return "", false, err
	case held != "":
		return held, false, nil
	}
	return rec.RunID, true, nil
}

// task is the value of rec's task column: NULL without a Task.
func task(rec svc.RunRecord) any {
	if len(rec.Task) == 0 {
		return nil
	}
	return []byte(rec.Task)
}

// Get returns a run's record.
func (s *Store) Get(ctx context.Context, runID string) (svc.RunRecord, error) {
	if err := s.check(); err != nil {
		return svc.RunRecord{}, err
	}
	rec, err := s.get(ctx, s.stmt.get, runID)
	if errors.Is(err, sql.ErrNoRows) {
		return svc.RunRecord{}, unknown(runID)
	}
	return rec, err
}

// get reads a run's record with stmt: sqlGet on the reader, or in a
// transaction of the writer. An unknown run is sql.ErrNoRows.
func (s *Store) get(ctx context.Context, stmt *sql.Stmt, runID string) (svc.RunRecord, error) {
	rec := svc.RunRecord{RunID: runID}
	var (
		state             string
		progress          sql.NullString
		result, task      []byte // NULL scans as nil: no result yet, no task
		created, updated  int64
		stepSeq, stepTS   sql.NullInt64 // the last step's, NULL without steps
		stepKind, stepKey sql.NullString
	)
	err := stmt.QueryRowContext(ctx, runID).Scan(
		&rec.Target, &rec.Kind, &state, &progress, &result, &rec.Reason, &rec.TraceID, &rec.Tenant, &task, &rec.Resumed,
		&stepSeq, &stepKind, &stepKey, &stepTS, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return svc.RunRecord{}, err
	}
	if err != nil {
		return svc.RunRecord{}, s.fail(ctx, err, "get run %q", runID)
	}
	if len(task) == 0 {
		task = nil
	}
	rec.State, rec.Result, rec.Task = svc.RunState(state), result, task
	rec.CreatedAt, rec.UpdatedAt = fromMicros(created), fromMicros(updated)
	if stepSeq.Valid {
		rec.Steps = stepSeq.Int64
		rec.CurrentStep = &svc.StepRef{Seq: stepSeq.Int64, Kind: svc.StepKind(stepKind.String), Key: stepKey.String, At: fromMicros(stepTS.Int64)}
	}
	if progress.Valid {
		var p svc.RunProgress
		if err := json.Unmarshal([]byte(progress.String), &p); err != nil {
			return svc.RunRecord{}, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("sqlitestore: run %q: corrupt progress", runID))
		}
		rec.Progress = &p
	}
	return rec, nil
}

// SetState moves a run to next, appending final as its last event in the
// same transaction when not nil; see svc.RunStore.
func (s *Store) SetState(ctx context.Context, runID string, next svc.RunState, reason string, final *svc.RunEvent) error {
	return s.move(ctx, runID, next, reason, false, nil, final)
}

// Finish ends a run in one transaction: state, reason, result and final
// event; see svc.RunStore.
func (s *Store) Finish(ctx context.Context, runID string, next svc.RunState, reason string, result json.RawMessage, final *svc.RunEvent) error {
	if !next.Terminal() {
		return s.refuse(ctx, runID, fmt.Sprintf("cannot finish as %q", next))
	}
	return s.move(ctx, runID, next, reason, true, result, final)
}

// move is SetState, and Finish when finish is set.
func (s *Store) move(ctx context.Context, runID string, next svc.RunState, reason string, finish bool, result json.RawMessage, final *svc.RunEvent) error {
	if err := s.check(); err != nil {
		return err
	}
	// The states next may be reached from, per the root state machine.
	var from []any
	for _, st := range []svc.RunState{svc.RunPending, svc.RunRunning, svc.RunCompleted, svc.RunFailed, svc.RunCancelled, svc.RunWaiting} {
		if st.CanMove(next) {
			from = append(from, string(st))
		}
	}
	if len(from) == 0 {
		// Nothing moves to next; say why for this run.
		return s.refuse(ctx, runID, fmt.Sprintf("cannot move to %q", next))
	}
	for len(from) < 3 {
		from = append(from, from[0])
	}
	return s.do(ctx, op{id: runID, what: fmt.Sprintf("set state of run %q", runID), atomic: final != nil,
		run: func(ctx context.Context, tx *batchTx) (error, error) {
			now := micros(time.Now())
			var (
				res sql.Result
				err error
			)
			if finish {
				has := 0
				if result != nil {
					has = 1
				}
				res, err = tx.stmt(ctx, s.stmt.finish).ExecContext(ctx, runID, string(next), reason, now, from[0], from[1], []byte(result), has, from[2])
			} else {
				res, err = tx.stmt(ctx, s.stmt.setState).ExecContext(ctx, runID, string(next), reason, now, from[0], from[1], nil, 0, from[2])
			}
			if err != nil {
				return nil, err
			}
			if n, err := res.RowsAffected(); err != nil {
				return nil, err
			} else if n == 0 {
				return s.refuseTx(ctx, tx, runID, fmt.Sprintf("cannot move to %q", next))
			}
			if final != nil {
				if _, err := tx.stmt(ctx, s.stmt.appendFinal).ExecContext(ctx, eventArgs(runID, *final)...); err != nil {
					return nil, err
				}
			}
			return nil, nil
		}})
}

// SetProgress replaces a run's progress.
func (s *Store) SetProgress(ctx context.Context, runID string, p svc.RunProgress) error {
	if err := s.check(); err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return svc.Wrap(svc.KindRuntime, err, "sqlitestore: encode progress")
	}
	return s.update(ctx, runID, s.stmt.setProgress, "progress", string(b))
}

// SetResult stores a run's result, byte for byte.
func (s *Store) SetResult(ctx context.Context, runID string, result json.RawMessage) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.update(ctx, runID, s.stmt.setResult, "a result", []byte(result))
}

// update runs a conditional UPDATE of a run that is not terminal.
func (s *Store) update(ctx context.Context, runID string, stmt *sql.Stmt, what string, value any) error {
	return s.do(ctx, op{id: runID, what: fmt.Sprintf("set %s of run %q", what, runID),
		run: func(ctx context.Context, tx *batchTx) (error, error) {
			res, err := tx.stmt(ctx, stmt).ExecContext(ctx, runID, value, micros(time.Now()))
			if err != nil {
				return nil, err
			}
			if n, err := res.RowsAffected(); err != nil {
				return nil, err
			} else if n == 0 {
				return s.refuseTx(ctx, tx, runID, "takes no more "+what)
			}
			return nil, nil
		}})
}

// Append adds an event to a run that is not terminal and returns its Seq.
func (s *Store) Append(ctx context.Context, runID string, ev svc.RunEvent) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var seq int64
	err := s.do(ctx, op{id: runID, what: fmt.Sprintf("append to run %q", runID),
		run: func(ctx context.Context, tx *batchTx) (error, error) {
			err := tx.stmt(ctx, s.stmt.append).QueryRowContext(ctx, eventArgs(runID, ev)...).Scan(&seq)
			if errors.Is(err, sql.ErrNoRows) {
				return s.refuseTx(ctx, tx, runID, "takes no more events")
			}
			return nil, err
		}})
	if err != nil {
		return 0, err
	}
	return seq, nil
}

// AppendSteps adds steps to a run's step log in one write of the commit
// queue, so they share a transaction with the other writes of the moment;
// see svc.StepLog. It reads the run's state and last step, then inserts:
// the runs row is not written.
func (s *Store) AppendSteps(ctx context.Context, runID string, steps ...svc.RunStep) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if err := svc.CheckSteps(steps); err != nil {
		return 0, err
	}
	var size int64
	for _, st := range steps {
		size += st.Size()
	}
	t := micros(time.Now())
	var last int64
	err := s.do(ctx, op{id: runID, what: fmt.Sprintf("append steps to run %q", runID), atomic: true,
		run: func(ctx context.Context, tx *batchTx) (error, error) {
			if len(steps) == 1 {
				st := steps[0]
				at := t
				if !st.Timestamp.IsZero() {
					at = micros(st.Timestamp)
				}
				err := tx.stmt(ctx, s.stmt.stepAppend).QueryRowContext(ctx, runID, string(st.Kind), st.Key, []byte(st.Data), at, size, s.maxStepBytes).Scan(&last)
				if !errors.Is(err, sql.ErrNoRows) {
					return nil, err
				}
				// Refused: the two-statement path below says why.
			}
			var state string
			var total int64
			err := tx.stmt(ctx, s.stmt.stepsLast).QueryRowContext(ctx, runID).Scan(&state, &last, &total)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return unknown(runID), nil
			case err != nil:
				return nil, err
			case svc.RunState(state).Terminal():
				return svc.Errorf(svc.KindRunState, "sqlitestore: run %q is %s and takes no more steps", runID, state), nil
			case total+size > s.maxStepBytes:
				return svc.StepLogFull(runID, total, size, s.maxStepBytes), nil
			case len(steps) == 1:
				// sqlStepAppend refused what this check lets through: a
				// bug, not a reason to write.
				return nil, fmt.Errorf("step refused with state %s and log size %d of %d", state, total, s.maxStepBytes)
			}
			ins := tx.stmt(ctx, s.stmt.stepInsert)
			for _, st := range steps {
				at := t
				if !st.Timestamp.IsZero() {
					at = micros(st.Timestamp)
				}
				last++
				total += st.Size()
				if _, err := ins.ExecContext(ctx, runID, last, string(st.Kind), st.Key, []byte(st.Data), at, total); err != nil {
					return nil, err
				}
			}
			return nil, nil
		}})
	if err != nil {
		return 0, err
	}
	return last, nil
}

// Steps returns a run's steps with Seq > after, in order; see svc.StepLog.
func (s *Store) Steps(ctx context.Context, runID string, after int64) ([]svc.RunStep, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := []svc.RunStep{}
	for {
		n := 0
		found := false
		rows, err := s.stmt.steps.QueryContext(ctx, runID, max(after, 0), pageSize)
		if err != nil {
			return nil, s.fail(ctx, err, "read steps of run %q", runID)
		}
		for rows.Next() {
			found = true
			var seq, at sql.NullInt64
			var kind, key sql.NullString
			var data []byte
			if err := rows.Scan(&seq, &kind, &key, &data, &at); err != nil {
				rows.Close()
				return nil, s.fail(ctx, err, "read steps of run %q", runID)
			}
			if !seq.Valid { // the run, without steps after after
				continue
			}
			out = append(out, svc.RunStep{Seq: seq.Int64, Kind: svc.StepKind(kind.String), Key: key.String,
				Data: data, Timestamp: fromMicros(at.Int64)})
			after = seq.Int64
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, s.fail(ctx, err, "read steps of run %q", runID)
		}
		if !found {
			return nil, unknown(runID)
		}
		if n < pageSize {
			return out, nil
		}
	}
}

// MaxStepBytes is the bound of each run's step log; see svc.StepLog.
func (s *Store) MaxStepBytes() int64 { return s.maxStepBytes }

// Events returns the events with Seq > after, in order.
func (s *Store) Events(ctx context.Context, runID string, after int64) ([]svc.RunEvent, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var out []svc.RunEvent
	for {
		_, page, err := s.page(ctx, runID, after)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < pageSize {
			return out, nil
		}
		after = page[len(page)-1].Seq
	}
}

// page reads a run's state and up to pageSize of its events with
// Seq > after, consistently; an unknown run is a RegistryError.
func (s *Store) page(ctx context.Context, runID string, after int64) (svc.RunState, []svc.RunEvent, error) {
	rows, err := s.stmt.events.QueryContext(ctx, runID, max(after, 0), pageSize)
	if err != nil {
		return "", nil, s.fail(ctx, err, "read events of run %q", runID)
	}
	defer rows.Close()
	var (
		state string
		found bool
		out   []svc.RunEvent
	)
	for rows.Next() {
		var (
			seq, ts                    sql.NullInt64
			typ, agent, taskID, errMsg sql.NullString
			req                        []byte
		)
		if err := rows.Scan(&state, &seq, &typ, &agent, &taskID, &errMsg, &ts, &req); err != nil {
			return "", nil, s.fail(ctx, err, "read events of run %q", runID)
		}
		found = true
		if !seq.Valid {
			continue // the run has no event after the cursor
		}
		ev := svc.RunEvent{
			Seq: seq.Int64, Type: svc.RunEventType(typ.String), RunID: runID, Agent: agent.String,
			TaskID: taskID.String, Error: errMsg.String, Timestamp: fromMicros(ts.Int64),
		}
		if len(req) > 0 {
			ev.Request = new(svc.WaitRequest)
			if err := json.Unmarshal(req, ev.Request); err != nil {
				return "", nil, s.fail(ctx, err, "read events of run %q: request of event %d", runID, seq.Int64)
			}
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return "", nil, s.fail(ctx, err, "read events of run %q", runID)
	}
	if !found {
		return "", nil, unknown(runID)
	}
	return svc.RunState(state), out, nil
}

// Stream sends a run's events with Seq > after, then follows it until it is
// terminal, ctx ends or the store is closed; see svc.RunStore. A read error
// mid-stream closes the channel early.
func (s *Store) Stream(ctx context.Context, runID string, after int64) (<-chan svc.RunEvent, error) {
	if _, err := s.state(ctx, runID); err != nil {
		return nil, err
	}
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make(chan svc.RunEvent)
	s.streams.Add(1)
	go s.follow(ctx, runID, after, out)
	return out, nil
}

func (s *Store) follow(ctx context.Context, runID string, after int64, out chan<- svc.RunEvent) {
	defer s.streams.Done()
	defer close(out)
	follow.Run(ctx, s.done, after, follow.Source{
		// Armed before each read, so a change committed after the read
		// signals the channel the loop then waits on.
		Arm: func() <-chan struct{} { return s.notify.wait(runID) },
		// A page's state is read with its events: terminal with a short
		// page means every event is in.
		Read: func(ctx context.Context, after int64) ([]svc.RunEvent, bool, bool, error) {
			state, page, err := s.page(ctx, runID, after)
			full := len(page) == pageSize
			return page, state.Terminal() && !full, full, err
		},
		Poll: s.poll,
	}, out)
}

// Interrupt fails every pending or running run with reason "interrupted",
// its failed result, progress and run_failed event, all in one
// transaction; see svc.RunStore.
func (s *Store) Interrupt(ctx context.Context) (int, error) {
	_, n, err := s.recover(ctx, false)
	return n, err
}

// Recover claims every pending or running run that has a Task (resumed
// goes up by one) and fails the others as Interrupt does, all in one
// transaction; see svc.ResumableStore. The writer's transactions are
// IMMEDIATE, so two processes sharing the file recover one after the
// other; a serve process holds the file's lock, so only one does.
func (s *Store) Recover(ctx context.Context) ([]svc.RunRecord, int, error) {
	return s.recover(ctx, true)
}

// recover is Recover, or Interrupt when claim is false.
func (s *Store) recover(ctx context.Context, claim bool) ([]svc.RunRecord, int, error) {
	if err := s.check(); err != nil {
		return nil, 0, err
	}
	what := "interrupt runs"
	if claim {
		what = "recover runs"
	}
	fail := func(err error) ([]svc.RunRecord, int, error) { return nil, 0, s.fail(ctx, err, "%s", what) }
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	type open struct {
		id, target string
		progress   sql.NullString
		task       bool
	}
	var runs []open
	rows, err := tx.QueryContext(ctx, sqlInterruptList)
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var r open
		if err := rows.Scan(&r.id, &r.target, &r.progress, &r.task); err != nil {
			rows.Close()
			return fail(err)
		}
		runs = append(runs, r)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fail(err)
	}
	t := time.Now()
	var claimed []svc.RunRecord
	n := 0
	for _, r := range runs {
		if claim && r.task {
			if _, err := tx.ExecContext(ctx, sqlClaim, r.id, micros(t)); err != nil {
				return fail(err)
			}
			rec, err := s.get(ctx, tx.StmtContext(ctx, s.stmt.getW), r.id)
			if err != nil {
				return nil, 0, err
			}
			claimed = append(claimed, rec)
			continue
		}
		var progress any // NULL stays NULL
		if r.progress.Valid {
			var p svc.RunProgress
			if err := json.Unmarshal([]byte(r.progress.String), &p); err != nil {
				return nil, 0, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("sqlitestore: run %q: corrupt progress", r.id))
			}
			b, _ := json.Marshal(svc.InterruptedProgress(&p))
			progress = string(b)
		}
		if _, err := tx.ExecContext(ctx, sqlInterrupt, r.id, svc.ReasonInterrupted,
			[]byte(svc.InterruptedResult(r.target)), progress, micros(t)); err != nil {
			return fail(err)
		}
		if _, err := tx.StmtContext(ctx, s.stmt.appendFinal).ExecContext(ctx, eventArgs(r.id, svc.InterruptedEvent(t))...); err != nil {
			return fail(err)
		}
		n++
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	for _, r := range runs {
		s.notify.signal(r.id)
	}
	svc.SortClaimed(claimed)
	return claimed, n, nil
}

// ListRuns returns a page of runs, newest first; see svc.RunLister and
// package runlist for the order and the cursor.
func (s *Store) ListRuns(ctx context.Context, f svc.RunFilter) (svc.RunPage, error) {
	if err := s.check(); err != nil {
		return svc.RunPage{}, err
	}
	q, err := runlist.Parse("sqlitestore", f)
	if err != nil {
		return svc.RunPage{}, err
	}
	var (
		byState, byCursor int
		cursorUS          int64
		cursorID          string
	)
	if q.State != "" {
		byState = 1
	}
	if q.After != nil {
		byCursor, cursorUS, cursorID = 1, q.After.CreatedUS, q.After.RunID
	}
	// Every variant names ?5, so each takes all five parameters.
	args := []any{q.Fetch(), string(q.State), cursorUS, cursorID, q.Tenant}
	rows, err := s.stmt.list[byState][byCursor].QueryContext(ctx, args...)
	if err != nil {
		return svc.RunPage{}, s.fail(ctx, err, "list runs")
	}
	defer rows.Close()
	var out []runlist.Row
	for rows.Next() {
		var (
			rec              svc.RunRecord
			state            string
			progress         sql.NullString
			created, updated int64
		)
		if err := rows.Scan(&rec.RunID, &rec.Target, &rec.Kind, &state, &progress, &rec.Reason, &rec.TraceID, &rec.Tenant, &created, &updated); err != nil {
			return svc.RunPage{}, s.fail(ctx, err, "list runs")
		}
		rec.State, rec.CreatedAt, rec.UpdatedAt = svc.RunState(state), fromMicros(created), fromMicros(updated)
		if progress.Valid {
			var p svc.RunProgress
			if err := json.Unmarshal([]byte(progress.String), &p); err != nil {
				return svc.RunPage{}, svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("sqlitestore: run %q: corrupt progress", rec.RunID))
			}
			rec.Progress = &p
		}
		// The stored microseconds are the position, as the query compared them.
		out = append(out, runlist.Row{Pos: runlist.Position{CreatedUS: created, RunID: rec.RunID}, Summary: runlist.Summary(&rec)})
	}
	if err := rows.Err(); err != nil {
		return svc.RunPage{}, s.fail(ctx, err, "list runs")
	}
	return q.Page(out), nil
}

// Close ends every stream, waits for their goroutines and closes the file;
// later calls are no-ops. Every other method fails once the store is closed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed.Swap(true) {
		s.closeMu.Unlock()
		return nil
	}
	close(s.done)
	s.closeMu.Unlock()
	if s.q != nil {
		s.q.Close() // commits what was queued before the close
	}
	s.streams.Wait()
	err := errors.Join(s.stmt.close(), s.bstmt.close(), s.reader.Close(), s.writer.Close())
	if err != nil {
		return svc.Wrap(svc.KindRuntime, err, fmt.Sprintf("sqlitestore: close %q", s.path))
	}
	return nil
}

// state reads a run's state; an unknown run is a RegistryError.
func (s *Store) state(ctx context.Context, runID string) (svc.RunState, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	var state string
	err := s.stmt.state.QueryRowContext(ctx, runID).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", unknown(runID)
	}
	if err != nil {
		return "", s.fail(ctx, err, "read run %q", runID)
	}
	return svc.RunState(state), nil
}

// refuse explains why a conditional write matched no row: the run is
// unknown (RegistryError) or its state forbids the change (RunStateError).
func (s *Store) refuse(ctx context.Context, runID, why string) error {
	state, err := s.state(ctx, runID)
	if err != nil {
		return err
	}
	return svc.Errorf(svc.KindRunState, "sqlitestore: run %q is %s and %s", runID, state, why)
}

func (s *Store) check() error {
	if s.closed.Load() {
		return s.closedErr()
	}
	return nil
}

func (s *Store) closedErr() error {
	return svc.Errorf(svc.KindShuttingDown, "sqlitestore: %q is closed", s.path)
}

// op is one write of a run. run makes it inside a transaction of the
// writer and returns the caller's answer (nil, or a refusal, after which
// it has changed nothing) or a fault: a database error, after which the
// transaction may be spoiled.
type op struct {
	id   string // the run it changes, whose streams are woken after the commit
	what string // the operation, for the fault's message
	// atomic says the write has several statements that must land
	// together: alone, it still needs a transaction of its own, where a
	// one-statement write commits by itself.
	atomic bool
	run    func(ctx context.Context, tx *batchTx) (answer, fault error)
}

// batchTx is a transaction of the writer with the transaction's copies of
// the prepared statements, made once per batch; or, with tx nil, the
// writer itself, each statement committing alone.
type batchTx struct {
	tx    *sql.Tx
	db    *sql.DB
	stmts map[*sql.Stmt]*sql.Stmt
}

func (b *batchTx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if b.tx == nil {
		return b.db.ExecContext(ctx, query, args...)
	}
	return b.tx.ExecContext(ctx, query, args...)
}

func (b *batchTx) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if b.tx == nil {
		return b.db.QueryRowContext(ctx, query, args...)
	}
	return b.tx.QueryRowContext(ctx, query, args...)
}

func (b *batchTx) stmt(ctx context.Context, st *sql.Stmt) *sql.Stmt {
	if b.tx == nil {
		return st
	}
	if t, ok := b.stmts[st]; ok {
		return t
	}
	if b.stmts == nil {
		b.stmts = map[*sql.Stmt]*sql.Stmt{}
	}
	t := b.tx.StmtContext(ctx, st)
	b.stmts[st] = t
	return t
}

// do makes a write: through the commit queue, answered once the
// transaction holding it is committed, or alone without a queue.
func (s *Store) do(ctx context.Context, o op) error {
	if err := s.check(); err != nil {
		return err
	}
	if s.q == nil {
		return s.single(ctx, o)
	}
	err := s.q.Do(ctx, o)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return s.fail(ctx, err, "%s", o.what)
	}
	return err
}

// single makes one write alone: its one statement commits by itself, or
// an atomic write's statements in a transaction of their own.
func (s *Store) single(ctx context.Context, o op) error {
	if !o.atomic {
		answer, fault := o.run(ctx, &batchTx{db: s.writer})
		if fault != nil {
			return s.fail(ctx, fault, "%s", o.what)
		}
		if answer != nil {
			return answer
		}
		s.commits.Add(1)
		s.notify.signal(o.id)
		return nil
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(ctx, err, "%s", o.what)
	}
	defer tx.Rollback()
	answer, fault := o.run(ctx, &batchTx{tx: tx})
	if fault != nil {
		return s.fail(ctx, fault, "%s", o.what)
	}
	if answer != nil {
		return answer
	}
	if err := tx.Commit(); err != nil {
		return s.fail(ctx, err, "%s", o.what)
	}
	s.commits.Add(1)
	s.notify.signal(o.id)
	return nil
}

// commit is the commit queue's writer: a batch of writes in one
// transaction and one commit. A fault spoils the batch's transaction: it
// is rolled back and each write is made again alone, so each caller gets
// its own write's outcome and no other's.
func (s *Store) commit(jobs []*groupcommit.Job[op]) {
	if len(jobs) == 1 {
		jobs[0].Err = s.single(jobs[0].Ctx, jobs[0].Op)
		return
	}
	// The batch belongs to all its callers: no one caller's context
	// may cut it short.
	ctx := context.Background()
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		// The write lock could not be taken (another process holds the
		// file past the busy timeout): alone, each would wait as long.
		for _, j := range jobs {
			j.Err = s.fail(j.Ctx, err, "%s", j.Op.what)
		}
		return
	}
	b := &batchTx{tx: tx}
	answers := make([]error, len(jobs))
	for i, j := range jobs {
		answer, fault := j.Op.run(ctx, b)
		if fault != nil {
			_ = tx.Rollback()
			s.alone(jobs)
			return
		}
		answers[i] = answer
	}
	if err := tx.Commit(); err != nil {
		_ = tx.Rollback()
		s.alone(jobs)
		return
	}
	s.commits.Add(1)
	for i, j := range jobs {
		j.Err = answers[i]
		if answers[i] == nil {
			s.notify.signal(j.Op.id)
		}
	}
}

// alone makes each write of a failed batch in a transaction of its own.
func (s *Store) alone(jobs []*groupcommit.Job[op]) {
	for _, j := range jobs {
		j.Err = s.single(j.Ctx, j.Op)
	}
}

// refuseTx is refuse inside a write's transaction, which sees the writes
// of the batch before it.
func (s *Store) refuseTx(ctx context.Context, tx *batchTx, runID, why string) (answer, fault error) {
	var state string
	err := tx.stmt(ctx, s.stmt.stateW).QueryRowContext(ctx, runID).Scan(&state)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return unknown(runID), nil
	case err != nil:
		return nil, err
	}
	return svc.Errorf(svc.KindRunState, "sqlitestore: run %q is %s and %s", runID, state, why), nil
}

// fail wraps a database error once, naming the operation; see
// sqlitedb.Fail for the kinds.
func (s *Store) fail(ctx context.Context, err error, format string, args ...any) error {
	return sqlitedb.Fail(ctx, err, s.closed.Load(), "sqlitestore: "+fmt.Sprintf(format, args...))
}

func unknown(runID string) error {
	return svc.Errorf(svc.KindRegistry, "unknown run %q", runID)
}

// eventArgs are the arguments of sqlAppend and sqlAppendFinal.
func eventArgs(runID string, ev svc.RunEvent) []any {
	ts := ev.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	var req []byte
	if ev.Request != nil {
		req, _ = json.Marshal(ev.Request) // a struct of plain fields: cannot fail
	}
	return []any{runID, string(ev.Type), ev.Agent, ev.TaskID, ev.Error, micros(ts), req}
}

// micros is the stored form of a time: Unix microseconds, the precision the
// RunStore contract asks for.
func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// notifier wakes this process's streams when a run changes. Each run with a
// waiting stream has a channel, closed (waking every waiter) and forgotten
// on the next change; a run nobody waits on costs nothing.
type notifier struct {
	mu    sync.Mutex
	chans map[string]chan struct{}
}

// wait returns a channel closed at the next signal for runID.
func (n *notifier) wait(runID string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, ok := n.chans[runID]
	if !ok {
		c = make(chan struct{})
		n.chans[runID] = c
	}
	return c
}

func (n *notifier) signal(runID string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.chans[runID]; ok {
		close(c)
		delete(n.chans, runID)
	}
}
