package svc

import (
	"context"
	"encoding/json"
	"iter"
	"math"
	"slices"
	"sync"
	"time"
)

// This file holds the vocabulary of the observation side: live event
// subscriptions (GET /events/stream), the event store's read-only rollups
// (GET /events, /usage, /tools, /runtime/stats, /runs/{trace_id}/tree), the
// run listing (GET /runs) and the tool catalog (GET /tools without
// group_by). The HTTP server talks to all of them through these interfaces
// only.

// EventFilter selects events of a live subscription. Zero fields do not
// filter; several EventTypes match any of them.
type EventFilter struct {
	EventTypes []EventType
	Agent      string
	// Deltas lets agent_delta events through (GET /events/stream?deltas=true);
	// without it a subscriber never sees them, whatever EventTypes says, so
	// that a fast model's fragments flood only who asked for them.
	Deltas bool
}

// Match reports whether ev passes f.
func (f EventFilter) Match(ev *RuntimeEvent) bool {
	if f.Agent != "" && ev.AgentName != f.Agent {
		return false
	}
	if ev.EventType == EventAgentDelta {
		return f.Deltas && (len(f.EventTypes) == 0 || slices.Contains(f.EventTypes, EventAgentDelta))
	}
	if len(f.EventTypes) == 0 {
		return true
	}
	for _, t := range f.EventTypes {
		if t == ev.EventType {
			return true
		}
	}
	return false
}

// EventSubscription is one live subscriber's feed. The subscriber closes it
// when it goes away (an HTTP client disconnecting); that stops whatever
// feeds it.
type EventSubscription interface {
	// Events delivers the matching events in emit order; it is closed when
	// the subscription ends (Close, or the emitter shutting down).
	Events() <-chan RuntimeEvent
	// Dropped is how many matching events were dropped because the
	// subscriber did not keep up.
	Dropped() uint64
	// Close ends the subscription; it is idempotent.
	Close() error
}

// EventSubscriber hands out live subscriptions to the runtime's events:
// the SSE emitter implements it.
type EventSubscriber interface {
	Subscribe(ctx context.Context, f EventFilter) (EventSubscription, error)
	// HeartbeatInterval is how long a stream may stay idle before the
	// server writes a heartbeat.
	HeartbeatInterval() time.Duration
}

// EncodedEvent is an emitted event with its JSON encoding
// (RuntimeEvent.MarshalJSON), computed at most once, by the first reader
// that asks, and shared by every other: a thousand subscribers of one
// event cost one encoding, not a thousand. Neither Event nor the bytes
// JSON returns may be modified.
type EncodedEvent struct {
	Event RuntimeEvent

	once sync.Once
	data []byte
	err  error
}

// NewEncodedEvent returns ev, to be encoded on first use.
func NewEncodedEvent(ev RuntimeEvent) *EncodedEvent { return &EncodedEvent{Event: ev} }

// JSON is the event's JSON encoding, the same for every caller (the same
// backing array): callers must not modify it. It is safe for concurrent
// use.
func (e *EncodedEvent) JSON() ([]byte, error) {
	e.once.Do(func() { e.data, e.err = e.Event.MarshalJSON() })
	return e.data, e.err
}

// EncodedEventSubscription is a live subscription that delivers each
// event with its shared encoding (EncodedEventSubscriber). Its reader
// takes events with Next when told to by the function given to Notify,
// instead of waiting on a channel: a channel made to the queue's bound
// cost each of thousands of stalled subscribers its whole array, and
// the callback lets a reader wait in whatever it waits on already (the
// HTTP server's event streams wait in their connection's read).
type EncodedEventSubscription interface {
	// Next takes the oldest matching event waiting, in emit order; nil
	// when none waits. ended is true once the subscription has ended
	// and no event waits: Next will never return another.
	Next() (ev *EncodedEvent, ended bool)
	// Notify sets f, which is called each time an event arrives while
	// none waits, and once when the subscription ends; at once if
	// either has already happened. f runs on the subscription's
	// goroutines and must return quickly, without waiting. The reader
	// calls Next until it returns nil after each call of f. Set it once,
	// before the first Next.
	Notify(f func())
	// Dropped is how many matching events were dropped because the
	// subscriber did not keep up.
	Dropped() uint64
	// Close ends the subscription; it is idempotent.
	Close() error
}

