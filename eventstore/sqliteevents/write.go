package sqliteevents

import (
	"context"
	"database/sql"
	"strings"
)

// The SQLite store writes a batch with multi-row statements: the events in
// INSERTs of up to maxChunk rows, and each totals table's keys in upserts
// of up to maxChunk rows. One statement per row cost as much in
// database/sql, the driver and SQLite's statement setup and teardown as in
// the row's own b-tree work (BenchmarkSQLiteWriteServeMix, BENCHMARKS.md).
// A batch of n rows is written in chunks whose sizes are powers of two
// (the largest that fits, then the next), so every statement is one of
// len(chunkSizes) shapes per table, prepared once when the store opens.
// SQLite inserts the rows of one VALUES list in order, so ids still follow
// the batch's order.

// chunkSizes are the row counts of the prepared multi-row statements,
// largest first. 64 rows of the widest statement (run_totals' 19 columns)
// are 1,216 parameters, far below SQLite's limit of 32,766.
var chunkSizes = [...]int{64, 32, 16, 8, 4, 2, 1}

const maxChunk = 64

// chunkFor is the number of rows the next statement writes when rows are
// left.
func chunkFor(rows int) int {
	for _, n := range chunkSizes {
		if n <= rows {
			return n
		}
	}
	return rows // 0
}

// valuesList is "(?, ?, …), (…)": rows rows of cols parameters.
func valuesList(rows, cols int) string {
	row := "(?" + strings.Repeat(", ?", cols-1) + ")"
	return row + strings.Repeat(", "+row, rows-1)
}

// insertCols are the events columns Write fills, in the order of its
// arguments.
const insertCols = `ts, event_type, agent, task_id, trace_id, parent_trace_id, payload,
	tokens_used, duration_us, model, tool_name, error_kind, runtime_id, span_id, parent_span_id, cost_nusd, cached_tokens, run_flags`

const insertWidth = 18

// insertSQL is the INSERT of n events.
func insertSQL(n int) string {
	return `INSERT INTO events (` + insertCols + `) VALUES ` + valuesList(n, insertWidth)
}

// totalsTable describes a totals table to the upserts that add to it:
// its key columns, the columns added to (the first is the count whose
// falling to zero drops the row).
type totalsTable struct {
	name       string
	keys, sums []string
	// extra are columns after the sums that are not added: set holds
	// their assignments on conflict.
	extra, set []string
}

// The totals tables, in the column order totals.apply gives their rows.
var (
	usageTable = totalsTable{name: "usage_totals", keys: []string{"dim", "key"}, sums: []string{"invocations", "tokens_used", "cost_nusd", "cached_tokens"}}
	toolTable  = totalsTable{name: "tool_totals", keys: []string{"tool_name", "agent"},
		sums: []string{"calls", "failures", "durations", "duration_us"}}
	typeTable     = totalsTable{name: "type_totals", keys: []string{"event_type"}, sums: []string{"events"}}
	usageMinTable = totalsTable{name: "usage_minutes", keys: []string{"dim", "minute", "key"},
		sums: []string{"invocations", "tokens_used", "cost_nusd", "cached_tokens"}}
	typeMinTable = totalsTable{name: "type_minutes", keys: []string{"minute", "event_type"}, sums: []string{"events"}}
	// runTable's target is that of the higher ranked event, the earlier
	// of equal ranks (rollup.RunRow.Add).
	runTable = totalsTable{name: "run_totals", keys: []string{"trace_id"},
		sums: []string{"events", "parented", "start_events", "starts", "completed", "failed",
			"group_starts", "group_ends", "group_fails", "batch_starts", "batch_ends", "rejects", "tokens_used"},
		extra: []string{"first_us", "last_us", "target", "target_rank", "target_us"},
		set: []string{"first_us = MIN(first_us, excluded.first_us)", "last_us = MAX(last_us, excluded.last_us)",
			"target = CASE WHEN " + runTargetWins + " THEN excluded.target ELSE target END",
			"target_us = CASE WHEN " + runTargetWins + " THEN excluded.target_us ELSE target_us END",
			"target_rank = MAX(target_rank, excluded.target_rank)"}}
	allTotals = [...]*totalsTable{&usageTable, &toolTable, &typeTable, &usageMinTable, &typeMinTable, &runTable}
)

