package eventstoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
)

// at is base plus ms milliseconds.
func at(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

// mk builds an event.
func mk(typ svc.EventType, ms int, agent, task, trace string, p svc.Payload) svc.RuntimeEvent {
	return svc.RuntimeEvent{EventType: typ, Timestamp: at(ms), AgentName: agent, TaskID: task, TraceID: trace, Payload: p}
}

func child(e svc.RuntimeEvent, parent string) svc.RuntimeEvent {
	e.ParentTraceID = parent
	return e
}

// FixtureNow is the "now" of Fixture's RuntimeStats: 10 minutes after its
// first event.
var FixtureNow = base.Add(10 * time.Minute)

// Fixture is the suite's events for the rollups, for a backend's own tests
// (a migrated file must answer as a fresh one). It covers every rollup: token sums with a truncated fraction
// and missing models, tool calls with and without durations (and a
// duration to round), failures classified every way, rejections, the burn
// window's edges, and workers in each health.
func Fixture() []svc.RuntimeEvent {
	sec := func(s float64) int { return int(s * 1000) }
	mins := func(m float64) int { return int(m * 60 * 1000) }
	hb := func(id string, ms int, inFlight int) svc.RuntimeEvent {
		return mk(svc.EventWorkerHeartbeat, ms, id, "", id, svc.Payload{
			"runtime_id": id, "agent_subscriptions": []string{"triage", "billing"}, "in_flight": inFlight,
			"concurrency_cap": 8, "broker_scheme": "nats"})
	}
	return []svc.RuntimeEvent{
		// t1: triage with a completed and a failed search.
		mk(svc.EventAgentSpawned, sec(0), "triage", "k1", "t1", svc.Payload{"backend": "local", "trust_level": "medium"}),
		mk(svc.EventToolCallStarted, sec(1), "triage", "k1", "t1", svc.Payload{"tool_name": "search"}),
		mk(svc.EventToolCallCompleted, sec(2), "triage", "k1", "t1", svc.Payload{"tool_name": "search", "duration_ms": 10, "tokens_used": 0}),
		mk(svc.EventToolCallStarted, sec(3), "triage", "k1", "t1", svc.Payload{"tool_name": "search"}),
		mk(svc.EventToolCallFailed, sec(4), "triage", "k1", "t1", svc.Payload{"tool_name": "search", "error": "search: upstream timed out", "duration_ms": 30.0}),
		mk(svc.EventAgentCompleted, sec(5), "triage", "k1", "t1", svc.Payload{"tokens_used": 100, "cost_usd": 0.0025, "model": "openai:gpt-4o", "duration_ms": 900.0}),
		// t2: billing; tokens truncated, no model nor cost, a duration
		// rounded to µs.
		mk(svc.EventAgentSpawned, sec(10), "billing", "k2", "t2", nil),
		mk(svc.EventToolCallCompleted, sec(12), "billing", "k2", "t2", svc.Payload{"tool_name": "search", "duration_ms": 20.0}),
		mk(svc.EventToolCallCompleted, sec(14), "billing", "k2", "t2", svc.Payload{"tool_name": "lookup", "duration_ms": 5.0004}),
		mk(svc.EventToolCallCompleted, sec(14.5), "billing", "k2", "t2", svc.Payload{"tool_name": "lookup"}), // no duration
		mk(svc.EventAgentCompleted, sec(15), "billing", "k2", "t2", svc.Payload{"tokens_used": 50.9}),
		// t3: a budget rejection.
		mk(svc.EventAgentSpawned, sec(20), "triage", "k3", "t3", nil),
		mk(svc.EventBudgetExceeded, sec(21), "triage", "k3", "t3", svc.Payload{"limit": 100, "used": 120, "scope": "run"}),
		mk(svc.EventAgentFailed, sec(22), "triage", "k3", "t3", svc.Payload{"error": "triage: token budget exceeded", "reason": "budget_exceeded"}),
		// t4: a depth rejection, an empty model, a model error.
		mk(svc.EventDepthLimitExceeded, sec(30), "planner", "k4", "t4", svc.Payload{"limit": 4, "depth": 5}),
		mk(svc.EventAgentCompleted, sec(31), "triage", "k5", "t4", svc.Payload{"tokens_used": 7, "model": "", "cost_usd": -1.0}), // a negative cost counts 0
		mk(svc.EventAgentFailed, sec(32), "billing", "k6", "t4", svc.Payload{"error": "provider down", "reason": "ModelError"}),
		mk(svc.EventAgentFailed, sec(33), "triage", "k7", "t4", svc.Payload{"error": "something odd"}),
		// t5: the burn window (now-5m, now].
		mk(svc.EventAgentCompleted, mins(5), "triage", "k8", "t5", svc.Payload{"tokens_used": 1000, "cost_usd": 0.01, "model": "openai:gpt-4o"}), // at now-5m: out
		mk(svc.EventAgentCompleted, mins(6), "billing", "k9", "t5", svc.Payload{"tokens_used": 40, "cost_usd": 0.0004, "model": "anthropic:claude"}),
		mk(svc.EventAgentCompleted, mins(10), "billing", "k10", "t5", svc.Payload{"tokens_used": 2, "cost_usd": float32(0.00002), "model": "anthropic:claude"}), // at now: in
		mk(svc.EventAgentCompleted, mins(11), "billing", "k11", "t5", svc.Payload{"tokens_used": 3, "cost_usd": "0.00003", "model": "anthropic:claude"}),        // after now: out; a string costs 0
		// Workers (their trace id is the runtime id: not a run).
		hb("w1", mins(9.5), 5), hb("w1", mins(9.8), 3), // healthy, latest wins
		hb("w2", mins(8), 0), // stale
		hb("w3", mins(3), 0), // down
		hb("w4", mins(9.9), 1),
		mk(svc.EventWorkerStopped, mins(9.95), "w4", "", "w4", svc.Payload{"runtime_id": "w4", "agents": []string{"triage"}, "broker_scheme": "nats"}),
		mk(svc.EventWorkerStarted, mins(1), "w5", "", "w5", svc.Payload{"runtime_id": "w5"}), // no heartbeat: not listed
	}
}

func testRollups(t *testing.T, open Open) {
	ctx := context.Background()
	// Costs: 0.0025 + 0.01 (triage, gpt-4o), 0.0004 + 0.00002 (billing,
	// claude; the float32 rounds to the same nano-dollars); none, a
	// negative one and a string count 0.
	total := svc.UsageTotals{TokensUsed: 1202, CostUSD: 0.01292, Invocations: 7}
	wantUsage := map[string]svc.Usage{
		"":     {GroupBy: "none", Total: total},
		"none": {GroupBy: "none", Total: total},
		"agent": {GroupBy: "agent", Total: total, Groups: map[string]svc.UsageTotals{
			"triage": {TokensUsed: 1107, CostUSD: 0.0125, Invocations: 3}, "billing": {TokensUsed: 95, CostUSD: 0.00042, Invocations: 4}}},
		"trace": {GroupBy: "trace", Total: total, Groups: map[string]svc.UsageTotals{
			"t1": {TokensUsed: 100, CostUSD: 0.0025, Invocations: 1}, "t2": {TokensUsed: 50, Invocations: 1},
			"t4": {TokensUsed: 7, Invocations: 1}, "t5": {TokensUsed: 1045, CostUSD: 0.01042, Invocations: 4}}},
		"model": {GroupBy: "model", Total: total, Groups: map[string]svc.UsageTotals{
			"openai:gpt-4o": {TokensUsed: 1100, CostUSD: 0.0125, Invocations: 2}, "anthropic:claude": {TokensUsed: 45, CostUSD: 0.00042, Invocations: 3},
			svc.UnknownModel: {TokensUsed: 57, Invocations: 2}}},
	}
	wantTools := map[string]svc.ToolUsage{
		"tool": {GroupBy: "tool", Rows: []svc.ToolStats{
			{Tool: "lookup", Calls: 2, P50MS: 5, P95MS: 5, P99MS: 5, AvgMS: 5},
			{Tool: "search", Calls: 3, Failures: 1, P50MS: 20, P95MS: 30, P99MS: 30, AvgMS: 20},
		}},
		"agent_tool": {GroupBy: "agent_tool", Rows: []svc.ToolStats{
			{Tool: "lookup", Agent: "billing", Calls: 2, P50MS: 5, P95MS: 5, P99MS: 5, AvgMS: 5},
			{Tool: "search", Agent: "billing", Calls: 1, P50MS: 20, P95MS: 20, P99MS: 20, AvgMS: 20},
			{Tool: "search", Agent: "triage", Calls: 2, Failures: 1, P50MS: 10, P95MS: 30, P99MS: 30, AvgMS: 20},
		}},
	}
	mins := func(m float64) time.Time { return base.Add(time.Duration(m * float64(time.Minute))) }
	wantStats := svc.RuntimeStats{
		GeneratedAt: FixtureNow,
		Header: svc.StatsHeader{
			Events: 29, Traces: 5, AgentsStarted: 3, AgentsCompleted: 7, AgentsFailed: 3,
			ToolCalls: 5, ToolFailures: 1, TokensUsed: 1202, ErrorRate: 0.3,
		},
		BurnRate: svc.BurnRate{WindowSeconds: 300, Tokens: 42, TokensPerMinute: 8.4},
		Rejections: map[string]int64{
			// Keyed by kind only: the budget_exceeded event and the failed
			// invocation it stopped both count, as in svc.rejections.
			"BudgetExceededError": 2, "DepthLimitError": 1, "ModelError": 1, "AgentRuntimeError": 1,
		},
		ErrorGroups: []svc.ErrorGroup{
			// Equal counts: the most recent first.
			{Error: "AgentRuntimeError", Count: 1, LastSeen: at(33000), Sample: "something odd", Agents: []string{"triage"}},
			{Error: "ModelError", Count: 1, LastSeen: at(32000), Sample: "provider down", Agents: []string{"billing"}},
			{Error: "BudgetExceededError", Count: 1, LastSeen: at(22000), Sample: "triage: token budget exceeded", Agents: []string{"triage"}},
			{Error: "ToolExecutionError", Count: 1, LastSeen: at(4000), Sample: "search: upstream timed out", Agents: []string{"triage"}},
		},
		ToolServers: []svc.ToolServerStatus{},
		Workers: []svc.WorkerStatus{
			{RuntimeID: "w1", Status: svc.WorkerHealthy, LastHeartbeat: mins(9.8), InFlight: 3, Concurrency: 8, Agents: []string{"triage", "billing"}, BrokerScheme: "nats"},
			{RuntimeID: "w2", Status: svc.WorkerStale, LastHeartbeat: mins(8), Concurrency: 8, Agents: []string{"triage", "billing"}, BrokerScheme: "nats"},
			{RuntimeID: "w3", Status: svc.WorkerDown, LastHeartbeat: mins(3), Concurrency: 8, Agents: []string{"triage", "billing"}, BrokerScheme: "nats"},
			{RuntimeID: "w4", Status: svc.WorkerDown, LastHeartbeat: mins(9.9), InFlight: 1, Concurrency: 8, Agents: []string{"triage", "billing"}, BrokerScheme: "nats", Stopped: true},
		},
	}

	s := open(t, eventstore.Retention{})
	// Two batches, the second out of time order.
	evs := Fixture()
	write(t, s, evs[10:]...)
	write(t, s, evs[:10]...)
	for g, want := range wantUsage {
		t.Run("usage "+g, func(t *testing.T) {
			got, err := s.Usage(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Usage(%q):\n got %+v\nwant %+v", g, got, want)
			}
		})
	}
	for g, want := range wantTools {
		t.Run("tools "+g, func(t *testing.T) {
			got, err := s.ToolUsage(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("ToolUsage(%q):\n got %+v\nwant %+v", g, got, want)
			}
		})
	}
	t.Run("stats", func(t *testing.T) {
		got, err := s.RuntimeStats(ctx, FixtureNow)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, wantStats) {
			t.Fatalf("RuntimeStats:\n got %+v\nwant %+v", got, wantStats)
		}
	})
}

