// Package rollup is the read side every event store backend shares: the
// facts a rollup reads of an event, the definitions of Usage, ToolUsage,
// RuntimeStats and Tree, and the code that finishes them from what a
// backend gathers, so that every backend gives exactly the same answers
// for the same events.
package rollup

import (
	"cmp"
	"slices"
	"time"

	"github.com/svc-dev/svc"
)

// This file defines the rollups every store computes, and holds the code
// they share, so that for the same events they give exactly the same
// answers: the stores differ only in how they gather the sums, counts and
// ordered durations these functions finish.
//
// Definitions:
//   - Usage sums tokens_used of agent_completed events (a missing, negative
//     or non-numeric value counts as 0; a fractional one is truncated), and
//     their cached_tokens (read the same way as tokens_used), and
//     their cost_usd, each rounded to whole nano-dollars first
//     (svc.CostNanos; missing counts as 0), so the sums are exact whatever
//     their order.
//     The model key is the payload's "model", svc.UnknownModel when it is
//     missing or empty.
//   - ToolUsage: tool_call_completed and tool_call_failed are calls, only
//     failed ones failures. Latencies are over the calls whose duration_ms
//     is a non-negative number, rounded to whole microseconds first;
//     Percentiles use the nearest-rank method (the smallest duration with
//     at least p% of the durations at or below it: rank ceil(p·n/100)), so
//     every percentile is a duration that was measured. A row with no
//     durations has zero latencies. Rows are sorted by tool, then agent.
//   - RuntimeStats: see Stats.
//   - Tree: see tree.go.

// BurnWindow is the window of RuntimeStats' token burn rate: the tokens of
// agent_completed events in (now-BurnWindow, now].
const BurnWindow = 5 * time.Minute

// UsageGroup checks a Usage group_by; "" means none.
func UsageGroup(groupBy string) (string, error) {
	switch groupBy {
	case "", svc.GroupByNone:
		return svc.GroupByNone, nil
	case svc.GroupByAgent, svc.GroupByTrace, svc.GroupByModel:
		return groupBy, nil
	}
	return "", svc.Errorf(svc.KindSpecValidation,
		"eventstore: usage group_by %q: want agent, trace, model or none", groupBy)
}

// ToolGroup checks a ToolUsage group_by.
func ToolGroup(groupBy string) error {
	switch groupBy {
	case svc.GroupByTool, svc.GroupByAgentTool:
		return nil
	}
	return svc.Errorf(svc.KindSpecValidation, "eventstore: tools group_by %q: want tool or agent_tool", groupBy)
}

// UsageKey is the group key of an agent_completed event with this agent,
// trace and model fact.
func UsageKey(groupBy, agent, trace, model string) string {
	switch groupBy {
	case svc.GroupByAgent:
		return agent
	case svc.GroupByTrace:
		return trace
	}
	if model == "" {
		return svc.UnknownModel
	}
	return model
}

// UsageAcc gathers a Usage answer: its costs are summed in nano-dollars
// and turned into dollars once, at the end.
type UsageAcc struct {
	u          svc.Usage
	totalNanos int64
	nanos      map[string]int64
}

// NewUsage returns an empty answer for groupBy (already checked).
func NewUsage(groupBy string) *UsageAcc {
	a := &UsageAcc{u: svc.Usage{GroupBy: groupBy}}
	if groupBy != svc.GroupByNone {
		a.u.Groups = map[string]svc.UsageTotals{}
		a.nanos = map[string]int64{}
	}
	return a
}

// Add counts n invocations with tokens, cached tokens and cost (in
// nano-dollars) under key (ignored when ungrouped).
func (a *UsageAcc) Add(key string, n, tokens, cached, costNanos int64) {
	u := &a.u
	u.Total.Invocations += n
	u.Total.TokensUsed += tokens
	u.Total.CachedTokens += cached
	a.totalNanos += costNanos
	if u.Groups != nil {
		g := u.Groups[key]
		g.Invocations += n
		g.TokensUsed += tokens
		g.CachedTokens += cached
		u.Groups[key] = g
		a.nanos[key] += costNanos
	}
}

// result is the answer.
func (a *UsageAcc) Result() svc.Usage {
	u := a.u
	u.Total.CostUSD = svc.CostFromNanos(a.totalNanos)
	for k, n := range a.nanos {
		g := u.Groups[k]
		g.CostUSD = svc.CostFromNanos(n)
		u.Groups[k] = g
	}
	return u
}

// ToolAgg is one ToolUsage row before its latencies are in milliseconds.
type ToolAgg struct {
	Tool, Agent     string
	Calls, Failures int64
	// n durations summing to sumUS; p50, p95 and p99 are their
	// nearest-rank Percentiles.
	N, SumUS      int64
	p50, p95, p99 int64
}