// EncodedEventSubscriber is an EventSubscriber that can also hand out
// subscriptions whose events carry their encoding, computed once for all
// subscribers (the SSE emitter implements it). The HTTP server's
// /events/stream uses it when the subscriber has it.
type EncodedEventSubscriber interface {
	EventSubscriber
	SubscribeEncoded(ctx context.Context, f EventFilter) (EncodedEventSubscription, error)
}

// Event query limits.
const (
	// DefaultEventLimit is the number of events an EventQuery with Limit 0
	// returns.
	DefaultEventLimit = 100
	// MaxEventLimit is the largest Limit an EventQuery accepts.
	MaxEventLimit = 100_000
)

// EventQuery selects stored events. Zero fields do not filter.
type EventQuery struct {
	// Limit caps the result: 0 means DefaultEventLimit; negative or above
	// MaxEventLimit is a SpecValidationError.
	Limit int
	// Since (inclusive) and Until (exclusive) bound the event timestamps.
	Since, Until time.Time
	TraceID      string
	EventType    EventType
}

// Usage group_by values.
const (
	GroupByNone  = "none"
	GroupByAgent = "agent"
	GroupByTrace = "trace"
	GroupByModel = "model"
	// GroupByTool and GroupByAgentTool are the /tools groupings.
	GroupByTool      = "tool"
	GroupByAgentTool = "agent_tool"
	// UnknownModel is the /usage?group_by=model key of agent_completed
	// events that name no model.
	UnknownModel = "unknown"
)

// UsageTotals sums agent_completed events.
type UsageTotals struct {
	TokensUsed int64 `json:"tokens_used"`
	// CachedTokens sums the events' cached_tokens: the part of TokensUsed
	// the model calls read from the providers' prompt caches. An event
	// without it (no cache hit, or written before it existed) counts 0.
	CachedTokens int64 `json:"cached_tokens"`
	// CostUSD sums the events' cost_usd, in US dollars. Stores add the
	// costs in whole nano-dollars (see CostNanos), so every grouping of the
	// same events sums to the same total and every store agrees to the
	// last bit; an event without cost_usd (written before it existed)
	// counts as 0.
	CostUSD float64 `json:"cost_usd"`
	// Invocations is the number of agent_completed events summed.
	Invocations int64 `json:"invocations"`
}

// CostNanos is usd in whole nano-dollars (rounded), the unit the event
// stores sum agent_completed's cost_usd in: integer sums are exact and do
// not depend on the order of addition. A negative, non-finite or absurd
// (above a million dollars for one invocation) cost counts as 0, so sums of
// millions of them stay far from overflow.
func CostNanos(usd float64) int64 {
	n := math.Round(usd * 1e9)
	if !(n > 0) || n > 1e15 {
		return 0
	}
	return int64(n)
}

// CostFromNanos is the dollar figure of a sum of CostNanos.
func CostFromNanos(n int64) float64 { return float64(n) / 1e9 }

// Usage is the answer of GET /usage: the runtime-wide total and, unless
// GroupBy is "none", the totals per key.
type Usage struct {
	GroupBy string                 `json:"group_by"`
	Total   UsageTotals            `json:"total"`
	Groups  map[string]UsageTotals `json:"groups,omitempty"`
}

// ToolStats is one row of GET /tools?group_by=: tool_call_completed and
// tool_call_failed both count as calls, only failed ones as failures;
// the latencies are over both.
type ToolStats struct {
	Tool     string  `json:"tool"`
	Agent    string  `json:"agent,omitempty"` // group_by=agent_tool only
	Calls    int64   `json:"calls"`
	Failures int64   `json:"failures"`
	P50MS    float64 `json:"p50_ms"`
	P95MS    float64 `json:"p95_ms"`
	P99MS    float64 `json:"p99_ms"`
	AvgMS    float64 `json:"avg_ms"`
}

