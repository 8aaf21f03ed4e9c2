package sqliteevents

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore/internal/evcodec"
	"github.com/svc-dev/svc/eventstore/internal/rollup"
)

// schemaVersion is the schema this build writes, kept in PRAGMA
// user_version. Version 1 (user_version 0: the first release did not set
// it) had neither fact columns nor totals; opening such a file migrates it
// in place, once, in one transaction: the columns are added and filled from
// the stored payloads, the totals computed, the indexes built. A file of a
// newer version is refused rather than written in a form the newer build
// would misread. (A file this build migrated must not be written by an
// older build: its rows would lack facts and totals.)
//
// Version 3 added the span ids of the event envelope (span_id,
// parent_span_id), which the tree links invocations by; rows written
// before have empty ones and are placed by time as before. Its migration
// also derives the failures' error_kind again, from the payload's reason
// only: version 2 also read it out of the error text.
//
// Version 4 added agent_completed's cost: the events' cost_nusd fact and
// usage_totals' sum of it, both in nano-dollars (svc.CostNanos). Its
// migration adds both columns (0 for what is there) and fills them from
// the payloads that have a cost_usd: events written before cost_usd existed
// have none and cost 0, as they do in a memory store.
//
// Version 5 added agent_completed's cached input tokens: the events'
// cached_tokens fact and usage_totals' sum of it. Its migration works as
// version 4's: both columns are added (0 for what is there) and filled from
// the payloads that have a cached_tokens (a version 4 build stored the key
// but did not sum it); events without one count 0, as in a memory store.
//
// Version 6 added the run history and the time windows: the events'
// run_flags fact (rollup.Facts.RunFlags), run_totals (one row per trace,
// the history's counts; it replaces trace_totals, which counted the same
// traces), and the per-minute totals usage_minutes and type_minutes. Its
// migration fills run_flags from the payloads, builds the three tables
// from the events there, and drops trace_totals.
const schemaVersion = 6

// The events table. Timestamps are Unix microseconds. The composite
// indexes serve the filtered queries in timestamp order; (ts) alone serves
// unfiltered ones and retention. The id (rowid) breaks timestamp ties in
// write order.
//
// The fact columns hold what the rollups read of the payload (see rollup.Facts),
// extracted at write time.
const sqliteEvents = `
CREATE TABLE IF NOT EXISTS events (
	id              INTEGER PRIMARY KEY,
	ts              INTEGER NOT NULL,
	event_type      TEXT NOT NULL,
	agent           TEXT NOT NULL,
	task_id         TEXT NOT NULL,
	trace_id        TEXT NOT NULL,
	parent_trace_id TEXT NOT NULL,
	payload         TEXT NOT NULL, -- JSON object
` + sqliteFactColumns + `,
` + sqliteSpanColumns + `,
` + sqliteCostColumns + `,
` + sqliteCachedColumns + `,
` + sqliteRunColumns + `
);
`

// sqliteFactColumns are the columns schema version 2 added, in the form
// both CREATE TABLE and ALTER TABLE ADD COLUMN take.
const sqliteFactColumns = `
	tokens_used INTEGER NOT NULL DEFAULT 0,
	duration_us INTEGER,
	model       TEXT NOT NULL DEFAULT '',
	tool_name   TEXT NOT NULL DEFAULT '',
	error_kind  TEXT NOT NULL DEFAULT '',
	runtime_id  TEXT NOT NULL DEFAULT ''`

// sqliteSpanColumns are the columns schema version 3 added.
const sqliteSpanColumns = `
	span_id        TEXT NOT NULL DEFAULT '',
	parent_span_id TEXT NOT NULL DEFAULT ''`

// sqliteCostColumns are the events columns schema version 4 added.
const sqliteCostColumns = `
	cost_nusd INTEGER NOT NULL DEFAULT 0`

// sqliteCachedColumns are the events columns schema version 5 added.
const sqliteCachedColumns = `
	cached_tokens INTEGER NOT NULL DEFAULT 0`

// sqliteRunColumns are the events columns schema version 6 added.
const sqliteRunColumns = `
	run_flags INTEGER NOT NULL DEFAULT 0`

