package rollup

import (
	"encoding/json"
	"math"
	"unicode/utf8"

	"github.com/svc-dev/svc"
)

// Facts are what the rollups read of an event besides its envelope,
// extracted once when the event is written: the SQLite store keeps them in
// columns its indexes cover, the memory store beside the event. Only the
// event types a rollup reads a fact of carry it; every other event has the
// zero value, which keeps SQLite's partial indexes small.
type Facts struct {
	// Tokens is agent_completed's tokens_used.
	Tokens int64
	// Cached is agent_completed's cached_tokens: 0 when absent (no cache
	// hit, or written before it existed).
	Cached int64
	// CostNanos is agent_completed's cost_usd in nano-dollars
	// (svc.CostNanos): 0 when absent (events written before it existed).
	CostNanos int64
	// DurUS is tool_call_completed's and tool_call_failed's duration_ms in
	// whole microseconds; HasDur is false when the payload has none.
	DurUS  int64
	HasDur bool
	// Model is agent_completed's "model", as given ("" when absent).
	Model string
	// Tool is the tool_name of tool_call_* events.
	Tool string
	// ErrKind is the error kind name of agent_failed and tool_call_failed.
	ErrKind string
	// Runtime is the runtime_id of worker_* events.
	Runtime string
	// RunFlags are what the run history reads of an event besides its
	// type (RunReject, RunGroupFailed).
	RunFlags int64
}

// Facts.RunFlags bits.
const (
	// RunReject marks a refusal: depth_limit_exceeded, a budget_exceeded
	// that refused a call (one with an overshoot let the call finish), an
	// agent_failed whose kind is a policy's refusal.
	RunReject = 1 << iota
	// RunGroupFailed marks a group_completed with success false.
	RunGroupFailed
)

// maxFact bounds tokens_used, cached_tokens and durations (in microseconds, about 12.7
// days): a larger value is a bug upstream, and refusing it keeps every sum
// over a store far from int64 overflow.
const maxFact = 1 << 40

// FactsOf extracts ev's facts. It reads payload values as the store returns
// them (see canon), so an event gives the same facts whether it is read
// before or after its JSON round trip: both stores agree.
func FactsOf(ev *svc.RuntimeEvent) Facts {
	var f Facts
	p := ev.Payload
	switch ev.EventType {
	case svc.EventAgentCompleted:
		f.Tokens = tokensOf(p["tokens_used"])
		f.Cached = tokensOf(p["cached_tokens"])
		f.CostNanos = costOf(p["cost_usd"])
		f.Model = Str(p["model"])
	case svc.EventToolCallStarted:
		f.Tool = Str(p["tool_name"])
	case svc.EventToolCallCompleted, svc.EventToolCallFailed:
		f.Tool = Str(p["tool_name"])
		f.DurUS, f.HasDur = durationUS(p["duration_ms"])
		if ev.EventType == svc.EventToolCallFailed {
			f.ErrKind = string(svc.FailureKind(p, svc.KindToolExecution))
		}
	case svc.EventAgentFailed:
		f.ErrKind = string(svc.FailureKind(p, svc.KindRuntime))
		switch svc.Kind(f.ErrKind) {
		case svc.KindBudgetExceeded, svc.KindDepthLimit, svc.KindSpawnCycle:
			f.RunFlags = RunReject
		}
	case svc.EventDepthLimitExceeded:
		f.RunFlags = RunReject
	case svc.EventBudgetExceeded:
		if _, ok := p["overshoot"]; !ok {
			f.RunFlags = RunReject
		}
	case svc.EventGroupCompleted:
		if ok, isBool := canon(p["success"]).(bool); isBool && !ok {
			f.RunFlags = RunGroupFailed
		}
	case svc.EventWorkerStarted, svc.EventWorkerStopped, svc.EventWorkerHeartbeat:
		f.Runtime = runtimeID(ev)
	}
	return f
}

// canon returns v as it reads back from the store: a string, a finite
// float64, nil, or (for lists and objects) whatever JSON decodes. Common
// types are converted directly; anything else takes the JSON round trip
// that encodePayload and decodePayload give it.
func canon(v any) any {
	switch n := v.(type) {
	case nil, bool:
		return v
	case string:
		if utf8.ValidString(n) {
			return v
		}
		// JSON replaces invalid bytes with U+FFFD: take the round trip.
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return nil // encodePayload writes it as null
		}
		return n
	case int:
		return float64(n)
	case int64:
		return float64(n)
	case int32:
		return float64(n)
	case uint32:
		return float64(n)
	case uint64:
		return float64(n)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return nil
	}
	return out
}

// Str returns v if it is a string, else "".
func Str(v any) string {
	s, _ := canon(v).(string)
	return s
}

// number returns v if it is a number.
func number(v any) (float64, bool) {
	f, ok := canon(v).(float64)
	return f, ok
}

// tokensOf reads a token count: a fractional one is truncated; a negative
// or absurdly large one, or a non-number, counts as 0.
func tokensOf(v any) int64 {
	f, ok := number(v)
	if !ok || f < 0 || f >= maxFact {
		return 0
	}
	return int64(f)
}

// costOf reads a cost in dollars as nano-dollars (svc.CostNanos); a
// non-number counts as 0.
func costOf(v any) int64 {
	f, ok := number(v)
	if !ok {
		return 0
	}
	return svc.CostNanos(f)
}

// durationUS reads a duration in milliseconds as whole microseconds,
// rounded. Integer microseconds make sums exact, so the SQLite store's
// SUM and the memory store's loop give the same average to the last bit.
// A negative or absurdly large duration, or a non-number, is no duration.
func durationUS(v any) (int64, bool) {
	f, ok := number(v)
	if !ok || f < 0 {
		return 0, false
	}
	us := math.Round(f * 1000)
	if us >= maxFact {
		return 0, false
	}
	return int64(us), true
}

// countOf reads a non-negative count (in_flight, concurrency_cap).
func countOf(v any) int64 {
	f, ok := number(v)
	if !ok || f < 0 || f >= math.MaxInt64 {
		return 0
	}
	return int64(f)
}

// runtimeID is the worker a worker_* event is about: its payload's
// runtime_id, else its agent name (which the spec sets to the runtime id).
func runtimeID(ev *svc.RuntimeEvent) string {
	if id := Str(ev.Payload["runtime_id"]); id != "" {
		return id
	}
	return ev.AgentName
}