// ToolUsage is the answer of GET /tools?group_by=.
type ToolUsage struct {
	GroupBy string      `json:"group_by"`
	Rows    []ToolStats `json:"rows"`
}

// Worker health, derived from a worker's latest worker_heartbeat.
const (
	WorkerHealthy = "healthy"
	WorkerStale   = "stale"
	WorkerDown    = "down"

	WorkerHealthyWithin = 90 * time.Second
	WorkerStaleWithin   = 300 * time.Second
)

// WorkerHealth is the status of a worker whose latest heartbeat was at
// last: healthy under 90 s, stale under 300 s, down otherwise or once it
// sent worker_stopped.
func WorkerHealth(last time.Time, stopped bool, now time.Time) string {
	return WorkerThresholds{}.Status(last, stopped, now)
}

// WorkerThresholds are the ages of a worker's latest sign of life at which a
// serve node calls it stale and down. The zero value is the spec's: stale
// from WorkerHealthyWithin (90 s), down from WorkerStaleWithin (300 s).
// `svc serve --worker-stale-after/--worker-down-after` set them, for a fleet
// whose heartbeat interval is not the default (and tests, in seconds).
type WorkerThresholds struct {
	Stale time.Duration
	Down  time.Duration
}

// WithDefaults fills in the zero fields.
func (th WorkerThresholds) WithDefaults() WorkerThresholds {
	if th.Stale <= 0 {
		th.Stale = WorkerHealthyWithin
	}
	if th.Down <= 0 {
		th.Down = WorkerStaleWithin
	}
	return th
}

// Status is the health of a worker last heard from at last: healthy while
// younger than Stale, stale while younger than Down, down after that or once
// it sent worker_stopped.
func (th WorkerThresholds) Status(last time.Time, stopped bool, now time.Time) string {
	th = th.WithDefaults()
	age := now.Sub(last)
	switch {
	case stopped:
		return WorkerDown
	case age < th.Stale:
		return WorkerHealthy
	case age < th.Down:
		return WorkerStale
	}
	return WorkerDown
}

// StatsHeader are the headline meters of GET /runtime/stats.
type StatsHeader struct {
	Events          int64 `json:"events"`
	Traces          int64 `json:"traces"`
	AgentsStarted   int64 `json:"agents_spawned"`
	AgentsCompleted int64 `json:"agents_completed"`
	AgentsFailed    int64 `json:"agents_failed"`
	ToolCalls       int64 `json:"tool_calls"`
	ToolFailures    int64 `json:"tool_failures"`
	TokensUsed      int64 `json:"tokens_used"`
	// ErrorRate is agents_failed / (agents_completed + agents_failed).
	ErrorRate float64 `json:"error_rate"`
	// RunsInFlight is the number of runs executing now, live from the
	// backend (an InFlightReporter, the runtime), not from the event
	// store: agents_spawned - agents_completed - agents_failed is not it
	// (a refused invocation fails without being spawned; a process that
	// stopped mid-run left spawns that never end). 0 when the backend
	// reports none.
	RunsInFlight int64 `json:"runs_in_flight"`
}

// InFlightReporter is implemented by a backend that executes runs (the
// runtime): GET /runtime/stats reports its RunsInFlight in the header,
// and is served even without an event store.
type InFlightReporter interface {
	// RunsInFlight is the number of runs executing now in this process:
	// each run, gather, group run and submitted run once, and each child
	// run an agent spawns or delegates to, including those dispatched to
	// workers and not yet answered.
	RunsInFlight() int64
}

// BurnRate is the token burn over the last Window.
type BurnRate struct {
	WindowSeconds   float64 `json:"window_seconds"`
	Tokens          int64   `json:"tokens"`
	TokensPerMinute float64 `json:"tokens_per_minute"`
}

// ErrorGroup gathers agent_failed and tool_call_failed events by error type.
type ErrorGroup struct {
	Error    string    `json:"error"` // the error kind's name, or the message's type
	Count    int64     `json:"count"`
	LastSeen time.Time `json:"last_seen"`
	// Sample is the message of the latest event of the group.
	Sample string   `json:"sample"`
	Agents []string `json:"agents"`
}