func testRollupsEmpty(t *testing.T, open Open) {
	ctx := context.Background()
	s := open(t, eventstore.Retention{})
	u, err := s.Usage(ctx, svc.GroupByAgent)
	if err != nil || !reflect.DeepEqual(u, svc.Usage{GroupBy: "agent", Groups: map[string]svc.UsageTotals{}}) {
		t.Errorf("Usage = %+v, %v", u, err)
	}
	tu, err := s.ToolUsage(ctx, svc.GroupByTool)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.RuntimeStats(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	// Clients see empty collections, never null.
	for what, v := range map[string]any{"tools": tu, "stats": st} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "null") {
			t.Errorf("%s encodes a null: %s", what, b)
		}
	}
	if got, err := s.Events(ctx, eventstore.Query{}); err != nil || got == nil || len(got) != 0 {
		t.Errorf("Events on an empty store = %#v, %v; want an empty slice", got, err)
	}
}

func testRollupBadArguments(t *testing.T, open Open) {
	ctx := context.Background()
	s := open(t, eventstore.Retention{})
	for _, g := range []string{"bogus", "tool", "Agent"} {
		if _, err := s.Usage(ctx, g); !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("Usage(%q) = %v, want a SpecValidationError", g, err)
		}
	}
	for _, g := range []string{"", "none", "agent", "trace"} {
		if _, err := s.ToolUsage(ctx, g); !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("ToolUsage(%q) = %v, want a SpecValidationError", g, err)
		}
	}
	for _, limit := range []int{svc.MaxEventLimit + 1, -1} {
		if _, err := s.Events(ctx, svc.EventQuery{Limit: limit}); !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("Events(limit %d) = %v, want a SpecValidationError", limit, err)
		}
	}
	write(t, s, mk(svc.EventBatchStarted, 0, "a", "", "", nil)) // an event of no trace
	for _, tr := range []string{"nope", ""} {
		if _, err := s.Tree(ctx, tr); !errors.Is(err, svc.ErrRegistry) {
			t.Errorf("Tree(%q) = %v, want a RegistryError", tr, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Usage(ctx, ""); !errors.Is(err, svc.ErrShuttingDown) {
		t.Errorf("Usage after Close = %v, want ShuttingDownError", err)
	}
	if _, err := s.Tree(ctx, "t"); !errors.Is(err, svc.ErrShuttingDown) {
		t.Errorf("Tree after Close = %v, want ShuttingDownError", err)
	}
}

// testPercentiles pins the nearest-rank method: p = the value of rank
// ceil(p·n/100) among the sorted durations.
func testPercentiles(t *testing.T, open Open) {
	ctx := context.Background()
	cases := []struct {
		name          string
		durations     []float64
		p50, p95, p99 float64
		avg           float64
	}{
		{"one", []float64{7}, 7, 7, 7, 7},
		{"two", []float64{30, 10}, 10, 30, 30, 20},
		{"1 to 100", seq(1, 100), 50, 95, 99, 50.5},
		{"1 to 20", seq(1, 20), 10, 19, 20, 10.5},
		{"1 to 201", seq(1, 201), 101, 191, 199, 101},
		{"ties", []float64{5, 5, 5, 5, 9}, 5, 9, 9, 5.8},
		// Rounded to whole microseconds: 0, 1 and 250 µs.
		{"sub-millisecond", []float64{0.0004, 0.0006, 0.25}, 0.001, 0.25, 0.25, 251.0 / 3 / 1000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, eventstore.Retention{})
			var evs []svc.RuntimeEvent
			for i, d := range c.durations {
				typ := svc.EventToolCallCompleted
				if i%3 == 1 {
					typ = svc.EventToolCallFailed // failures count toward latency too
				}
				evs = append(evs, mk(typ, i, "a", "k", "t", svc.Payload{"tool_name": "x", "duration_ms": d}))
			}
			write(t, s, evs...)
			got, err := s.ToolUsage(ctx, svc.GroupByTool)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Rows) != 1 {
				t.Fatalf("rows %+v", got.Rows)
			}
			r := got.Rows[0]
			if r.P50MS != c.p50 || r.P95MS != c.p95 || r.P99MS != c.p99 || r.AvgMS != c.avg {
				t.Fatalf("p50/p95/p99/avg = %v/%v/%v/%v, want %v/%v/%v/%v",
					r.P50MS, r.P95MS, r.P99MS, r.AvgMS, c.p50, c.p95, c.p99, c.avg)
			}
		})
	}
}