// The totals tables hold the sums and counts of Usage, ToolUsage and the
// stats header, kept up to date by Write (one row of a multi-row upsert
// per key a batch touches, in the batch's transaction: write.go)
// and by Prune (which subtracts what
// it deletes, in the same transaction, and drops keys whose count reaches
// zero). Reading them costs the number of keys, not of events: summing
// 1,000,000 events' columns with GROUP BY takes SQLite (compiled to Go)
// longer than the 200 ms a rollup may take.
const sqliteTotals = `
CREATE TABLE IF NOT EXISTS usage_totals (
	dim         TEXT NOT NULL, -- 'agent', 'trace' or 'model' (the model fact: '' when none)
	key         TEXT NOT NULL,
	invocations INTEGER NOT NULL,
	tokens_used INTEGER NOT NULL,
	cost_nusd   INTEGER NOT NULL DEFAULT 0, -- nano-dollars; schema version 4
	cached_tokens INTEGER NOT NULL DEFAULT 0, -- schema version 5
	PRIMARY KEY (dim, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tool_totals (
	tool_name   TEXT NOT NULL,
	agent       TEXT NOT NULL,
	calls       INTEGER NOT NULL,
	failures    INTEGER NOT NULL,
	durations   INTEGER NOT NULL, -- calls with a duration
	duration_us INTEGER NOT NULL, -- their sum
	PRIMARY KEY (tool_name, agent)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS type_totals (
	event_type TEXT PRIMARY KEY,
	events     INTEGER NOT NULL
) WITHOUT ROWID;
` + sqliteWindowTotals

// sqliteWindowTotals are schema version 6's tables. usage_minutes and
// type_minutes are usage_totals and type_totals per minute (minute =
// ts / 60,000,000, the minute's start in Unix minutes), which a window
// sums over its whole minutes; the partial minutes at its edges are read
// from the events (rollup windows). run_totals is the run history: one
// row per trace of events other than worker lifecycle events, its counts
// the rollup.RunRow's (status and type are computed from them), kept by
// Write and rebuilt for the traces a prune touches.
const sqliteWindowTotals = `
CREATE TABLE IF NOT EXISTS usage_minutes (
	dim           TEXT NOT NULL,
	minute        INTEGER NOT NULL,
	key           TEXT NOT NULL,
	invocations   INTEGER NOT NULL,
	tokens_used   INTEGER NOT NULL,
	cost_nusd     INTEGER NOT NULL,
	cached_tokens INTEGER NOT NULL,
	PRIMARY KEY (dim, minute, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS type_minutes (
	minute     INTEGER NOT NULL,
	event_type TEXT NOT NULL,
	events     INTEGER NOT NULL,
	PRIMARY KEY (minute, event_type)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_totals (
	trace_id     TEXT PRIMARY KEY,
	events       INTEGER NOT NULL,
	parented     INTEGER NOT NULL,
	start_events INTEGER NOT NULL,
	starts       INTEGER NOT NULL,
	completed    INTEGER NOT NULL,
	failed       INTEGER NOT NULL,
	group_starts INTEGER NOT NULL,
	group_ends   INTEGER NOT NULL,
	group_fails  INTEGER NOT NULL,
	batch_starts INTEGER NOT NULL,
	batch_ends   INTEGER NOT NULL,
	rejects      INTEGER NOT NULL,
	tokens_used  INTEGER NOT NULL,
	first_us     INTEGER NOT NULL,
	last_us      INTEGER NOT NULL,
	target       TEXT NOT NULL,
	target_rank  INTEGER NOT NULL,
	target_us    INTEGER NOT NULL,
	status       TEXT GENERATED ALWAYS AS (` + rollup.SQLStatus + `) VIRTUAL,
	type         TEXT GENERATED ALWAYS AS (` + rollup.SQLType + `) VIRTUAL
) WITHOUT ROWID;
`

