package sqliteevents

import (
	"context"
	"database/sql"
	"math"
	"strings"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore/internal/rollup"
)

// Windowed rollups (svc.WindowedEventReader). A window's whole minutes
// are summed from the per-minute totals (usage_minutes, type_minutes:
// rows per minute and key, so the cost grows with the window's length in
// minutes times its keys, not with its events); the partial minutes at
// its edges, at most two, are read from the events by the time indexes.
// The answers are exact: the same as the memory store's, which filters
// every event. Tool rows need the durations themselves (percentiles), so
// ToolUsageIn reads the window's tool calls from events_type_ts: its cost
// grows with the calls in the window.

var _ svc.WindowedEventReader = (*Store)(nil)

// sqlOtherTypes lists the event types but agent_completed, quoted, for an
// IN list. A type this build does not know (another writer's) is left
// out of a window's edge minutes; the minute totals count it.
var sqlOtherTypes = func() string {
	var list []string
	for _, t := range svc.EventTypes {
		if t != svc.EventAgentCompleted {
			list = append(list, "'"+string(t)+"'")
		}
	}
	return strings.Join(list, ", ")
}()

// covers reports whether b holds every event of the store: then a
// windowed rollup is the unwindowed one, read from the totals. The first
// and last timestamps are the ends of events_ts.
func covers(ctx context.Context, tx *sql.Tx, b rollup.Bounds) (bool, error) {
	// Two queries: SQLite reads a lone MIN or MAX off the index's end,
	// but both in one query scan the table.
	var first, last sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MIN(ts) FROM events`).Scan(&first); err != nil {
		return false, err
	}
	if err := tx.QueryRowContext(ctx, `SELECT MAX(ts) FROM events`).Scan(&last); err != nil {
		return false, err
	}
	return !first.Valid || (b.Since <= first.Int64 && last.Int64 < b.Until), nil
}

// span is the part of a window the minute totals give, [m0, m1) in
// minutes, and the edges ([from, to) in microseconds) the events give.
type span struct {
	m0, m1 int64
	whole  bool
	edges  [][2]int64
}

func split(b rollup.Bounds) span {
	sp := span{m0: math.MinInt64, m1: math.MaxInt64}
	if b.Since != math.MinInt64 {
		sp.m0 = -floorDiv(-b.Since, usPerMinute) // ceil
	}
	if b.Until != math.MaxInt64 {
		sp.m1 = floorDiv(b.Until, usPerMinute)
	}
	if sp.m0 >= sp.m1 {
		sp.edges = [][2]int64{{b.Since, b.Until}}
		return sp
	}
	sp.whole = true
	if b.Since != math.MinInt64 && b.Since < sp.m0*usPerMinute {
		sp.edges = append(sp.edges, [2]int64{b.Since, sp.m0 * usPerMinute})
	}
	if b.Until != math.MaxInt64 && sp.m1*usPerMinute < b.Until {
		sp.edges = append(sp.edges, [2]int64{sp.m1 * usPerMinute, b.Until})
	}
	return sp
}

// UsageIn is Usage over the events in w; see svc.WindowedEventReader.
func (s *Store) UsageIn(ctx context.Context, groupBy string, w svc.Window) (svc.Usage, error) {
	if err := rollup.CheckWindow(w); err != nil {
		return svc.Usage{}, err
	}
	if w.IsZero() {
		return s.Usage(ctx, groupBy)
	}
	groupBy, err := rollup.UsageGroup(groupBy)
	if err != nil {
		return svc.Usage{}, err
	}
	u := rollup.NewUsage(groupBy)
	b := rollup.BoundsOf(w)
	err = s.read(ctx, "usage", func(tx *sql.Tx) error {
		if all, err := covers(ctx, tx, b); err != nil || all {
			if err != nil {
				return err
			}
			return totalUsage(ctx, tx, u, groupBy)
		}
		return windowUsage(ctx, tx, u, groupBy, b)
	})
	if err != nil {
		return svc.Usage{}, err
	}
	return u.Result(), nil
}

// windowUsage adds the window's completions to u.
func windowUsage(ctx context.Context, tx *sql.Tx, u *rollup.UsageAcc, groupBy string, b rollup.Bounds) error {
	dim := groupBy
	if groupBy == svc.GroupByNone {
		dim = svc.GroupByAgent // any dimension sums to the total
	}
	sp := split(b)
	if sp.whole {
		err := eachRow(ctx, tx, `SELECT key, SUM(invocations), SUM(tokens_used), SUM(cached_tokens), SUM(cost_nusd)
			FROM usage_minutes WHERE dim = ? AND minute >= ? AND minute < ? GROUP BY key`,
			[]any{dim, sp.m0, sp.m1}, func(r *sql.Rows) error {
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
		if err != nil {
			return err
		}
	}
	for _, e := range sp.edges {
		err := eachRow(ctx, tx, `SELECT agent, trace_id, model, tokens_used, cached_tokens, cost_nusd
			FROM events INDEXED BY events_completed_ts WHERE `+whereCompleted+` AND ts >= ? AND ts < ?`,
			[]any{e[0], e[1]}, func(r *sql.Rows) error {
				var (
					agent, trace, model  string
					tokens, cached, cost int64
				)
				if err := r.Scan(&agent, &trace, &model, &tokens, &cached, &cost); err != nil {
					return err
				}
				u.Add(rollup.UsageKey(groupBy, agent, trace, model), 1, tokens, cached, cost)
				return nil
			})
		if err != nil {
			return err
		}
	}
	return nil
}

// ToolUsageIn is ToolUsage over the events in w; see
// svc.WindowedEventReader.
func (s *Store) ToolUsageIn(ctx context.Context, groupBy string, w svc.Window) (svc.ToolUsage, error) {
	if err := rollup.CheckWindow(w); err != nil {
		return svc.ToolUsage{}, err
	}
	if w.IsZero() {
		return s.ToolUsage(ctx, groupBy)
	}
	if err := rollup.ToolGroup(groupBy); err != nil {
		return svc.ToolUsage{}, err
	}
	b := rollup.BoundsOf(w)
	acc := rollup.NewToolAcc(groupBy)
	var whole []*rollup.ToolAgg
	err := s.read(ctx, "tool usage", func(tx *sql.Tx) error {
		if all, err := covers(ctx, tx, b); err != nil || all {
			if err != nil {
				return err
			}
			whole, err = toolTotals(ctx, tx, groupBy)
			if whole == nil {
				whole = []*rollup.ToolAgg{}
			}
			return err
		}
		return eachRow(ctx, tx, `SELECT event_type, agent, tool_name, duration_us FROM events INDEXED BY events_tool_ts
			WHERE `+whereToolEnd+` AND ts >= ? AND ts < ?`,
			[]any{b.Since, b.Until}, func(r *sql.Rows) error {
				var (
					typ, agent string
					f          rollup.Facts
					dur        sql.NullInt64
				)
				if err := r.Scan(&typ, &agent, &f.Tool, &dur); err != nil {
					return err
				}
				f.DurUS, f.HasDur = dur.Int64, dur.Valid
				acc.Add(svc.EventType(typ), agent, &f)
				return nil
			})
	})
	if err != nil {
		return svc.ToolUsage{}, err
	}
	if whole != nil {
		return rollup.ToolRows(groupBy, whole), nil
	}
	return acc.Result(), nil
}

// RuntimeStatsIn is RuntimeStats over the events in w; see
// svc.WindowedEventReader and the rollup package's windows.
func (s *Store) RuntimeStatsIn(ctx context.Context, now time.Time, w svc.Window) (svc.RuntimeStats, error) {
	if err := rollup.CheckWindow(w); err != nil {
		return svc.RuntimeStats{}, err
	}
	if w.IsZero() {
		return s.RuntimeStats(ctx, now)
	}
	b := rollup.BoundsOf(w)
	return s.stats(ctx, now, &b)
}

// windowStats reads the stats header's counts of the events in b: event
// types by minute and at the edges, the traces active in the window from
// run_totals, the tokens as UsageIn sums them.
func windowStats(ctx context.Context, tx *sql.Tx, acc *rollup.Stats, b rollup.Bounds) error {
	count := func(r *sql.Rows) error {
		var (
			t string
			n int64
		)
		if err := r.Scan(&t, &n); err != nil {
			return err
		}
		acc.Count(svc.EventType(t), n)
		return nil
	}
	sp := split(b)
	if sp.whole {
		err := eachRow(ctx, tx, `SELECT event_type, SUM(events) FROM type_minutes WHERE minute >= ? AND minute < ?
			GROUP BY event_type`, []any{sp.m0, sp.m1}, count)
		if err != nil {
			return err
		}
	}
	for _, e := range sp.edges {
		// By type and time in the two type indexes, without reading a
		// row: each type of the IN list is one range of events_type_ts.
		err := eachRow(ctx, tx, `SELECT event_type, COUNT(*) FROM events INDEXED BY events_type_ts
			WHERE event_type IN (`+sqlOtherTypes+`) AND `+whereNotCompleted+` AND ts >= ? AND ts < ?
			GROUP BY event_type`, []any{e[0], e[1]}, count)
		if err != nil {
			return err
		}
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM events INDEXED BY events_completed_ts
			WHERE `+whereCompleted+` AND ts >= ? AND ts < ?`, e[0], e[1]).Scan(&n); err != nil {
			return err
		}
		acc.Count(svc.EventAgentCompleted, n)
	}
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM run_totals WHERE first_us < ? AND last_us >= ?`,
		b.Until, b.Since).Scan(&acc.Header.Traces)
	if err != nil {
		return err
	}
	u := rollup.NewUsage(svc.GroupByNone)
	if err := windowUsage(ctx, tx, u, svc.GroupByNone, b); err != nil {
		return err
	}
	acc.Header.TokensUsed = u.Result().Total.TokensUsed
	return nil
}