// WorkerStatus is one worker of the fleet, from its latest heartbeat.
type WorkerStatus struct {
	RuntimeID     string    `json:"runtime_id"`
	Status        string    `json:"status"` // WorkerHealthy, WorkerStale or WorkerDown
	LastHeartbeat time.Time `json:"last_heartbeat"`
	InFlight      int64     `json:"in_flight"`
	Concurrency   int64     `json:"concurrency_cap"`
	// HeartbeatSeconds is the worker's heartbeat period, as its
	// worker_started said (a serve node that heard it); 0 when unknown.
	// The dashboard says "no heartbeat for N s" once a period has passed
	// without one.
	HeartbeatSeconds float64  `json:"heartbeat_seconds,omitempty"`
	Agents           []string `json:"agent_subscriptions"`
	BrokerScheme     string   `json:"broker_scheme"`
	// Stopped is true once the worker sent worker_stopped (it is down at
	// once, however recent its last heartbeat).
	Stopped bool `json:"worker_stopped"`
}

// FleetReader is what a serve node knows of the fleet's workers, live from
// the worker lifecycle events on svc.workers (dispatch.Publisher is one):
// one WorkerStatus per runtime id, health by the node's WorkerThresholds,
// sorted by runtime id. GET /runtime/stats lists them, ahead of what the
// event store remembers.
type FleetReader interface {
	Workers(ctx context.Context) ([]WorkerStatus, error)
}

// RedeliveryCounter counts the redelivered tasks a serve node saw answered
// (dispatch.Publisher is one); GET /runtime/stats reports it as
// redeliveries.
type RedeliveryCounter interface {
	Redeliveries() int64
}

// ServeNode is a live serve node of a shared run store: one whose lease is
// current (see SharedRunStore).
type ServeNode struct {
	NodeID string `json:"node_id"`
	// LastRenewal is when the node last renewed its lease.
	LastRenewal time.Time `json:"last_renewal"`
	// Self marks the node that answered.
	Self bool `json:"self"`
}

// NodeLister lists the live serve nodes of a shared run store, sorted by
// node id; GET /runtime/stats shows them when the backend is one.
type NodeLister interface {
	ServeNodes(ctx context.Context) ([]ServeNode, error)
}

// ToolServerStatus describes one MCP tool server of the runtime.
type ToolServerStatus struct {
	Name      string `json:"name"`
	Agent     string `json:"agent"`
	Transport string `json:"transport"`
	// State is "stopped" (not started yet), "starting", "ready" or
	// "restarting".
	State    string   `json:"state"`
	Tools    []string `json:"tools"`
	Restarts int64    `json:"restarts"`
	// PID is the process id of a running stdio server, 0 otherwise.
	PID int `json:"pid,omitempty"`
	// LastError is the error of the last failed start, if any.
	LastError string `json:"last_error,omitempty"`
}

// RuntimeStats is the composite dashboard of GET /runtime/stats. The event
// store fills all but ToolServers, which the runtime adds.
type RuntimeStats struct {
	GeneratedAt time.Time   `json:"generated_at"`
	Header      StatsHeader `json:"header"`
	BurnRate    BurnRate    `json:"burn_rate"`
	// Rejections counts rejections by error kind name, as the
	// svc.rejections metric does by error.type: budget_exceeded events
	// under BudgetExceededError, depth_limit_exceeded under
	// DepthLimitError, agent_failed under the kind its reason carries.
	Rejections  map[string]int64   `json:"rejections"`
	ErrorGroups []ErrorGroup       `json:"error_groups"`
	ToolServers []ToolServerStatus `json:"tool_servers"`
	Workers     []WorkerStatus     `json:"workers"`
	// Redeliveries counts the results this serve node received for
	// tasks the broker had delivered more than once: a worker died or
	// stalled with them, and after the broker's ack wait (svc serve
	// --ack-wait) another worker ran them. 0 without a broker.
	Redeliveries int64 `json:"redeliveries"`
	// Nodes are the live serve nodes sharing this node's run store (a
	// svc.NodeLister's, Redis), this one included; absent with a store of
	// one node.
	Nodes []ServeNode `json:"nodes,omitempty"`
	// TokenBudget is the runtime's token budget (Options.TokenBudget) as
	// it stands; absent when the runtime has none or the backend keeps no
	// budget (svc.BudgetKeeper).
	TokenBudget *BudgetStatus `json:"token_budget,omitempty"`
	// Stuck are the calls runs stopped waiting for: filled from the
	// backend (a StuckReporter), not the event store.
	Stuck StuckStats `json:"stuck"`
	// RateLimits are the limits the model calls wait under (a
	// RateLimitReporter's), by name; absent when none has been used.
	RateLimits []RateLimitStatus `json:"rate_limits,omitempty"`
	// Keys is the use of each API key (svc serve --api-keys): shown to
	// admin keys only, absent otherwise.
	Keys []KeyUse `json:"keys,omitempty"`
}