// Percentiles are the ones a ToolStats row reports, in percent.
var Percentiles = [3]int64{50, 95, 99}

// rank is the 1-based nearest rank of the pct-th percentile of n values
// (n > 0), in integers so both stores pick the same value.
func Rank(pct, n int64) int64 { return max(1, (pct*n+99)/100) }

// SetPercentiles fills a's Percentiles from its sorted durations.
func (a *ToolAgg) SetPercentiles(sorted []int64) {
	a.N = int64(len(sorted))
	if a.N == 0 {
		return
	}
	for i, pct := range Percentiles {
		*a.Percentile(i) = sorted[Rank(pct, a.N)-1]
	}
}

// percentile is where the i-th of Percentiles goes.
func (a *ToolAgg) Percentile(i int) *int64 { return [...]*int64{&a.p50, &a.p95, &a.p99}[i] }

func (a *ToolAgg) stats() svc.ToolStats {
	s := svc.ToolStats{Tool: a.Tool, Agent: a.Agent, Calls: a.Calls, Failures: a.Failures}
	if a.N > 0 {
		s.P50MS, s.P95MS, s.P99MS = msOf(a.p50), msOf(a.p95), msOf(a.p99)
		s.AvgMS = float64(a.SumUS) / float64(a.N) / 1000
	}
	return s
}

func msOf(us int64) float64 { return float64(us) / 1000 }

// ToolRows sorts aggs into the answer.
func ToolRows(groupBy string, aggs []*ToolAgg) svc.ToolUsage {
	slices.SortFunc(aggs, func(a, b *ToolAgg) int {
		return cmp.Or(cmp.Compare(a.Tool, b.Tool), cmp.Compare(a.Agent, b.Agent))
	})
	rows := make([]svc.ToolStats, len(aggs))
	for i, a := range aggs {
		rows[i] = a.stats()
	}
	return svc.ToolUsage{GroupBy: groupBy, Rows: rows}
}

// Pos orders stored events: by timestamp, then write order (the SQLite
// rowid, the memory store's sequence number).
type Pos struct{ US, Seq int64 }

func (p Pos) After(q Pos) bool { return p.US > q.US || (p.US == q.US && p.Seq > q.Seq) }

// Stats gathers RuntimeStats. The stores feed it their sums and the
// few events it needs whole (failures and worker lifecycle events); it
// works out the rest.
//
//   - Header: Events counts every stored event; Traces the distinct
//     non-empty trace ids of events other than worker lifecycle events
//     (whose trace id is the runtime id); the agent and tool meters count
//     their event types; TokensUsed is Usage's total; ErrorRate is
//     agents_failed / (agents_completed + agents_failed), 0 with neither.
//   - BurnRate: tokens of agent_completed events in (now-BurnWindow, now],
//     and that per minute.
//   - Rejections: keyed by error kind only, as the svc.rejections metric
//     counts by error.type: budget_exceeded events count under
//     "BudgetExceededError", depth_limit_exceeded under "DepthLimitError",
//     every agent_failed under its kind (svc.FailureKind). Kinds with no
//     events are absent.
//   - ErrorGroups: agent_failed and tool_call_failed by error kind, with
//     the latest event's time and "error" text, and the agents involved
//     (sorted); most frequent first, then most recent, then by name.
//   - Workers: one per runtime id with a worker_heartbeat, from the latest
//     one; down when a worker_stopped of that runtime came after it (in
//     store order), else by svc.WorkerHealth; sorted by runtime id.
type Stats struct {
	now        time.Time
	Header     svc.StatsHeader
	BurnTokens int64
	rejections map[string]int64
	errs       map[string]*errAcc
	hbs        map[string]workerEvent // latest heartbeat per runtime
	stops      map[string]Pos         // latest worker_stopped per runtime
}

type errAcc struct {
	count  int64
	seen   bool
	last   Pos
	sample string
	agents map[string]struct{}
}

type workerEvent struct {
	At Pos
	Ev svc.RuntimeEvent
}

func NewStats(now time.Time) *Stats {
	return &Stats{
		now: now, rejections: map[string]int64{}, errs: map[string]*errAcc{},
		hbs: map[string]workerEvent{}, stops: map[string]Pos{},
	}
}