func seq(from, to int) []float64 {
	var out []float64
	// Shuffled, so neither store gets them in order.
	for _, i := range rand.New(rand.NewPCG(7, 7)).Perm(to - from + 1) {
		out = append(out, float64(from+i))
	}
	return out
}

func testWorkerHealth(t *testing.T, open Open) {
	ctx := context.Background()
	now := base.Add(time.Hour)
	hb := func(id string, ago time.Duration) svc.RuntimeEvent {
		return svc.RuntimeEvent{EventType: svc.EventWorkerHeartbeat, Timestamp: now.Add(-ago), AgentName: id, TraceID: id,
			Payload: svc.Payload{"runtime_id": id, "in_flight": 2, "concurrency_cap": 4, "broker_scheme": "redis",
				"agent_subscriptions": []string{"a"}}}
	}
	stopped := func(id string, ago time.Duration) svc.RuntimeEvent {
		return svc.RuntimeEvent{EventType: svc.EventWorkerStopped, Timestamp: now.Add(-ago), AgentName: id, TraceID: id,
			Payload: svc.Payload{"runtime_id": id}}
	}
	cases := []struct {
		name string
		evs  []svc.RuntimeEvent
		want string
	}{
		{"fresh", []svc.RuntimeEvent{hb("w", 0)}, svc.WorkerHealthy},
		{"89 s", []svc.RuntimeEvent{hb("w", 89*time.Second)}, svc.WorkerHealthy},
		{"90 s", []svc.RuntimeEvent{hb("w", 90*time.Second)}, svc.WorkerStale},
		{"299 s", []svc.RuntimeEvent{hb("w", 299*time.Second)}, svc.WorkerStale},
		{"300 s", []svc.RuntimeEvent{hb("w", 300*time.Second)}, svc.WorkerDown},
		{"stopped after its heartbeat", []svc.RuntimeEvent{hb("w", 10*time.Second), stopped("w", 5*time.Second)}, svc.WorkerDown},
		{"stopped, then restarted", []svc.RuntimeEvent{stopped("w", 20*time.Second), hb("w", 10*time.Second)}, svc.WorkerHealthy},
		{"another worker stopped", []svc.RuntimeEvent{hb("w", 10*time.Second), stopped("v", 5*time.Second)}, svc.WorkerHealthy},
		{"latest of several", []svc.RuntimeEvent{hb("w", 10*time.Second), hb("w", 400*time.Second)}, svc.WorkerHealthy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, eventstore.Retention{})
			write(t, s, c.evs...)
			st, err := s.RuntimeStats(ctx, now)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Workers) != 1 || st.Workers[0].RuntimeID != "w" {
				t.Fatalf("workers %+v", st.Workers)
			}
			w := st.Workers[0]
			if w.Status != c.want {
				t.Fatalf("status %q, want %q", w.Status, c.want)
			}
			if w.InFlight != 2 || w.Concurrency != 4 || w.BrokerScheme != "redis" || !reflect.DeepEqual(w.Agents, []string{"a"}) {
				t.Fatalf("worker %+v", w)
			}
		})
	}
}