// RateLimitStatus is the state of one limit on the calls to model
// providers: a declared one (rate_limits), a model's cap
// (max_concurrent_requests) or the learned one of a provider key.
type RateLimitStatus struct {
	Name  string    `json:"name"`
	Limit RateLimit `json:"limit"`
	// Learned is the learned window of calls at once (a learned limit's).
	Learned float64 `json:"learned_concurrency,omitempty"`
	// Queued and InFlight are the calls waiting and running now.
	Queued   int `json:"queued"`
	InFlight int `json:"in_flight"`
	// Calls, Tokens, Throttled (429s received) and Left (calls whose
	// run ended while they waited), since the start.
	Calls     uint64 `json:"calls"`
	Tokens    uint64 `json:"tokens"`
	Throttled uint64 `json:"throttled"`
	Left      uint64 `json:"left_queue"`
	// CallsPerMinute and TokensPerMinute are what went in the last
	// minute, against Limit.
	CallsPerMinute  uint64 `json:"calls_last_minute"`
	TokensPerMinute uint64 `json:"tokens_last_minute"`
	// WaitP50Ms and WaitP99Ms are over the last waits (up to 1,024).
	WaitP50Ms float64 `json:"wait_p50_ms"`
	WaitP99Ms float64 `json:"wait_p99_ms"`
	// PausedMs is how long the limit stays paused by a 429.
	PausedMs float64 `json:"paused_ms,omitempty"`
	// Shared names the store the fleet shares the limit through ("redis",
	// "nats"); "" when the limit is this process's alone.
	// SharedFallback: the store failed lately, and the limit runs on this
	// process's share of it (the limit over the nodes last counted).
	Shared         string `json:"shared,omitempty"`
	SharedFallback bool   `json:"shared_fallback,omitempty"`
}

// RateLimitReporter is implemented by a backend whose model calls wait
// under rate limits (the runtime): GET /runtime/stats reports them.
type RateLimitReporter interface {
	RateLimits() []RateLimitStatus
}

// StuckStats counts the calls (tool, model, hook) that runs abandoned: a
// run that reaches its timeout, or is cancelled, answers at once with
// TimeoutError or CancelledError even when a call inside it never
// returns; that call's goroutine is counted here until it does return.
type StuckStats struct {
	Count int         `json:"count"`
	Calls []StuckCall `json:"calls"`
}

// MarshalJSON encodes no calls as [], never null: whoever fills
// RuntimeStats (an event store has no stuck calls to give) need not.
func (s StuckStats) MarshalJSON() ([]byte, error) {
	type plain StuckStats
	if s.Calls == nil {
		s.Calls = []StuckCall{}
	}
	return json.Marshal(plain(s))
}

// StuckCall is one abandoned call still running.
type StuckCall struct {
	// Kind is "tool", "model", "hook", "tool_source", or "agent" when the
	// invocation was in none of those (its own code, or a remote
	// dispatch).
	Kind string `json:"kind"`
	// Name is the tool's, the model's ("provider:name"), the hook's
	// ("pre_process", "post_process") or the agent's name.
	Name    string `json:"name"`
	Agent   string `json:"agent"`
	TaskID  string `json:"task_id"`
	TraceID string `json:"trace_id"`
	// Reason is why the run stopped waiting: "timeout", "cancelled" or
	// "shutting_down".
	Reason      string    `json:"reason"`
	AbandonedAt time.Time `json:"abandoned_at"`
}

