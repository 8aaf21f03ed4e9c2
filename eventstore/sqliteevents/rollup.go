package sqliteevents

import (
	"context"
	"database/sql"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore/internal/evcodec"
	"github.com/svc-dev/svc/eventstore/internal/rollup"
)

// The SQLite store's rollups read the totals tables, and walk the partial
// covering indexes over the fact columns for what totals cannot hold
// (percentiles, error groups, child runs); see schema.go. Go only
// finishes them with the code the memory store shares (the rollup package). Each
// rollup reads in one transaction, so its several queries see one snapshot
// of the file even while the writer writes.

var _ svc.EventReader = (*Store)(nil)

// read runs f in a read transaction.
func (s *Store) read(ctx context.Context, what string, f func(tx *sql.Tx) error) error {
	if err := s.check(); err != nil {
		return err
	}
	tx, err := s.reader.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(ctx, err, "%s", what)
	}
	defer tx.Rollback() // read only: nothing to commit
	if err := f(tx); err != nil {
		return s.fail(ctx, err, "%s", what)
	}
	return nil
}

// Usage sums agent_completed tokens; see svc.EventReader and the rollup package.
// It reads the totals, not the events.
func (s *Store) Usage(ctx context.Context, groupBy string) (svc.Usage, error) {
	groupBy, err := rollup.UsageGroup(groupBy)
	if err != nil {
		return svc.Usage{}, err
	}
	u := rollup.NewUsage(groupBy)
	err = s.read(ctx, "usage", func(tx *sql.Tx) error {
		return totalUsage(ctx, tx, u, groupBy)
	})
	if err != nil {
		return svc.Usage{}, err
	}
	return u.Result(), nil
}

// totalUsage adds the usage totals to u.
func totalUsage(ctx context.Context, tx *sql.Tx, u *rollup.UsageAcc, groupBy string) error {
	dim := groupBy
	if groupBy == svc.GroupByNone {
		dim = svc.GroupByAgent // any dimension sums to the total
	}
	return eachRow(ctx, tx, `SELECT key, invocations, tokens_used, cached_tokens, cost_nusd FROM usage_totals WHERE dim = ?`,
		[]any{dim}, func(r *sql.Rows) error {
			var (
				key                     string
				n, tokens, cached, cost int64
			)
			if err := r.Scan(&key, &n, &tokens, &cached, &cost); err != nil {
				return err
			}
			if groupBy == svc.GroupByModel {
				key = rollup.UsageKey(groupBy, "", "", key)
			}
			u.Add(key, n, tokens, cached, cost)
			return nil
		})
}

// ToolUsage computes per-tool rows; see svc.EventReader and the rollup package.
// Counts and sums come from the totals; each percentile is one walk of a
// covering index, within its group and in duration order, from whichever
// end is nearer (so p50 walks half the group's index entries, p99 a
// hundredth), without reading a row into Go.
func (s *Store) ToolUsage(ctx context.Context, groupBy string) (svc.ToolUsage, error) {
	if err := rollup.ToolGroup(groupBy); err != nil {
		return svc.ToolUsage{}, err
	}
	var aggs []*rollup.ToolAgg
	err := s.read(ctx, "tool usage", func(tx *sql.Tx) error {
		var err error
		aggs, err = toolTotals(ctx, tx, groupBy)
		return err
	})
	if err != nil {
		return svc.ToolUsage{}, err
	}
	return rollup.ToolRows(groupBy, aggs), nil
}