// Partial index conditions, written once so that queries repeat them
// exactly: that is what lets SQLite use a partial index.
const (
	whereCompleted = `event_type = 'agent_completed'`
	// whereNotCompleted is events_type_ts's: agent_completed events are
	// found by type and time in events_completed_ts.
	whereNotCompleted = `event_type <> 'agent_completed'`
	whereToolEnd      = `event_type IN ('tool_call_completed', 'tool_call_failed')`
	whereFailure      = `error_kind <> ''`
	whereChild        = `parent_trace_id <> ''`
	whereTopLevel     = `parented = 0`
)

// The partial indexes hold only the rows they serve, so other events cost
// them nothing: events by type and time, but for agent_completed, which
// the next one serves (one index update fewer for the most common event
// type; before, events_event_type held every event); completions' tokens
// by time for the burn rate and for the events of that type, tool
// durations in order per tool (and per agent and tool) for the
// rollup.Percentiles, failures by kind for the error groups, and child runs by
// parent trace for the tree; and, for the time windows, tool calls by
// time with what ToolUsage reads of them (a window's percentiles need its
// durations).
const sqliteIndexes = `
CREATE INDEX IF NOT EXISTS events_ts ON events (ts);
CREATE INDEX IF NOT EXISTS events_trace_id ON events (trace_id, ts);
CREATE INDEX IF NOT EXISTS events_type_ts ON events (event_type, ts) WHERE ` + whereNotCompleted + `;
CREATE INDEX IF NOT EXISTS events_completed_ts ON events (ts, tokens_used) WHERE ` + whereCompleted + `;
CREATE INDEX IF NOT EXISTS events_tools ON events (tool_name, duration_us) WHERE ` + whereToolEnd + `;
CREATE INDEX IF NOT EXISTS events_agent_tools ON events (tool_name, agent, duration_us) WHERE ` + whereToolEnd + `;
CREATE INDEX IF NOT EXISTS events_errors ON events (error_kind, ts, event_type, agent) WHERE ` + whereFailure + `;
CREATE INDEX IF NOT EXISTS events_children ON events (parent_trace_id, trace_id) WHERE ` + whereChild + `;
CREATE INDEX IF NOT EXISTS events_tool_ts ON events (ts, event_type, tool_name, agent, duration_us) WHERE ` + whereToolEnd + `;
CREATE INDEX IF NOT EXISTS run_history ON run_totals (first_us, trace_id) WHERE ` + whereTopLevel + `;
`

// writerCacheKiB is the writer's page cache, 32 MiB (SQLite's default is
// 2 MiB): every insert updates several indexes, and once they outgrow the
// cache each update rereads pages from the file; measured here on
// 1,000,000 events, the bigger cache builds the store 30 % faster. Readers
// keep the default: the rollups read small totals tables and walk short
// index ranges. The cache fills as the file grows (about 32 MiB of events
// and indexes), outside the Go heap: RELIABILITY.md ("Thirty minutes").
const writerCacheKiB = 32 << 10