// runTargetWins: the target of the rows being added replaces the stored one.
const runTargetWins = `(excluded.target_rank > target_rank OR (excluded.target_rank = target_rank AND excluded.target_rank > 0 AND excluded.target_us < target_us))`

func (t *totalsTable) width() int { return len(t.keys) + len(t.sums) + len(t.extra) }

// upsertSQL adds n rows to the table: new keys are inserted, existing
// ones summed into.
func (t *totalsTable) upsertSQL(n int) string {
	set := make([]string, len(t.sums), len(t.sums)+len(t.set))
	for i, c := range t.sums {
		set[i] = c + " = " + c + " + excluded." + c
	}
	set = append(set, t.set...)
	keys := strings.Join(t.keys, ", ")
	return `INSERT INTO ` + t.name + ` (` + keys + `, ` + strings.Join(append(t.sums[:len(t.sums):len(t.sums)], t.extra...), ", ") + `) VALUES ` +
		valuesList(n, t.width()) + ` ON CONFLICT (` + keys + `) DO UPDATE SET ` + strings.Join(set, ", ")
}

// dropSQL deletes the row of one key if its count fell to zero (a prune
// took out all its events).
func (t *totalsTable) dropSQL() string {
	where := make([]string, len(t.keys))
	for i, k := range t.keys {
		where[i] = k + " = ?"
	}
	return `DELETE FROM ` + t.name + ` WHERE ` + strings.Join(where, " AND ") + ` AND ` + t.sums[0] + ` <= 0`
}

// writeSQL holds every statement text of the write path, built once: the
// same string is the key of the prepared statement.
var writeSQL = func() (w struct {
	insert [maxChunk + 1]string
	upsert map[*totalsTable]*[maxChunk + 1]string
	drop   map[*totalsTable]string
}) {
	w.upsert, w.drop = map[*totalsTable]*[maxChunk + 1]string{}, map[*totalsTable]string{}
	for _, t := range allTotals {
		w.upsert[t], w.drop[t] = new([maxChunk + 1]string), t.dropSQL()
	}
	for _, n := range chunkSizes {
		w.insert[n] = insertSQL(n)
		for _, t := range allTotals {
			w.upsert[t][n] = t.upsertSQL(n)
		}
	}
	return w
}()

// prepareWrites prepares every statement of the write path on db (the
// writer, before any transaction holds its one connection).
func prepareWrites(ctx context.Context, db *sql.DB) (map[string]*sql.Stmt, error) {
	out := map[string]*sql.Stmt{}
	prep := func(q string) error {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		out[q] = st
		return nil
	}
	for _, n := range chunkSizes {
		if err := prep(writeSQL.insert[n]); err != nil {
			closeStmts(out)
			return nil, err
		}
		for _, t := range allTotals {
			if err := prep(writeSQL.upsert[t][n]); err != nil {
				closeStmts(out)
				return nil, err
			}
		}
	}
	for _, t := range allTotals {
		if err := prep(writeSQL.drop[t]); err != nil {
			closeStmts(out)
			return nil, err
		}
	}
	return out, nil
}