// count adds n events of type t to the header and rejections.
func (s *Stats) Count(t svc.EventType, n int64) {
	h := &s.Header
	h.Events += n
	switch t {
	case svc.EventAgentSpawned:
		h.AgentsStarted += n
	case svc.EventAgentCompleted:
		h.AgentsCompleted += n
	case svc.EventAgentFailed:
		h.AgentsFailed += n
	case svc.EventToolCallCompleted:
		h.ToolCalls += n
	case svc.EventToolCallFailed:
		h.ToolCalls += n
		h.ToolFailures += n
	case svc.EventBudgetExceeded:
		s.rejections[string(svc.KindBudgetExceeded)] += n
	case svc.EventDepthLimitExceeded:
		s.rejections[string(svc.KindDepthLimit)] += n
	}
}

// failures counts n failure events of type t and error kind.
func (s *Stats) Failures(t svc.EventType, kind string, n int64) {
	if t == svc.EventAgentFailed {
		s.rejections[kind] += n
	}
	s.errGroup(kind).count += n
}

// latest offers a failure event of kind at position at with this "error"
// text: the group keeps the latest offered.
func (s *Stats) Latest(kind string, at Pos, sample string) {
	e := s.errGroup(kind)
	if !e.seen || at.After(e.last) {
		e.seen, e.last, e.sample = true, at, sample
	}
}

// agent notes that agent had a failure of kind.
func (s *Stats) Agent(kind, agent string) { s.errGroup(kind).agents[agent] = struct{}{} }

func (s *Stats) errGroup(kind string) *errAcc {
	e := s.errs[kind]
	if e == nil {
		e = &errAcc{agents: map[string]struct{}{}}
		s.errs[kind] = e
	}
	return e
}

// worker records a worker_heartbeat or worker_stopped event.
func (s *Stats) Worker(runtime string, at Pos, ev svc.RuntimeEvent) {
	switch ev.EventType {
	case svc.EventWorkerHeartbeat:
		if old, ok := s.hbs[runtime]; !ok || at.After(old.At) {
			s.hbs[runtime] = workerEvent{At: at, Ev: ev}
		}
	case svc.EventWorkerStopped:
		if old, ok := s.stops[runtime]; !ok || at.After(old) {
			s.stops[runtime] = at
		}
	}
}

func (s *Stats) Result() svc.RuntimeStats {
	h := s.Header
	if done := h.AgentsCompleted + h.AgentsFailed; done > 0 {
		h.ErrorRate = float64(h.AgentsFailed) / float64(done)
	}
	out := svc.RuntimeStats{
		GeneratedAt: s.now.UTC(),
		Header:      h,
		BurnRate: svc.BurnRate{
			WindowSeconds:   BurnWindow.Seconds(),
			Tokens:          s.BurnTokens,
			TokensPerMinute: float64(s.BurnTokens) / BurnWindow.Minutes(),
		},
		Rejections:  s.rejections,
		ErrorGroups: make([]svc.ErrorGroup, 0, len(s.errs)),
		ToolServers: []svc.ToolServerStatus{},
		Workers:     make([]svc.WorkerStatus, 0, len(s.hbs)),
	}
	for kind, e := range s.errs {
		out.ErrorGroups = append(out.ErrorGroups, svc.ErrorGroup{
			Error: kind, Count: e.count, LastSeen: time.UnixMicro(e.last.US).UTC(), Sample: e.sample,
			Agents: SortedKeys(e.agents),
		})
	}
	slices.SortFunc(out.ErrorGroups, func(a, b svc.ErrorGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.Error, b.Error))
	})
	for id, hb := range s.hbs {
		stop, ok := s.stops[id]
		stopped := ok && stop.After(hb.At)
		p := hb.Ev.Payload
		w := svc.WorkerStatus{
			RuntimeID: id, LastHeartbeat: hb.Ev.Timestamp,
			Status:   svc.WorkerHealth(hb.Ev.Timestamp, stopped, s.now),
			InFlight: countOf(p["in_flight"]), Concurrency: countOf(p["concurrency_cap"]),
			Agents: []string{}, BrokerScheme: Str(p["broker_scheme"]), Stopped: stopped,
		}
		if list, ok := p["agent_subscriptions"].([]any); ok {
			for _, a := range list {
				if a, ok := a.(string); ok {
					w.Agents = append(w.Agents, a)
				}
			}
		}
		out.Workers = append(out.Workers, w)
	}
	slices.SortFunc(out.Workers, func(a, b svc.WorkerStatus) int { return cmp.Compare(a.RuntimeID, b.RuntimeID) })
	return out
}

func SortedKeys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ErrorKinds are the error kinds counted so far, for a store that looks up
// each kind's latest event itself.
func (s *Stats) ErrorKinds() []string {
	out := make([]string, 0, len(s.errs))
	for k := range s.errs {
		out = append(out, k)
	}
	return out
}