// toolTotals reads the tool rows of every call held.
func toolTotals(ctx context.Context, tx *sql.Tx, groupBy string) ([]*rollup.ToolAgg, error) {
	cols, keys, match, index := `tool_name, ''`, `tool_name`, `tool_name = ?1`, "events_tools"
	if groupBy == svc.GroupByAgentTool {
		cols, keys, match, index = `tool_name, agent`, `tool_name, agent`, `tool_name = ?1 AND agent = ?2`, "events_agent_tools"
	}
	var aggs []*rollup.ToolAgg
	err := func() error {
		err := eachRow(ctx, tx, `SELECT `+cols+`, SUM(calls), SUM(failures), SUM(durations), SUM(duration_us)
			FROM tool_totals GROUP BY `+keys, nil, func(r *sql.Rows) error {
			a := &rollup.ToolAgg{}
			aggs = append(aggs, a)
			return r.Scan(&a.Tool, &a.Agent, &a.Calls, &a.Failures, &a.N, &a.SumUS)
		})
		if err != nil {
			return err
		}
		// Without statistics SQLite might walk another index and read
		// rows; INDEXED BY holds it to the covering one.
		where := ` FROM events INDEXED BY ` + index + ` WHERE ` + whereToolEnd + ` AND ` + match + ` AND duration_us IS NOT NULL`
		asc, err := tx.PrepareContext(ctx, `SELECT duration_us`+where+` ORDER BY duration_us LIMIT 1 OFFSET ?3`)
		if err != nil {
			return err
		}
		defer asc.Close()
		desc, err := tx.PrepareContext(ctx, `SELECT duration_us`+where+` ORDER BY duration_us DESC LIMIT 1 OFFSET ?3`)
		if err != nil {
			return err
		}
		defer desc.Close()
		for _, a := range aggs {
			if a.N == 0 {
				continue
			}
			for i, pct := range rollup.Percentiles {
				r := rollup.Rank(pct, a.N) // 1-based from the smallest
				stmt, skip := asc, r-1
				if fromTop := a.N - r; fromTop < skip {
					stmt, skip = desc, fromTop
				}
				if err := stmt.QueryRowContext(ctx, a.Tool, a.Agent, skip).Scan(a.Percentile(i)); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	return aggs, err
}

// RuntimeStats computes the dashboard as of now; see svc.EventReader and
// rollup.Stats.
func (s *Store) RuntimeStats(ctx context.Context, now time.Time) (svc.RuntimeStats, error) {
	return s.stats(ctx, now, nil)
}

// stats computes RuntimeStats, over the window b when it is not nil
// (window.go).
func (s *Store) stats(ctx context.Context, now time.Time, b *rollup.Bounds) (svc.RuntimeStats, error) {
	acc := rollup.NewStats(now)
	// inWindow bounds the failure queries: nothing without a window.
	inWindow, windowArgs, failures := "", []any(nil), "events"
	if b != nil {
		// Without the hint SQLite walks events_ts for the window and
		// reads every row in it; the failures' index holds the times.
		inWindow, windowArgs, failures = ` AND ts >= ? AND ts < ?`, []any{b.Since, b.Until}, "events INDEXED BY events_errors"
	}
	err := s.read(ctx, "runtime stats", func(tx *sql.Tx) error {
		whole := b == nil
		if !whole {
			var err error
			if whole, err = covers(ctx, tx, *b); err != nil {
				return err
			}
		}
		var err error
		if whole {
			err = totalStats(ctx, tx, acc)
		} else {
			err = windowStats(ctx, tx, acc, *b)
		}
		if err != nil {
			return err
		}
		err = tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(tokens_used), 0) FROM events INDEXED BY events_completed_ts
			WHERE `+whereCompleted+` AND ts > ? AND ts <= ?`,
			now.Add(-rollup.BurnWindow).UnixMicro(), now.UnixMicro()).Scan(&acc.BurnTokens)
		if err != nil {
			return err
		}

		err = eachRow(ctx, tx, `SELECT error_kind, event_type, COUNT(*) FROM `+failures+` WHERE `+whereFailure+inWindow+`
			GROUP BY error_kind, event_type`, windowArgs, func(r *sql.Rows) error {
			var (
				kind, t string
				n       int64
			)
			if err := r.Scan(&kind, &t, &n); err != nil {
				return err
			}
			acc.Failures(svc.EventType(t), kind, n)
			return nil
		})
		if err != nil {
			return err
		}
		err = eachRow(ctx, tx, `SELECT DISTINCT error_kind, agent FROM `+failures+` WHERE `+whereFailure+inWindow, windowArgs, func(r *sql.Rows) error {
			var kind, agent string
			if err := r.Scan(&kind, &agent); err != nil {
				return err
			}
			acc.Agent(kind, agent)
			return nil
		})
		if err != nil {
			return err
		}
		for _, kind := range acc.ErrorKinds() {
			var (
				at      rollup.Pos
				payload []byte
			)
			err := tx.QueryRowContext(ctx, `SELECT id, ts, payload FROM `+failures+` WHERE `+whereFailure+inWindow+`
				AND error_kind = ? ORDER BY ts DESC, id DESC LIMIT 1`, append(windowArgs[:len(windowArgs):len(windowArgs)], kind)...).Scan(&at.Seq, &at.US, &payload)
			if err != nil {
				return err
			}
			p, _ := evcodec.Decode(payload) // a payload another writer garbled has no sample
			acc.Latest(kind, at, rollup.Str(p["error"]))
		}

		// The latest heartbeat and stop of each worker.
		return eachRow(ctx, tx, sqlLatestWorkers, nil, func(r *sql.Rows) error {
			var (
				se      rollup.StoredEvent
				typ     string
				payload []byte
				runtime string
				err     error
			)
			ev := &se.Ev
			if err := r.Scan(&se.At.Seq, &se.At.US, &typ, &ev.AgentName, &ev.TaskID, &ev.TraceID,
				&ev.ParentTraceID, &ev.SpanID, &ev.ParentSpanID, &payload, &runtime); err != nil {
				return err
			}
			ev.Timestamp, ev.EventType = time.UnixMicro(se.At.US).UTC(), svc.EventType(typ)
			if ev.Payload, err = evcodec.Decode(payload); err != nil {
				ev.Payload = svc.Payload{} // another writer garbled it: the worker still counts
			}
			acc.Worker(runtime, se.At, se.Ev)
			return nil
		})
	})
	if err != nil {
		return svc.RuntimeStats{}, err
	}
	return acc.Result(), nil
}

// totalStats reads the stats header's counts of every event held from
// the totals.
func totalStats(ctx context.Context, tx *sql.Tx, acc *rollup.Stats) error {
	err := eachRow(ctx, tx, `SELECT event_type, events FROM type_totals`, nil, func(r *sql.Rows) error {
		var (
			t string
			n int64
		)
		if err := r.Scan(&t, &n); err != nil {
			return err
		}
		acc.Count(svc.EventType(t), n)
		return nil
	})
	if err != nil {
		return err
	}
	err = tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM run_totals`).Scan(&acc.Header.Traces)
	if err != nil {
		return err
	}
	return tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(tokens_used), 0) FROM usage_totals WHERE dim = ?`,
		svc.GroupByAgent).Scan(&acc.Header.TokensUsed)
}

// Tree returns the event tree of one run; see rollup.BuildTree.
func (s *Store) Tree(ctx context.Context, traceID string) (svc.EventTree, error) {
	var (
		tree  svc.EventTree
		built error
	)
	err := s.read(ctx, "tree", func(tx *sql.Tx) error {
		tree, built = rollup.BuildTree(ctx, &sqliteTreeSource{tx: tx}, traceID)
		if svc.KindOf(built) == svc.KindRegistry {
			return nil // not a database error: returned as is below
		}
		return built
	})
	if err != nil {
		return svc.EventTree{}, err
	}
	if built != nil {
		return svc.EventTree{}, built
	}
	return tree, nil
}

type sqliteTreeSource struct{ tx *sql.Tx }

func (src *sqliteTreeSource) ChildTraces(ctx context.Context, trace string) ([]string, error) {
	var out []string
	err := eachRow(ctx, src.tx, `SELECT DISTINCT trace_id FROM events WHERE `+whereChild+`
		AND parent_trace_id = ?1 AND trace_id <> ?1 ORDER BY trace_id`, []any{trace}, func(r *sql.Rows) error {
		var id string
		if err := r.Scan(&id); err != nil {
			return err
		}
		out = append(out, id)
		return nil
	})
	return out, err
}

func (src *sqliteTreeSource) Events(ctx context.Context, traces []string) (map[string][]rollup.StoredEvent, error) {
	out := make(map[string][]rollup.StoredEvent, len(traces))
	for _, t := range traces {
		rows, err := src.tx.QueryContext(ctx, `SELECT `+eventColumns+` FROM events WHERE trace_id = ? ORDER BY ts, id`, t)
		if err != nil {
			return nil, err
		}
		var list []rollup.StoredEvent
		if err := scanEvents(rows, func(se rollup.StoredEvent) { list = append(list, se) }); err != nil {
			return nil, err
		}
		out[t] = list
	}
	return out, nil
}

// sqlLatestWorkers is the latest heartbeat and stop of each worker.
const sqlLatestWorkers = `SELECT ` + eventColumns + `, runtime_id FROM (
			SELECT *, ROW_NUMBER() OVER (PARTITION BY event_type, runtime_id ORDER BY ts DESC, id DESC) AS rn
			FROM events WHERE event_type IN ('worker_heartbeat', 'worker_stopped') AND ` + whereNotCompleted + `
		) WHERE rn = 1`