func closeStmts(m map[string]*sql.Stmt) error {
	var first error
	for _, st := range m {
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// txStmts gives a transaction the statements it runs: those the store
// prepared (shared, nil during a migration) bound to the transaction, and
// any other prepared in it. Statements bound to or prepared in a
// transaction are closed with it.
type txStmts struct {
	ctx    context.Context
	tx     *sql.Tx
	shared map[string]*sql.Stmt
	local  map[string]*sql.Stmt
}

func newTxStmts(ctx context.Context, tx *sql.Tx, shared map[string]*sql.Stmt) *txStmts {
	return &txStmts{ctx: ctx, tx: tx, shared: shared, local: map[string]*sql.Stmt{}}
}

func (s *txStmts) exec(query string, args ...any) error {
	st := s.local[query]
	if st == nil {
		if p := s.shared[query]; p != nil {
			st = s.tx.StmtContext(s.ctx, p)
		} else {
			var err error
			if st, err = s.tx.PrepareContext(s.ctx, query); err != nil {
				return err
			}
		}
		s.local[query] = st
	}
	_, err := st.ExecContext(s.ctx, args...)
	return err
}

// execRows runs the multi-row statements sqlFor(n) over args, which holds
// rows of width parameters each, in chunks of chunkSizes.
func (s *txStmts) execRows(sqlFor *[maxChunk + 1]string, width int, args []any) error {
	rows := len(args) / width
	for i := 0; i < rows; {
		n := chunkFor(rows - i)
		if err := s.exec(sqlFor[n], args[i*width:(i+n)*width]...); err != nil {
			return err
		}
		i += n
	}
	return nil
}

// writeEvents inserts the rows in args (insertWidth parameters each).
func (s *txStmts) writeEvents(args []any) error {
	return s.execRows(&writeSQL.insert, insertWidth, args)
}

// apply adds t to the totals tables: one multi-row upsert per chunk of
// keys, then, for keys whose count went down (a prune), the deletes of
// those that reached zero.
func (t *totals) apply(s *txStmts) error {
	var (
		args  []any
		drops [][]any
	)
	flush := func(table *totalsTable) error {
		if err := s.execRows(writeSQL.upsert[table], table.width(), args); err != nil {
			return err
		}
		for _, key := range drops {
			if err := s.exec(writeSQL.drop[table], key...); err != nil {
				return err
			}
		}
		args, drops = args[:0], drops[:0]
		return nil
	}
	for k, u := range t.usage {
		args = append(args, k[0], k[1], u[usageInvocations], u[usageTokens], u[usageCost], u[usageCached])
		if u[usageInvocations] < 0 {
			drops = append(drops, []any{k[0], k[1]})
		}
	}
	if err := flush(&usageTable); err != nil {
		return err
	}
	for k, r := range t.tools {
		args = append(args, k[0], k[1], r[0], r[1], r[2], r[3])
		if r[0] < 0 {
			drops = append(drops, []any{k[0], k[1]})
		}
	}
	if err := flush(&toolTable); err != nil {
		return err
	}
	for k, n := range t.types {
		args = append(args, k, n)
		if n < 0 {
			drops = append(drops, []any{k})
		}
	}
	if err := flush(&typeTable); err != nil {
		return err
	}
	for k, u := range t.usageMin {
		args = append(args, k.dim, k.minute, k.key, u[usageInvocations], u[usageTokens], u[usageCost], u[usageCached])
		if u[usageInvocations] < 0 {
			drops = append(drops, []any{k.dim, k.minute, k.key})
		}
	}
	if err := flush(&usageMinTable); err != nil {
		return err
	}
	for k, n := range t.typeMin {
		args = append(args, k.minute, k.key, n)
		if n < 0 {
			drops = append(drops, []any{k.minute, k.key})
		}
	}
	if err := flush(&typeMinTable); err != nil {
		return err
	}
	for _, r := range t.runs {
		args = append(args, r.TraceID, r.Events, r.Parented, r.StartEvents, r.Starts, r.Completed, r.Failed,
			r.Groups, r.GroupsDone, r.GroupsFailed, r.Batches, r.BatchesDone, r.Rejects, r.Tokens,
			r.FirstUS, r.LastUS, r.Target, r.TargetRank, r.TargetUS)
	}
	return flush(&runTable)
}
