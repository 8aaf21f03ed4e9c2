package sqliteevents

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore/internal/rollup"
)

var _ svc.RunHistoryReader = (*Store)(nil)

// RunHistory lists the top-level runs from run_totals; see
// svc.RunHistoryReader and the rollup package's history definitions. A
// page walks the run_history index newest first; the total counts the
// rows that match.
func (s *Store) RunHistory(ctx context.Context, q svc.RunHistoryQuery) (svc.HistoryPage, error) {
	q, err := rollup.CheckHistory(q)
	if err != nil {
		return svc.HistoryPage{}, err
	}
	// One index, by time: indexes by status and target would be updated
	// by nearly every write (a run's counts change its status), for
	// filters that a walk of this one serves at 50,000 runs in tens of
	// milliseconds (BENCHMARKS.md).
	where, args := []string{whereTopLevel}, []any{}
	const index = "run_history"
	if q.Status != "" {
		where, args = append(where, "status = ?"), append(args, q.Status)
	}
	if q.Target != "" {
		where, args = append(where, "target = ?"), append(args, q.Target)
	}
	if q.Type != "" {
		where, args = append(where, "type = ?"), append(args, q.Type)
	}
	if len(q.Exclude) > 0 {
		list, err := json.Marshal(q.Exclude)
		if err != nil {
			return svc.HistoryPage{}, svc.Wrap(svc.KindSpecValidation, err, "eventstore: run history exclude")
		}
		where, args = append(where, "trace_id NOT IN (SELECT value FROM json_each(?))"), append(args, string(list))
	}
	from := ` FROM run_totals INDEXED BY ` + index + ` WHERE ` + strings.Join(where, " AND ")
	page := svc.HistoryPage{Runs: []svc.HistoryRun{}}
	err = s.read(ctx, "run history", func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*)`+from, args...).Scan(&page.Total); err != nil {
			return err
		}
		pageWhere, pageArgs := from, args
		if b := q.Before; b != nil {
			us := b.At.UnixMicro()
			pageWhere += ` AND (first_us < ? OR (first_us = ? AND trace_id < ?))`
			pageArgs = append(pageArgs[:len(pageArgs):len(pageArgs)], us, us, b.TraceID)
		}
		return eachRow(ctx, tx, `SELECT trace_id, type, target, status, first_us, last_us, events, tokens_used`+
			pageWhere+` ORDER BY first_us DESC, trace_id DESC LIMIT ?`, append(pageArgs, q.Limit), func(r *sql.Rows) error {
			var (
				h             svc.HistoryRun
				first, latest int64
			)
			if err := r.Scan(&h.TraceID, &h.Type, &h.Target, &h.Status, &first, &latest, &h.Events, &h.TokensUsed); err != nil {
				return err
			}
			h.StartedAt, h.LastEventAt = time.UnixMicro(first).UTC(), time.UnixMicro(latest).UTC()
			page.Runs = append(page.Runs, h)
			return nil
		})
	})
	if err != nil {
		return svc.HistoryPage{}, err
	}
	return page, nil
}