// initSQLite creates or migrates the schema; sqlitedb.Open has turned WAL
// on.
func initSQLite(db *sql.DB) error {
	// The writer's transactions are IMMEDIATE: two processes opening one
	// old file migrate it one after the other, the second finding it done.
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var version int
	if err := tx.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	if version > schemaVersion {
		return fmt.Errorf("the file has event store schema version %d; this build reads up to %d: open it with a newer svc",
			version, schemaVersion)
	}
	var tables int
	if err := tx.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'events'`).Scan(&tables); err != nil {
		return err
	}
	if _, err := tx.Exec(sqliteEvents + sqliteTotals); err != nil {
		return err
	}
	// The cost and cached columns come first: the migrations below keep
	// them too.
	if tables > 0 && version < 4 {
		if err := addCostColumns(tx); err != nil {
			return fmt.Errorf("migrating the event store to schema version %d: %w", schemaVersion, err)
		}
	}
	if tables > 0 && version < 5 {
		if err := addCachedColumns(tx); err != nil {
			return fmt.Errorf("migrating the event store to schema version %d: %w", schemaVersion, err)
		}
	}
	if tables > 0 && version < 6 {
		if err := addColumns(tx, sqliteRunColumns); err != nil {
			return fmt.Errorf("migrating the event store to schema version %d: %w", schemaVersion, err)
		}
	}
	if tables > 0 && version < 2 {
		if err := migrateV1(tx); err != nil {
			return fmt.Errorf("migrating the event store to schema version %d: %w", schemaVersion, err)
		}
	}
	if tables > 0 && version < 3 {
		if err := migrateV2(tx); err != nil {
			return fmt.Errorf("migrating the event store to schema version %d: %w", schemaVersion, err)
		}
	}
	// migrateV1 filled the costs and cached tokens of a version 1 file
	// with its other facts.
	if tables > 0 && version >= 2 && version < 4 {
		if err := backfillUsage(tx, costFact); err != nil {
			return fmt.Errorf("migrating the event store to schema version %d: %w", schemaVersion, err)
		}
	}
	if tables > 0 && version >= 2 && version < 5 {
		if err := backfillUsage(tx, cachedFact); err != nil {
			return fmt.Errorf("migrating the event store to schema version %d: %w", schemaVersion, err)
		}
	}
	if tables > 0 && version >= 2 && version < 6 {
		if err := migrateV5(tx); err != nil {
			return fmt.Errorf("migrating the event store to schema version %d: %w", schemaVersion, err)
		}
	}
	if tables > 0 && version < 6 {
		if err := rebuildRuns(context.Background(), tx, nil); err != nil {
			return fmt.Errorf("migrating the event store to schema version %d: %w", schemaVersion, err)
		}
	}
	// run_totals has a row for each trace trace_totals had (up to version
	// 5): one table kept in step rather than two.
	if _, err := tx.Exec(`DROP TABLE IF EXISTS trace_totals`); err != nil {
		return err
	}
	// The index set is the build's, not the data's: no schema version.
	// An older build opening the file builds events_event_type again,
	// and this one drops it again.
	if _, err := tx.Exec(`DROP INDEX IF EXISTS events_event_type;` + sqliteIndexes); err != nil {
		return err
	}
	if _, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
		return err
	}
	return tx.Commit()
}

// addColumns adds to the events table those of cols (in the form of
// sqliteFactColumns) it lacks.
func addColumns(tx *sql.Tx, cols string) error {
	return addTableColumns(tx, "events", cols)
}

// addTableColumns adds to table those of cols it lacks.
func addTableColumns(tx *sql.Tx, table, cols string) error {
	have := map[string]bool{}
	err := eachRow(context.Background(), tx, `SELECT name FROM pragma_table_info('`+table+`')`, nil, func(r *sql.Rows) error {
		var name string
		err := r.Scan(&name)
		have[name] = true
		return err
	})
	if err != nil {
		return err
	}
	for _, col := range strings.Split(strings.TrimSpace(cols), ",") {
		col = strings.TrimSpace(col)
		if name, _, _ := strings.Cut(col, " "); !have[name] {
			if _, err := tx.Exec(`ALTER TABLE ` + table + ` ADD COLUMN ` + col); err != nil {
				return err
			}
		}
	}
	return nil
}

// addCostColumns adds schema version 4's columns to a file of an earlier
// version: the events' cost fact and the usage totals' cost sum.
func addCostColumns(tx *sql.Tx) error {
	if err := addColumns(tx, sqliteCostColumns); err != nil {
		return err
	}
	return addTableColumns(tx, "usage_totals", `cost_nusd INTEGER NOT NULL DEFAULT 0`)
}

// addCachedColumns adds schema version 5's columns to a file of an earlier
// version: the events' cached tokens fact and the usage totals' sum of it.
func addCachedColumns(tx *sql.Tx) error {
	if err := addColumns(tx, sqliteCachedColumns); err != nil {
		return err
	}
	return addTableColumns(tx, "usage_totals", `cached_tokens INTEGER NOT NULL DEFAULT 0`)
}

// usageFact is an agent_completed fact a schema version added after the
// fact columns (version 2): the payload key it is read from, its events
// column (named as its usage_totals column), and where it sits in the
// usage sums.
type usageFact struct {
	key, column string
	slot        int // index in totals.usage's sums
	get         func(*rollup.Facts) int64
}

var (
	costFact   = usageFact{"cost_usd", "cost_nusd", usageCost, func(f *rollup.Facts) int64 { return f.CostNanos }}
	cachedFact = usageFact{"cached_tokens", "cached_tokens", usageCached, func(f *rollup.Facts) int64 { return f.Cached }}
)

// backfillUsage fills fact in a version 2 to 4 file's agent_completed events
// whose payload has its key (an older build stores what a newer worker
// relays, or what it did not sum yet, as it is), and adds them to the usage
// totals. The column was just added, so it holds 0 everywhere.
func backfillUsage(tx *sql.Tx, fact usageFact) error {
	update, err := tx.Prepare(`UPDATE events SET ` + fact.column + ` = ? WHERE id = ?`)
	if err != nil {
		return err
	}
	defer update.Close()
	t := newTotals()
	type row struct{ id, v int64 }
	const chunk = 1000
	for last := int64(-1 << 63); ; {
		var (
			batch []row
			seen  int
		)
		err := eachRow(context.Background(), tx, `SELECT id, agent, trace_id, model, payload FROM events
			WHERE id > ? AND event_type = 'agent_completed' AND instr(payload, '"`+fact.key+`"') > 0 ORDER BY id LIMIT ?`,
			[]any{last, chunk}, func(r *sql.Rows) error {
				var (
					agent, trace, model string
					payload             []byte
				)
				seen++
				if err := r.Scan(&last, &agent, &trace, &model, &payload); err != nil {
					return err
				}
				p, err := evcodec.Decode(payload)
				if err != nil {
					return nil
				}
				ev := svc.RuntimeEvent{EventType: svc.EventAgentCompleted, Payload: p}
				f := rollup.FactsOf(&ev)
				if v := fact.get(&f); v != 0 {
					batch = append(batch, row{last, v})
					var sums [usageSums]int64
					sums[fact.slot] = v
					t.addUsage(agent, trace, model, sums)
				}
				return nil
			})
		if err != nil {
			return err
		}
		for _, r := range batch {
			if _, err := update.Exec(r.v, r.id); err != nil {
				return err
			}
		}
		if seen < chunk {
			break
		}
	}
	// Only the usage sums change: no event was added or removed.
	return (&totals{usage: t.usage}).apply(newTxStmts(context.Background(), tx, nil))
}

// migrateV2 adds the span columns to a version 2 table and derives the
// failures' error kinds again (see schemaVersion). The totals do not
// depend on error kinds, so they stand.
func migrateV2(tx *sql.Tx) error {
	if err := addColumns(tx, sqliteSpanColumns); err != nil {
		return err
	}
	update, err := tx.Prepare(`UPDATE events SET error_kind = ? WHERE id = ?`)
	if err != nil {
		return err
	}
	defer update.Close()
	type row struct {
		id   int64
		kind string
	}
	const chunk = 1000
	for last := int64(-1 << 63); ; {
		var (
			batch []row
			seen  int
		)
		err := eachRow(context.Background(), tx, `SELECT id, event_type, payload, error_kind FROM events
			WHERE id > ? AND event_type IN ('agent_failed', 'tool_call_failed') ORDER BY id LIMIT ?`,
			[]any{last, chunk}, func(r *sql.Rows) error {
				var (
					typ, kind string
					payload   []byte
				)
				seen++
				if err := r.Scan(&last, &typ, &payload, &kind); err != nil {
					return err
				}
				p, err := evcodec.Decode(payload)
				if err != nil {
					return nil
				}
				ev := svc.RuntimeEvent{EventType: svc.EventType(typ), Payload: p}
				if f := rollup.FactsOf(&ev); f.ErrKind != kind {
					batch = append(batch, row{last, f.ErrKind})
				}
				return nil
			})
		if err != nil {
			return err
		}
		for _, r := range batch {
			if _, err := update.Exec(r.kind, r.id); err != nil {
				return err
			}
		}
		if seen < chunk {
			return nil
		}
	}
}

// migrateV1 adds the fact columns to a version 1 table, fills them from
// the stored payloads, and computes the totals.
func migrateV1(tx *sql.Tx) error {
	if err := addColumns(tx, sqliteFactColumns); err != nil {
		return err
	}
	update, err := tx.Prepare(`UPDATE events SET tokens_used = ?, duration_us = ?, model = ?, tool_name = ?,
		error_kind = ?, runtime_id = ?, cost_nusd = ?, cached_tokens = ?, run_flags = ? WHERE id = ?`)
	if err != nil {
		return err
	}
	defer update.Close()
	// In chunks by id, so no cursor is open on the table being updated.
	type row struct {
		id int64
		f  rollup.Facts
	}
	const chunk = 1000
	for last := int64(-1 << 63); ; {
		var (
			batch []row
			seen  int
		)
		err := eachRow(context.Background(), tx, `SELECT id, event_type, agent, payload FROM events WHERE id > ? ORDER BY id LIMIT ?`,
			[]any{last, chunk}, func(r *sql.Rows) error {
				var (
					typ, name string
					payload   []byte
				)
				seen++
				if err := r.Scan(&last, &typ, &name, &payload); err != nil {
					return err
				}
				p, err := evcodec.Decode(payload)
				if err != nil {
					return nil // only another writer could have put it there: no facts
				}
				ev := svc.RuntimeEvent{EventType: svc.EventType(typ), AgentName: name, Payload: p}
				if f := rollup.FactsOf(&ev); f != (rollup.Facts{}) {
					batch = append(batch, row{last, f})
				}
				return nil
			})
		if err != nil {
			return err
		}
		for _, r := range batch {
			if _, err := update.Exec(r.f.Tokens, durationArg(r.f), r.f.Model, r.f.Tool, r.f.ErrKind, r.f.Runtime, r.f.CostNanos, r.f.Cached, r.f.RunFlags, r.id); err != nil {
				return err
			}
		}
		if seen < chunk {
			break
		}
	}
	t, err := totalsWhere(context.Background(), tx, "1", nil, 1)
	if err != nil {
		return err
	}
	return t.apply(newTxStmts(context.Background(), tx, nil))
}

// durationArg is the duration_us column value of f.
func durationArg(f rollup.Facts) any {
	if !f.HasDur {
		return nil
	}
	return f.DurUS
}

// eachRow runs query and calls f for each row.
func eachRow(ctx context.Context, tx *sql.Tx, query string, args []any, f func(*sql.Rows) error) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// The usage sums of one usage_totals key, in usageTable's column order.
const (
	usageInvocations = iota
	usageTokens
	usageCost // nano-dollars
	usageCached
	usageSums
)

// totals are changes to the totals tables.
type totals struct {
	usage  map[[2]string]*[usageSums]int64 // (dim, key) → the usage sums
	tools  map[[2]string]*[4]int64         // (tool, agent) → calls, failures, durations, duration sum
	types  map[string]int64
	traces map[string]int64
	// The per-minute totals (schema version 6).
	usageMin map[minuteKey]*[usageSums]int64 // (dim, minute, key)
	typeMin  map[minuteKey]int64             // ("", minute, event type)
	// runs are the run_totals rows of the traces a batch wrote (Write
	// only: a prune rebuilds the rows it touches).
	runs map[string]*rollup.RunRow
}

// minuteKey keys a per-minute totals row.
type minuteKey struct {
	dim    string
	minute int64
	key    string
}

// usPerMinute is a minute in the events' unit.
const usPerMinute = int64(time.Minute / time.Microsecond)

// minuteOf is the minute of a timestamp in Unix microseconds.
func minuteOf(us int64) int64 { return floorDiv(us, usPerMinute) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func newTotals() *totals {
	return &totals{usage: map[[2]string]*[usageSums]int64{}, tools: map[[2]string]*[4]int64{},
		types: map[string]int64{}, traces: map[string]int64{},
		usageMin: map[minuteKey]*[usageSums]int64{}, typeMin: map[minuteKey]int64{}, runs: map[string]*rollup.RunRow{}}
}

// add counts n events of type t by agent in trace, in minute, with these
// facts; tokens, cached tokens, cost (nano-dollars), durations and durUS
// are their sums. n is negative for deleted events.
func (t *totals) add(typ svc.EventType, agent, trace, model, tool string, minute, n, tokens, cached, cost, durations, durUS int64) {
	t.types[string(typ)] += n
	t.typeMin[minuteKey{minute: minute, key: string(typ)}] += n
	if trace != "" && !rollup.IsWorkerEvent(typ) {
		t.traces[trace] += n
	}
	switch typ {
	case svc.EventAgentCompleted:
		var sums [usageSums]int64
		sums[usageInvocations], sums[usageTokens], sums[usageCost], sums[usageCached] = n, tokens, cost, cached
		t.addUsage(agent, trace, model, sums)
		t.addUsageMinute(agent, trace, model, minute, sums)
	case svc.EventToolCallCompleted, svc.EventToolCallFailed:
		k := [2]string{tool, agent}
		r := t.tools[k]
		if r == nil {
			r = new([4]int64)
			t.tools[k] = r
		}
		r[0] += n
		if typ == svc.EventToolCallFailed {
			r[1] += n
		}
		r[2] += durations
		r[3] += durUS
	}
}

// addUsage adds sums to the usage keys of an agent_completed event by agent
// in trace with this model fact.
func (t *totals) addUsage(agent, trace, model string, sums [usageSums]int64) {
	for _, k := range [...][2]string{{svc.GroupByAgent, agent}, {svc.GroupByTrace, trace}, {svc.GroupByModel, model}} {
		u := t.usage[k]
		if u == nil {
			u = new([usageSums]int64)
			t.usage[k] = u
		}
		for i, v := range sums {
			u[i] += v
		}
	}
}

// addUsageMinute adds sums to the per-minute usage keys.
func (t *totals) addUsageMinute(agent, trace, model string, minute int64, sums [usageSums]int64) {
	for _, k := range [...]minuteKey{{svc.GroupByAgent, minute, agent}, {svc.GroupByTrace, minute, trace}, {svc.GroupByModel, minute, model}} {
		u := t.usageMin[k]
		if u == nil {
			u = new([usageSums]int64)
			t.usageMin[k] = u
		}
		for i, v := range sums {
			u[i] += v
		}
	}
}

// addEvent counts one event about to be written, at us.
func (t *totals) addEvent(ev *svc.RuntimeEvent, us int64, f *rollup.Facts) {
	var durations int64
	if f.HasDur {
		durations = 1
	}
	t.add(ev.EventType, ev.AgentName, ev.TraceID, f.Model, f.Tool, minuteOf(us), 1, f.Tokens, f.Cached, f.CostNanos, durations, f.DurUS)
	if ev.TraceID != "" && !rollup.IsWorkerEvent(ev.EventType) {
		r := t.runs[ev.TraceID]
		if r == nil {
			r = &rollup.RunRow{TraceID: ev.TraceID}
			t.runs[ev.TraceID] = r
		}
		r.Add(ev, us, f)
	}
}

// totalsWhere returns the totals of the events matching cond, times sign.
func totalsWhere(ctx context.Context, tx *sql.Tx, cond string, args []any, sign int64) (*totals, error) {
	t := newTotals()
	err := eachRow(ctx, tx, `SELECT event_type, agent, trace_id, model, tool_name, `+sqlMinute+` AS minute,
		COUNT(*), SUM(tokens_used), SUM(cached_tokens), SUM(cost_nusd), COUNT(duration_us), COALESCE(SUM(duration_us), 0)
		FROM events WHERE `+cond+` GROUP BY event_type, agent, trace_id, model, tool_name, minute`, args, func(r *sql.Rows) error {
		var (
			typ, agent, trace, model, tool                    string
			minute, n, tokens, cached, cost, durations, durUS int64
		)
		if err := r.Scan(&typ, &agent, &trace, &model, &tool, &minute, &n, &tokens, &cached, &cost, &durations, &durUS); err != nil {
			return err
		}
		t.add(svc.EventType(typ), agent, trace, model, tool, minute, sign*n, sign*tokens, sign*cached, sign*cost, sign*durations, sign*durUS)
		return nil
	})
	return t, err
}

// sqlMinute is minuteOf(ts) in SQL: SQLite's integer division truncates
// toward zero, so a timestamp before 1970 takes the floor by hand.
const sqlMinute = `(CASE WHEN ts >= 0 THEN ts / 60000000 ELSE (ts - 59999999) / 60000000 END)`

// migrateV5 fills a version 2 to 5 file's run_flags from the payloads of
// the event types that have one, and builds the per-minute totals.
// (migrateV1 fills a version 1 file's with its other facts.)
func migrateV5(tx *sql.Tx) error {
	update, err := tx.Prepare(`UPDATE events SET run_flags = ? WHERE id = ?`)
	if err != nil {
		return err
	}
	defer update.Close()
	type row struct{ id, flags int64 }
	const chunk = 1000
	for last := int64(-1 << 63); ; {
		var (
			batch []row
			seen  int
		)
		err := eachRow(context.Background(), tx, `SELECT id, event_type, payload FROM events
			WHERE id > ? AND event_type IN ('agent_failed', 'depth_limit_exceeded', 'budget_exceeded', 'group_completed')
			ORDER BY id LIMIT ?`, []any{last, chunk}, func(r *sql.Rows) error {
			var (
				typ     string
				payload []byte
			)
			seen++
			if err := r.Scan(&last, &typ, &payload); err != nil {
				return err
			}
			p, err := evcodec.Decode(payload)
			if err != nil {
				return nil
			}
			ev := svc.RuntimeEvent{EventType: svc.EventType(typ), Payload: p}
			if f := rollup.FactsOf(&ev); f.RunFlags != 0 {
				batch = append(batch, row{last, f.RunFlags})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, r := range batch {
			if _, err := update.Exec(r.flags, r.id); err != nil {
				return err
			}
		}
		if seen < chunk {
			break
		}
	}
	t, err := totalsWhere(context.Background(), tx, "1", nil, 1)
	if err != nil {
		return err
	}
	// Only the new tables: the others hold these events already.
	return (&totals{usageMin: t.usageMin, typeMin: t.typeMin}).apply(newTxStmts(context.Background(), tx, nil))
}

// rebuildRuns sets the run_totals rows of traces (every trace when nil)
// from the events held: a prune deletes some of a trace's events, and its
// first event, target and counts must be those of what is left.
func rebuildRuns(ctx context.Context, tx *sql.Tx, traces []string) error {
	rows := map[string]*rollup.RunRow{}
	scan := func(r *sql.Rows) error {
		var (
			ev        svc.RuntimeEvent
			typ       string
			us, flags int64
			f         rollup.Facts
		)
		if err := r.Scan(&ev.TraceID, &ev.ParentTraceID, &typ, &ev.AgentName, &us, &f.Tokens, &flags); err != nil {
			return err
		}
		ev.EventType, f.RunFlags = svc.EventType(typ), flags
		if rollup.IsWorkerEvent(ev.EventType) {
			return nil
		}
		row := rows[ev.TraceID]
		if row == nil {
			row = &rollup.RunRow{TraceID: ev.TraceID}
			rows[ev.TraceID] = row
		}
		row.Add(&ev, us, &f)
		return nil
	}
	const cols = `SELECT trace_id, parent_trace_id, event_type, agent, ts, tokens_used, run_flags FROM events`
	if traces == nil {
		if _, err := tx.ExecContext(ctx, `DELETE FROM run_totals`); err != nil {
			return err
		}
		if err := eachRow(ctx, tx, cols+` WHERE trace_id <> '' ORDER BY ts, id`, nil, scan); err != nil {
			return err
		}
	} else {
		del, err := tx.PrepareContext(ctx, `DELETE FROM run_totals WHERE trace_id = ?`)
		if err != nil {
			return err
		}
		defer del.Close()
		for _, tr := range traces {
			if _, err := del.ExecContext(ctx, tr); err != nil {
				return err
			}
			if err := eachRow(ctx, tx, cols+` INDEXED BY events_trace_id WHERE trace_id = ? ORDER BY ts, id`, []any{tr}, scan); err != nil {
				return err
			}
		}
	}
	t := &totals{runs: rows}
	return t.apply(newTxStmts(ctx, tx, nil))
}
