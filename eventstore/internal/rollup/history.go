package rollup

import (
	"cmp"
	"slices"
	"time"

	"github.com/svc-dev/svc"
)

// The run history (svc.RunHistoryReader) lists the traces whose events
// name no parent trace (top-level requests: a run, a gather, a group run),
// leaving out worker lifecycle events, whose trace id is a runtime's.
// A trace is summed into a RunRow, whose counts decide its status:
//
//   - open while an agent_spawned has no agent_completed or agent_failed
//     to match, a group_started no group_completed, a batch_started no
//     batch_completed, or it has none of those ends (nor a refusal):
//     spawned when all its events are start events (agent_spawned,
//     agent_dispatched, group_started, batch_started), else running;
//   - else rejected when it holds a refusal (RunReject) and no
//     agent_completed;
//   - else a group run is failed when a group_completed said success
//     false, completed otherwise; another run failed when an agent_failed
//     is among its events, completed otherwise.
//
// Its type is group when it has a group_started, gather when it has a
// batch_started, run otherwise; its target the agent name (the group's
// name for group events) of its group_started, else its batch_started,
// else its earliest event naming one. Rows are ordered newest first by
// their first event, then by trace id (descending).

// Target ranks: the event a run's target is read from.
const (
	rankAgent = 1 + iota
	rankBatch
	rankGroup
)

// RunRow is what the history keeps of one trace.
type RunRow struct {
	TraceID string
	// Counts: every event, those naming a parent trace, start events,
	// and each kind the status reads.
	Events, Parented, StartEvents         int64
	Starts, Completed, Failed             int64
	Groups, GroupsDone, GroupsFailed      int64
	Batches, BatchesDone, Rejects, Tokens int64
	FirstUS, LastUS                       int64
	Target                                string
	TargetRank                            int64
	TargetUS                              int64
}

// Add counts one event at us with facts f.
func (r *RunRow) Add(ev *svc.RuntimeEvent, us int64, f *Facts) {
	if r.Events == 0 || us < r.FirstUS {
		r.FirstUS = us
	}
	if r.Events == 0 || us > r.LastUS {
		r.LastUS = us
	}
	r.Events++
	if ev.ParentTraceID != "" {
		r.Parented++
	}
	rank := int64(0)
	switch ev.EventType {
	case svc.EventAgentSpawned:
		r.Starts++
		r.StartEvents++
	case svc.EventAgentDispatched:
		r.StartEvents++
	case svc.EventAgentCompleted:
		r.Completed++
		r.Tokens += f.Tokens
	case svc.EventAgentFailed:
		r.Failed++
	case svc.EventGroupStarted:
		r.Groups++
		r.StartEvents++
		rank = rankGroup
	case svc.EventGroupCompleted:
		r.GroupsDone++
	case svc.EventBatchStarted:
		r.Batches++
		r.StartEvents++
		rank = rankBatch
	case svc.EventBatchCompleted:
		r.BatchesDone++
	}
	if f.RunFlags&RunReject != 0 {
		r.Rejects++
	}
	if f.RunFlags&RunGroupFailed != 0 {
		r.GroupsFailed++
	}
	if rank == 0 && ev.AgentName != "" {
		rank = rankAgent
	}
	if rank > r.TargetRank || (rank > 0 && rank == r.TargetRank && us < r.TargetUS) {
		r.Target, r.TargetRank, r.TargetUS = ev.AgentName, rank, us
	}
}

// InHistory reports whether the trace is a top-level run.
func (r *RunRow) InHistory() bool { return r.Parented == 0 && r.Events > 0 }

// Status is the row's status; see the package's history definitions.
// SQLStatus is the same in SQL, over the SQLite store's run_totals
// columns (group_starts for Groups, group_ends for GroupsDone, group_fails
// for GroupsFailed, batch_starts and batch_ends for Batches and
// BatchesDone, the others by their names in snake case).
func (r *RunRow) Status() string {
	ends := r.Completed + r.Failed
	switch {
	case r.Starts > ends || r.Groups > r.GroupsDone || r.Batches > r.BatchesDone || ends+r.GroupsDone+r.BatchesDone+r.Rejects == 0:
		if r.Events == r.StartEvents {
			return svc.RunStatusSpawned
		}
		return svc.RunStatusRunning
	case r.Rejects > 0 && r.Completed == 0:
		return svc.RunStatusRejected
	case r.Groups > 0:
		if r.GroupsFailed > 0 {
			return svc.RunStatusFailed
		}
		return svc.RunStatusCompleted
	case r.Failed > 0:
		return svc.RunStatusFailed
	}
	return svc.RunStatusCompleted
}