// randomEvents makes n events of every type with random agents, traces,
// tools, models, payload values (including bad ones) and timestamps,
// spread over span before end.
func randomEvents(rng *rand.Rand, n int, end time.Time, span time.Duration) []svc.RuntimeEvent {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	evs := make([]svc.RuntimeEvent, n)
	for i := range evs {
		typ := svc.EventTypes[rng.IntN(len(svc.EventTypes))]
		ago := time.Duration(rng.Int64N(int64(span)))
		// Traces follow time, so a retention drops whole traces.
		idx := int(ago * 12 / span)
		trace := fmt.Sprintf("t%d", idx)
		e := svc.RuntimeEvent{
			EventType: typ, Timestamp: end.Add(-ago),
			AgentName: pick("a", "b", "c"), TaskID: fmt.Sprintf("k%d", rng.IntN(30)), TraceID: trace,
			Payload: svc.Payload{},
		}
		// Two traces in three are top-level runs (the run history's).
		if parent := rng.IntN(12); rng.IntN(4) == 0 && idx%3 == 0 {
			e.ParentTraceID = fmt.Sprintf("t%d", parent)
		}
		p := e.Payload
		p["tool_name"] = pick("x", "y", "z", "", "x\xffy") // the last is not UTF-8
		switch rng.IntN(7) {
		case 0: // missing
		case 1:
			p["duration_ms"] = rng.Float64() * 100
		case 2:
			p["duration_ms"] = int64(rng.IntN(1000))
		case 3:
			p["duration_ms"] = "slow"
		case 4:
			p["duration_ms"] = -1.0
		case 5:
			p["duration_ms"] = rng.Float64() / 3
		case 6:
			p["duration_ms"] = float32(rng.Float64() * 10)
		}
		switch rng.IntN(5) {
		case 0:
		case 1:
			p["tokens_used"] = rng.IntN(5000)
		case 2:
			p["tokens_used"] = rng.Float64() * 100
		case 3:
			p["tokens_used"] = json.Number(fmt.Sprint(rng.IntN(100)))
		case 4:
			p["tokens_used"] = uint8(rng.IntN(200))
		}
		switch rng.IntN(6) {
		case 0: // absent, as in events written before cost_usd
		case 1:
			p["cost_usd"] = rng.Float64() / 100
		case 2:
			p["cost_usd"] = -0.5
		case 3:
			p["cost_usd"] = "free"
		case 4:
			p["cost_usd"] = float32(rng.Float64())
		case 5:
			p["cost_usd"] = json.Number(fmt.Sprintf("0.%06d", rng.IntN(1e6)))
		}
		switch rng.IntN(5) {
		case 0: // absent: no cache hit, or written before cached_tokens
		case 1:
			p["cached_tokens"] = int64(rng.IntN(4000))
		case 2:
			p["cached_tokens"] = rng.Float64() * 50
		case 3:
			p["cached_tokens"] = -3
		case 4:
			p["cached_tokens"] = json.Number(fmt.Sprint(rng.IntN(100)))
		}
		p["model"] = pick("m1", "m2", "", svc.UnknownModel)
		p["error"] = pick("ModelError: x", "TimeoutError: slow", "plain", "")
		p["reason"] = pick("", "timeout", "budget_exceeded", "ModelError")
		switch rng.IntN(4) {
		case 0:
		case 1:
			p["success"] = false
		case 2:
			p["success"] = true
		case 3:
			p["overshoot"] = 12
		}
		if isWorker(typ) {
			id := pick("w1", "w2", "w3")
			e.AgentName, e.TraceID = id, id
			p["runtime_id"] = id
			p["in_flight"] = rng.IntN(5)
			p["agent_subscriptions"] = []string{"a"}
		}
		evs[i] = e
	}
	return evs
}

