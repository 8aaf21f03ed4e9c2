package svc

import (
	"context"
	"time"
)

// Run history (GET /runs): one row per top-level request, whether it was
// a synchronous run, a gather, a group run or a submitted run. Submitted
// runs come from the run store (svc.RunLister); the others only exist as
// their events, so an event store that implements RunHistoryReader lists
// them.

// RunSummary.Type values: how the request was made.
const (
	RunTypeRun       = "run"       // POST /agents/{name}/run
	RunTypeGather    = "gather"    // POST /agents/{name}/gather
	RunTypeGroup     = "group"     // POST /groups/{name}/run
	RunTypeSubmitted = "submitted" // POST /submit
)

// RunSummary.Status values, the history's filter (GET /runs?status=).
// A run that was not submitted has one of the first five; a submitted
// run has its state's: pending is spawned, waiting is waiting, cancelled
// is cancelled, the others by name.
const (
	// RunStatusSpawned: started, and nothing but start events yet.
	RunStatusSpawned   = "spawned"
	RunStatusRunning   = "running"
	RunStatusCompleted = "completed"
	RunStatusFailed    = "failed"
	// RunStatusRejected: refused by a policy (budget, depth, spawn
	// cycle) before it completed anything.
	RunStatusRejected  = "rejected"
	RunStatusCancelled = "cancelled"
	// RunStatusWaiting: a submitted run waiting for a human (RunWaiting).
	RunStatusWaiting = "waiting"
)

// RunStatuses are the RunSummary.Status values, in the order the
// documentation lists them.
var RunStatuses = []string{RunStatusSpawned, RunStatusRunning, RunStatusWaiting, RunStatusCompleted, RunStatusFailed, RunStatusRejected, RunStatusCancelled}

// RunHistoryQuery selects rows of an event store's run history. Zero
// fields do not filter.
type RunHistoryQuery struct {
	// Status is one of RunStatuses (waiting and cancelled match nothing
	// here: only submitted runs wait or are cancelled).
	Status string
	// Target is the agent or group name the run was made against.
	Target string
	// Type is RunTypeRun, RunTypeGather or RunTypeGroup.
	Type string
	// Before reads the rows older than this position (the last row of the
	// previous page): rows are ordered by (StartedAt, TraceID), newest
	// first.
	Before *HistoryPos
	// Exclude leaves these trace ids out, rows and count: the traces of
	// submitted runs, which the run store lists.
	Exclude []string
	// Limit caps the rows: 0 means DefaultRunPage.
	Limit int
}

// HistoryPos is a place in the history's order.
type HistoryPos struct {
	At      time.Time
	TraceID string
}

// HistoryRun is one top-level trace of an event store: the events of one
// request, and of no parent trace.
type HistoryRun struct {
	TraceID string
	Type    string // RunTypeRun, RunTypeGather or RunTypeGroup
	// Target is the group's name for a group run, the agent's otherwise.
	Target string
	Status string
	// StartedAt and LastEventAt are the times of the trace's first and
	// latest event; Events how many it holds, TokensUsed the sum of its
	// agent_completed tokens.
	StartedAt   time.Time
	LastEventAt time.Time
	Events      int64
	TokensUsed  int64
}

// HistoryPage is a page of HistoryRun rows, newest first, and how many
// rows match the query in all (every page).
type HistoryPage struct {
	Runs  []HistoryRun
	Total int64
}

// RunHistoryReader is implemented by an event store that lists the
// top-level runs it holds events of (both of svc's do).
type RunHistoryReader interface {
	RunHistory(ctx context.Context, q RunHistoryQuery) (HistoryPage, error)
}

// Window bounds the events a windowed rollup reads: Since inclusive,
// Until exclusive, as EventQuery's; a zero bound does not bound.
type Window struct {
	Since, Until time.Time
}

// IsZero reports whether w bounds nothing.
func (w Window) IsZero() bool { return w.Since.IsZero() && w.Until.IsZero() }

// WindowedEventReader is implemented by an event store whose rollups can
// be restricted to a time window (both of svc's): the since and until of
// /usage, /tools and /runtime/stats. A zero Window gives what the
// unwindowed methods give.
type WindowedEventReader interface {
	UsageIn(ctx context.Context, groupBy string, w Window) (Usage, error)
	ToolUsageIn(ctx context.Context, groupBy string, w Window) (ToolUsage, error)
	// RuntimeStatsIn windows the counts, tokens, traces, rejections and
	// error groups; the burn rate stays the last BurnWindow before now and
	// the workers their latest state.
	RuntimeStatsIn(ctx context.Context, now time.Time, w Window) (RuntimeStats, error)
}