// SQLStatus is RunRow.Status in SQL.
const SQLStatus = `CASE
	WHEN starts > completed + failed OR group_starts > group_ends OR batch_starts > batch_ends
		OR completed + failed + group_ends + batch_ends + rejects = 0
		THEN CASE WHEN events = start_events THEN 'spawned' ELSE 'running' END
	WHEN rejects > 0 AND completed = 0 THEN 'rejected'
	WHEN group_starts > 0 THEN CASE WHEN group_fails > 0 THEN 'failed' ELSE 'completed' END
	WHEN failed > 0 THEN 'failed'
	ELSE 'completed' END`

// Type is the row's type.
func (r *RunRow) Type() string {
	switch {
	case r.Groups > 0:
		return svc.RunTypeGroup
	case r.Batches > 0:
		return svc.RunTypeGather
	}
	return svc.RunTypeRun
}

// SQLType is RunRow.Type in SQL.
const SQLType = `CASE WHEN group_starts > 0 THEN 'group' WHEN batch_starts > 0 THEN 'gather' ELSE 'run' END`

// HistoryRun is the row as the history lists it.
func (r *RunRow) HistoryRun() svc.HistoryRun {
	return svc.HistoryRun{
		TraceID: r.TraceID, Type: r.Type(), Target: r.Target, Status: r.Status(),
		StartedAt: time.UnixMicro(r.FirstUS).UTC(), LastEventAt: time.UnixMicro(r.LastUS).UTC(),
		Events: r.Events, TokensUsed: r.Tokens,
	}
}

// CheckHistory checks q and fills in the default limit.
func CheckHistory(q svc.RunHistoryQuery) (svc.RunHistoryQuery, error) {
	switch q.Type {
	case "", svc.RunTypeRun, svc.RunTypeGather, svc.RunTypeGroup:
	default:
		return q, svc.Errorf(svc.KindSpecValidation, "eventstore: run type %q: want run, gather or group", q.Type)
	}
	if q.Status != "" && !slices.Contains(svc.RunStatuses, q.Status) {
		return q, svc.Errorf(svc.KindSpecValidation, "eventstore: run status %q is not one of %v", q.Status, svc.RunStatuses)
	}
	switch {
	case q.Limit < 0 || q.Limit > svc.MaxRunPage:
		return q, svc.Errorf(svc.KindSpecValidation, "eventstore: run history limit %d: want 0 to %d", q.Limit, svc.MaxRunPage)
	case q.Limit == 0:
		q.Limit = svc.DefaultRunPage
	}
	return q, nil
}

// HistoryPage pages rows (the history's traces, any order) for q
// (checked): the memory store's way, and the definition the SQLite store's
// queries follow.
func HistoryPage(rows []*RunRow, q svc.RunHistoryQuery) svc.HistoryPage {
	excluded := make(map[string]bool, len(q.Exclude))
	for _, t := range q.Exclude {
		excluded[t] = true
	}
	var match []*RunRow
	for _, r := range rows {
		if !r.InHistory() || excluded[r.TraceID] || (q.Target != "" && r.Target != q.Target) ||
			(q.Status != "" && r.Status() != q.Status) || (q.Type != "" && r.Type() != q.Type) {
			continue
		}
		match = append(match, r)
	}
	slices.SortFunc(match, func(a, b *RunRow) int {
		return cmp.Or(cmp.Compare(b.FirstUS, a.FirstUS), cmp.Compare(b.TraceID, a.TraceID))
	})
	page := svc.HistoryPage{Runs: []svc.HistoryRun{}, Total: int64(len(match))}
	for _, r := range match {
		if len(page.Runs) == q.Limit {
			break
		}
		if b := q.Before; b != nil {
			us := b.At.UnixMicro()
			if r.FirstUS > us || (r.FirstUS == us && r.TraceID >= b.TraceID) {
				continue
			}
		}
		page.Runs = append(page.Runs, r.HistoryRun())
	}
	return page
}