func isWorker(t svc.EventType) bool {
	return t == svc.EventWorkerStarted || t == svc.EventWorkerStopped || t == svc.EventWorkerHeartbeat
}

// ReadAll reads every rollup of s as of now, the trees of traces, and up
// to eventstore.MaxLimit events, keyed by what was read ("usage agent",
// "tools tool", "stats", "tree T", "events"): two stores that hold the
// same events return equal maps.
func ReadAll(t *testing.T, s eventstore.Store, now time.Time, traces []string) map[string]any {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	for _, g := range []string{"none", "agent", "trace", "model"} {
		u, err := s.Usage(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		out["usage "+g] = u
	}
	for _, g := range []string{"tool", "agent_tool"} {
		u, err := s.ToolUsage(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		out["tools "+g] = u
	}
	st, err := s.RuntimeStats(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	out["stats"] = st
	for _, tr := range traces {
		tree, err := s.Tree(ctx, tr)
		if err != nil && !errors.Is(err, svc.ErrRegistry) {
			t.Fatal(err)
		}
		out["tree "+tr] = tree
	}
	evs, err := s.Events(ctx, eventstore.Query{Limit: eventstore.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	out["events"] = evs
	readHistory(t, s, out)
	readWindows(t, s, now, out)
	return out
}

// testAgreesWithMemory writes the same random events to the store and to
// the memory store, the reference (it computes every rollup by the
// definitions, scanning every event), and compares every rollup: they
// must be equal to the last bit, also after each applied the same
// retention (a store's totals take out what it prunes).
func testAgreesWithMemory(t *testing.T, open Open) {
	skipReference(t, open)
	traces := []string{"nope", "w1"}
	for i := range 12 {
		traces = append(traces, fmt.Sprintf("t%d", i))
	}
	for _, r := range []eventstore.Retention{{}, {MaxRows: 700}, {MaxAge: 30 * time.Minute}} {
		t.Run(fmt.Sprintf("%+v", r), func(t *testing.T) {
			t.Parallel() // its own stores
			now := time.Now()
			rng := rand.New(rand.NewPCG(3, uint64(r.MaxRows)))
			var evs []svc.RuntimeEvent
			for _, e := range randomEvents(rng, 2000, now, time.Hour) {
				// Nothing near the age cutoff, which moves with the clock
				// between the two stores' prunes: by as long as the test
				// runs, which on a loaded machine (-race) can be a minute.
				if age := now.Sub(e.Timestamp); age < 25*time.Minute || age > 35*time.Minute {
					evs = append(evs, e)
				}
			}
			mem, lite := reference(t, eventstore.Retention{}), open(t, eventstore.Retention{})
			for i := 0; i < len(evs); i += 300 {
				batch := evs[i:min(i+300, len(evs))]
				write(t, mem, batch...)
				write(t, lite, batch...)
			}
			if r != (eventstore.Retention{}) {
				// Stores with the retention, filled the same way.
				mem, lite = reference(t, r), open(t, r)
				for i := 0; i < len(evs); i += 300 {
					batch := evs[i:min(i+300, len(evs))]
					write(t, mem, batch...)
					write(t, lite, batch...)
					prune(t, lite) // prune between batches, as the goroutine would
				}
				if n := len(query(t, lite, eventstore.Query{Limit: eventstore.MaxLimit})); n == len(evs) || n == 0 {
					t.Fatalf("the retention kept %d of %d events: the test tests nothing", n, len(evs))
				}
			}
			prune(t, lite) // as the memory store does when it is read
			m, l := ReadAll(t, mem, now, traces), ReadAll(t, lite, now, traces)
			for k := range m {
				if !reflect.DeepEqual(m[k], l[k]) {
					t.Errorf("%s differs:\nmemory %+v\nstore  %+v", k, m[k], l[k])
				}
			}
		})
	}
}