// String names the call as logs and shutdown errors do:
// "tool write_file (agent writer, task T, trace R)".
func (c StuckCall) String() string {
	return c.Kind + " " + c.Name + " (agent " + c.Agent + ", task " + c.TaskID + ", trace " + c.TraceID + ")"
}

// StuckReporter is implemented by a backend that abandons stuck calls
// (the runtime): GET /runtime/stats reports them.
type StuckReporter interface {
	Stuck() StuckStats
}

// BudgetStatus is the state of the runtime's token budget.
type BudgetStatus struct {
	// Limit is Options.TokenBudget.
	Limit int64 `json:"limit"`
	// Used is the tokens charged since the start or the last reset.
	Used int64 `json:"used"`
	// Reserved is what the model calls in flight set aside at their
	// pre-check and have not charged yet.
	Reserved int64 `json:"reserved"`
	// Remaining is Limit - Used - Reserved, never below 0: what a new
	// model call may reserve.
	Remaining int64 `json:"remaining"`
}

// BudgetKeeper is implemented by a backend that keeps the runtime's token
// budget (the in-process runtime, and the HTTP client for a server's):
// GET /runtime/budget and /runtime/stats show it, POST
// /runtime/budget/reset resets it. Both fail with a RegistryError (404)
// when the runtime has no budget (token_budget 0).
type BudgetKeeper interface {
	// TokenBudget returns the budget's state.
	TokenBudget(ctx context.Context) (BudgetStatus, error)
	// ResetTokenBudget sets the tokens used back to 0, so runs are
	// admitted again, and returns the state after the reset; the
	// reservations of model calls in flight stay, and they charge after
	// it.
	ResetTokenBudget(ctx context.Context) (BudgetStatus, error)
}

// ErrNoTokenBudget is the error of a BudgetKeeper whose runtime has no
// token budget.
var ErrNoTokenBudget = &Error{Kind: KindRegistry, Message: "this runtime has no token budget (token_budget is 0)"}

// EventTree is one run's events as a tree (GET /runs/{trace_id}/tree): the
// run at the root, its agent invocations below, their tool calls below
// those, and child runs (events whose parent_trace_id is this trace) below
// the invocation that spawned them.
type EventTree struct {
	TraceID string    `json:"trace_id"`
	Root    *TreeNode `json:"root"`
}

// TreeNode is one node of an EventTree.
type TreeNode struct {
	// Kind is "run", "group", "agent", "tool" or "event" (a lone event such
	// as budget_exceeded).
	Kind    string     `json:"kind"`
	Name    string     `json:"name"`
	TraceID string     `json:"trace_id"`
	TaskID  *string    `json:"task_id"`
	Status  string     `json:"status"` // "running", "completed", "failed"
	Start   time.Time  `json:"start"`
	End     *time.Time `json:"end"`
	// Events are the events that make up this node, oldest first.
	Events   []RuntimeEvent `json:"events"`
	Children []*TreeNode    `json:"children"`
}

// EventReader is the read side of an event store: the rollup routes.
// Every method is read-only and computed on demand.
type EventReader interface {
	// Events returns the events matching q, newest first.
	Events(ctx context.Context, q EventQuery) ([]RuntimeEvent, error)
	// Usage sums agent_completed tokens_used, grouped by groupBy (one of
	// GroupByNone, GroupByAgent, GroupByTrace, GroupByModel; "" means
	// none). Another groupBy is a SpecValidationError.
	Usage(ctx context.Context, groupBy string) (Usage, error)
	// ToolUsage computes per-tool rows grouped by GroupByTool or
	// GroupByAgentTool; another groupBy is a SpecValidationError.
	ToolUsage(ctx context.Context, groupBy string) (ToolUsage, error)
	// RuntimeStats computes the dashboard as of now (ToolServers empty).
	RuntimeStats(ctx context.Context, now time.Time) (RuntimeStats, error)
	// Tree returns the tree of one trace; an unknown trace is a
	// RegistryError.
	Tree(ctx context.Context, traceID string) (EventTree, error)
}

// ToolDescriptor describes a registered tool (GET /tools without group_by).
type ToolDescriptor struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Access      string          `json:"access"`
	// Source is "function", "builtin" or "mcp".
	Source string `json:"source"`
	// Server names the MCP server of an "mcp" tool.
	Server string `json:"server,omitempty"`
	// Agents are the registered agents that have the tool, sorted.
	Agents []string `json:"agents"`
}

// ToolCatalog is implemented by a backend that can describe its tools and
// tool servers.
type ToolCatalog interface {
	Tools(ctx context.Context) ([]ToolDescriptor, error)
	ToolServers(ctx context.Context) ([]ToolServerStatus, error)
}

// RunFilter selects runs for GET /runs. Zero fields do not filter.
type RunFilter struct {
	State RunState
	// Tenant, when not empty, lists the runs of that tenant only
	// (RunRecord.Tenant).
	Tenant string
	// Limit caps a page: 0 means 50; above 1000 is a SpecValidationError.
	Limit int
	// Cursor is a page's NextCursor, to read the page after it.
	Cursor string
}

// RunFilter limits.
const (
	DefaultRunPage = 50
	MaxRunPage     = 1000
)

// RunSummary is one row of GET /runs.
type RunSummary struct {
	RunID  string     `json:"run_id"`
	Target string     `json:"target"`
	Kind   TargetKind `json:"kind"`
	State  RunState   `json:"state"`
	Reason string     `json:"reason,omitempty"`
	// TraceID is the run's trace id (see RunStatus.TraceID); absent for a
	// run stored by an earlier version.
	TraceID string `json:"trace_id,omitempty"`
	// Tenant is the run's tenant (RunStatus.Tenant); absent for the
	// default tenant.
	Tenant    string       `json:"tenant,omitempty"`
	Progress  *RunProgress `json:"progress"`
	CreatedAt time.Time    `json:"created_at"`
	UpdatedAt time.Time    `json:"updated_at"`
	// Type is how the request was made (RunTypeRun, RunTypeGather,
	// RunTypeGroup, RunTypeSubmitted) and Status where it stands (one of
	// RunStatuses); both are set by GET /runs when it lists the event
	// store's runs beside the submitted ones (see RunHistoryReader). A row
	// that was not submitted has an empty RunID (it has no status or
	// result route; its TraceID keys its tree), State running, completed
	// or failed, and no Progress.
	Type   string `json:"type,omitempty"`
	Status string `json:"status,omitempty"`
	// Events and TokensUsed are the run's stored events and the tokens of
	// their agent_completed events (rows from the event store).
	Events     int64 `json:"events,omitempty"`
	TokensUsed int64 `json:"tokens_used,omitempty"`
}

// RunPage is a page of runs, newest first.
type RunPage struct {
	Runs []RunSummary `json:"runs"`
	// NextCursor reads the next (older) page; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
	// Total is how many runs match the filter in all pages; set when GET
	// /runs lists the event store's runs too.
	Total *int64 `json:"total,omitempty"`
}

// RunLister lists runs newest first; run stores and backends implement it.
type RunLister interface {
	ListRuns(ctx context.Context, f RunFilter) (RunPage, error)
}

// Observer is the observation surface both clients share: the spec's
// usage(group_by), runtime_stats(), list_tools() and stream_events().
type Observer interface {
	Usage(ctx context.Context, groupBy string) (Usage, error)
	RuntimeStats(ctx context.Context) (RuntimeStats, error)
	ListTools(ctx context.Context) ([]ToolDescriptor, error)
	// StreamEvents follows GET /events/stream until ctx ends; a yielded
	// error ends the stream.
	StreamEvents(ctx context.Context, f EventFilter) iter.Seq2[RuntimeEvent, error]
}
