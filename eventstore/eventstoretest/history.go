package eventstoretest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
)

// readHistory adds to out what s's run history lists (when s has one):
// every status, every target of the suite's events, pages of three read
// back to back, and the history without two traces.
func readHistory(t *testing.T, s eventstore.Store, out map[string]any) {
	t.Helper()
	h, ok := s.(svc.RunHistoryReader)
	if !ok {
		return
	}
	ctx := context.Background()
	read := func(q svc.RunHistoryQuery) svc.HistoryPage {
		t.Helper()
		p, err := h.RunHistory(ctx, q)
		if err != nil {
			t.Fatalf("RunHistory(%+v): %v", q, err)
		}
		return p
	}
	for _, st := range append([]string{""}, svc.RunStatuses...) {
		out["history status "+st] = read(svc.RunHistoryQuery{Status: st, Limit: svc.MaxRunPage})
	}
	for _, target := range []string{"a", "b", "c", "pipeline", "nope"} {
		out["history target "+target] = read(svc.RunHistoryQuery{Target: target, Limit: svc.MaxRunPage})
		out["history running "+target] = read(svc.RunHistoryQuery{Target: target, Status: svc.RunStatusRunning, Limit: svc.MaxRunPage})
		out["history gathers "+target] = read(svc.RunHistoryQuery{Target: target, Type: svc.RunTypeGather, Limit: svc.MaxRunPage})
	}
	var pages []svc.HistoryPage
	q := svc.RunHistoryQuery{Limit: 3}
	for range 100 {
		p := read(q)
		pages = append(pages, p)
		if len(p.Runs) < q.Limit {
			break
		}
		last := p.Runs[len(p.Runs)-1]
		q.Before = &svc.HistoryPos{At: last.StartedAt, TraceID: last.TraceID}
	}
	out["history pages"] = pages
	out["history exclude"] = read(svc.RunHistoryQuery{Exclude: []string{"t1", "t2", "nope"}, Limit: svc.MaxRunPage})
}

// Windows is the windows readWindows reads, relative to now: whole
// minutes and partial ones, one inside a minute, open at either end, and
// one holding nothing.
func Windows(now time.Time) []svc.Window {
	m := now.Truncate(time.Minute)
	return []svc.Window{
		{Since: m.Add(-40 * time.Minute), Until: m.Add(-10 * time.Minute)},
		{Since: now.Add(-45*time.Minute + 1234*time.Microsecond), Until: now.Add(-5*time.Minute - 777*time.Millisecond)},
		{Since: m.Add(-17*time.Minute + 10*time.Second), Until: m.Add(-17*time.Minute + 50*time.Second)},
		{Since: now.Add(-20 * time.Minute)},
		{Until: now.Add(-50*time.Minute + 3*time.Second)},
		{Since: now.Add(time.Hour), Until: now.Add(2 * time.Hour)},
	}
}

// readWindows adds to out every windowed rollup of s (when it has them)
// for each of Windows(now).
func readWindows(t *testing.T, s eventstore.Store, now time.Time, out map[string]any) {
	t.Helper()
	w, ok := s.(svc.WindowedEventReader)
	if !ok {
		return
	}
	ctx := context.Background()
	for i, win := range Windows(now) {
		for _, g := range []string{"none", "agent", "trace", "model"} {
			u, err := w.UsageIn(ctx, g, win)
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("window %d usage %s", i, g)] = u
		}
		for _, g := range []string{"tool", "agent_tool"} {
			u, err := w.ToolUsageIn(ctx, g, win)
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("window %d tools %s", i, g)] = u
		}
		st, err := w.RuntimeStatsIn(ctx, now, win)
		if err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("window %d stats", i)] = st
	}
}

// historyFixture is one run of each kind and status, at base + their
// second: a run in flight (spawned) and one with a tool call (running),
// a run that completed and one that failed, a gather, a group that
// failed, a run refused by the budget and one by depth, a child run (not
// listed), and a run whose budget_exceeded has an overshoot (it kept its
// result: completed).
func historyFixture() []svc.RuntimeEvent {
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	ev := func(s int, typ svc.EventType, agent, trace string, p svc.Payload) svc.RuntimeEvent {
		return svc.RuntimeEvent{EventType: typ, Timestamp: at(s), AgentName: agent, TaskID: "k" + trace, TraceID: trace, Payload: p}
	}
	child := ev(9, svc.EventAgentSpawned, "helper", "child", svc.Payload{})
	child.ParentTraceID = "done"
	return []svc.RuntimeEvent{
		ev(1, svc.EventAgentSpawned, "a", "spawned", svc.Payload{}),
		ev(2, svc.EventAgentSpawned, "a", "running", svc.Payload{}),
		ev(3, svc.EventToolCallStarted, "a", "running", svc.Payload{"tool_name": "x"}),
		ev(4, svc.EventAgentSpawned, "b", "done", svc.Payload{}),
		ev(5, svc.EventAgentCompleted, "b", "done", svc.Payload{"tokens_used": 7}),
		ev(6, svc.EventAgentSpawned, "b", "broke", svc.Payload{}),
		ev(7, svc.EventAgentFailed, "b", "broke", svc.Payload{"error": "ModelError: down", "reason": "ModelError"}),
		ev(8, svc.EventBatchStarted, "a", "gath", svc.Payload{"task_count": 2}),
		ev(8, svc.EventAgentSpawned, "a", "gath", svc.Payload{}),
		ev(8, svc.EventAgentSpawned, "a", "gath", svc.Payload{}),
		ev(9, svc.EventAgentCompleted, "a", "gath", svc.Payload{"tokens_used": 2}),
		ev(9, svc.EventAgentCompleted, "a", "gath", svc.Payload{"tokens_used": 3}),
		ev(9, svc.EventBatchCompleted, "a", "gath", svc.Payload{"success_count": 2}),
		child,
		ev(10, svc.EventGroupStarted, "pipeline", "grp", svc.Payload{"group_name": "pipeline"}),
		ev(10, svc.EventAgentSpawned, "a", "grp", svc.Payload{}),
		ev(11, svc.EventAgentFailed, "a", "grp", svc.Payload{"error": "TimeoutError: slow"}),
		ev(11, svc.EventGroupCompleted, "pipeline", "grp", svc.Payload{"group_name": "pipeline", "success": false}),
		ev(12, svc.EventBudgetExceeded, "c", "broke-budget", svc.Payload{"limit": 10, "used": 10, "scope": "runtime"}),
		ev(13, svc.EventDepthLimitExceeded, "c", "deep", svc.Payload{"depth": 4}),
		ev(13, svc.EventAgentFailed, "c", "deep", svc.Payload{"error": "DepthLimitError: too deep", "reason": "DepthLimitError"}),
		ev(14, svc.EventAgentSpawned, "c", "over", svc.Payload{}),
		ev(15, svc.EventBudgetExceeded, "c", "over", svc.Payload{"limit": 10, "used": 12, "overshoot": 2, "scope": "runtime"}),
		ev(15, svc.EventAgentCompleted, "c", "over", svc.Payload{"tokens_used": 12}),
	}
}

// testRunHistory holds the store's run history to the definitions: one
// row per top-level trace, newest first, with its type, target and
// status, filters and paging with the total of every page.
func testRunHistory(t *testing.T, open Open) {
	s := open(t, eventstore.Retention{})
	h, ok := s.(svc.RunHistoryReader)
	if !ok {
		t.Skip("the store keeps no run history")
	}
	ctx := context.Background()
	write(t, s, historyFixture()...)
	row := func(trace, typ, target, status string, first, last int, events, tokens int64) svc.HistoryRun {
		return svc.HistoryRun{TraceID: trace, Type: typ, Target: target, Status: status,
			StartedAt: base.Add(time.Duration(first) * time.Second).UTC(), LastEventAt: base.Add(time.Duration(last) * time.Second).UTC(),
			Events: events, TokensUsed: tokens}
	}
	all := []svc.HistoryRun{
		row("over", "run", "c", "completed", 14, 15, 3, 12),
		row("deep", "run", "c", "rejected", 13, 13, 2, 0),
		row("broke-budget", "run", "c", "rejected", 12, 12, 1, 0),
		row("grp", "group", "pipeline", "failed", 10, 11, 4, 0),
		row("gath", "gather", "a", "completed", 8, 9, 6, 5),
		row("broke", "run", "b", "failed", 6, 7, 2, 0),
		row("done", "run", "b", "completed", 4, 5, 2, 7),
		row("running", "run", "a", "running", 2, 3, 2, 0),
		row("spawned", "run", "a", "spawned", 1, 1, 1, 0),
	}
	check := func(q svc.RunHistoryQuery, want []svc.HistoryRun, total int64) {
		t.Helper()
		got, err := h.RunHistory(ctx, q)
		if err != nil {
			t.Fatalf("RunHistory(%+v): %v", q, err)
		}
		if want == nil {
			want = []svc.HistoryRun{}
		}
		if !reflect.DeepEqual(got, svc.HistoryPage{Runs: want, Total: total}) {
			t.Errorf("RunHistory(%+v):\n got %+v\nwant %+v (total %d)", q, got, want, total)
		}
	}
	check(svc.RunHistoryQuery{}, all, 9)
	check(svc.RunHistoryQuery{Status: "rejected"}, all[1:3], 2)
	check(svc.RunHistoryQuery{Status: "failed"}, []svc.HistoryRun{all[3], all[5]}, 2)
	check(svc.RunHistoryQuery{Status: "completed"}, []svc.HistoryRun{all[0], all[4], all[6]}, 3)
	check(svc.RunHistoryQuery{Status: "spawned"}, all[8:], 1)
	check(svc.RunHistoryQuery{Status: "running"}, all[7:8], 1)
	check(svc.RunHistoryQuery{Status: "cancelled"}, nil, 0)
	check(svc.RunHistoryQuery{Target: "b"}, all[5:7], 2)
	check(svc.RunHistoryQuery{Type: "gather"}, all[4:5], 1)
	check(svc.RunHistoryQuery{Type: "group", Status: "failed"}, all[3:4], 1)
	check(svc.RunHistoryQuery{Type: "run", Target: "c", Limit: 2}, all[0:2], 3)
	check(svc.RunHistoryQuery{Target: "a", Status: "completed"}, all[4:5], 1)
	check(svc.RunHistoryQuery{Exclude: []string{"over", "grp"}}, append(all[1:3:3], all[4:]...), 7)
	check(svc.RunHistoryQuery{Limit: 4}, all[:4], 9)
	check(svc.RunHistoryQuery{Limit: 4, Before: &svc.HistoryPos{At: all[3].StartedAt, TraceID: all[3].TraceID}}, all[4:8], 9)
	// Ties in time are broken by trace id: the larger first.
	write(t, s, svc.RuntimeEvent{EventType: svc.EventAgentSpawned, Timestamp: base.Add(13 * time.Second),
		AgentName: "z", TaskID: "kz", TraceID: "deeper", Payload: svc.Payload{}})
	check(svc.RunHistoryQuery{Limit: 2, Before: &svc.HistoryPos{At: all[0].StartedAt, TraceID: all[0].TraceID}},
		[]svc.HistoryRun{row("deeper", "run", "z", "spawned", 13, 13, 1, 0), all[1]}, 10)

	for _, q := range []svc.RunHistoryQuery{{Status: "done"}, {Type: "submitted"}, {Limit: -1}, {Limit: svc.MaxRunPage + 1}} {
		if _, err := h.RunHistory(ctx, q); !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("RunHistory(%+v) = %v, want a SpecValidationError", q, err)
		}
	}
}

// testWindows holds the windowed rollups to their edges: since is
// inclusive and until exclusive to the microsecond, inside a minute and
// across minutes, and the traces of the stats header are those active in
// the window.
func testWindows(t *testing.T, open Open) {
	s := open(t, eventstore.Retention{})
	w, ok := s.(svc.WindowedEventReader)
	if !ok {
		t.Skip("the store has no time windows")
	}
	ctx := context.Background()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	write(t, s,
		mk(svc.EventAgentSpawned, 0, "a", "k1", "t1", svc.Payload{}),
		mk(svc.EventAgentCompleted, 1_000, "a", "k1", "t1", svc.Payload{"tokens_used": 1}),
		mk(svc.EventAgentCompleted, 90_000, "b", "k2", "t2", svc.Payload{"tokens_used": 10}),
		mk(svc.EventToolCallCompleted, 95_000, "b", "k2", "t2", svc.Payload{"tool_name": "x", "duration_ms": 4}),
		mk(svc.EventAgentCompleted, 200_000, "a", "k3", "t3", svc.Payload{"tokens_used": 100}),
		mk(svc.EventAgentFailed, 400_000, "a", "k1", "t1", svc.Payload{"error": "TimeoutError: slow"}),
	)
	for _, c := range []struct {
		win    svc.Window
		tokens int64
		traces int64
		calls  int64
	}{
		{svc.Window{Since: at(1_000), Until: at(200_000)}, 11, 2, 1}, // t3 starts at until
		{svc.Window{Since: at(1_001), Until: at(200_001)}, 110, 3, 1},
		{svc.Window{Since: at(30_000), Until: at(180_000)}, 10, 2, 1}, // t1 spans it
		{svc.Window{Since: at(96_000), Until: at(199_999)}, 0, 1, 0},
		{svc.Window{Since: at(60_000), Until: at(120_000)}, 10, 2, 1}, // one whole minute
		{svc.Window{Until: at(1_000)}, 0, 1, 0},
		{svc.Window{Since: at(200_000)}, 100, 2, 0},
		{svc.Window{Since: at(400_001)}, 0, 0, 0},
	} {
		u, err := w.UsageIn(ctx, svc.GroupByNone, c.win)
		if err != nil || u.Total.TokensUsed != c.tokens {
			t.Errorf("UsageIn(%v .. %v) = %+v, %v; want %d tokens", c.win.Since, c.win.Until, u.Total, err, c.tokens)
		}
		st, err := w.RuntimeStatsIn(ctx, at(500_000), c.win)
		if err != nil || st.Header.TokensUsed != c.tokens || st.Header.Traces != c.traces {
			t.Errorf("RuntimeStatsIn(%v .. %v) header = %+v, %v; want %d tokens, %d traces", c.win.Since, c.win.Until, st.Header, err, c.tokens, c.traces)
		}
		tu, err := w.ToolUsageIn(ctx, svc.GroupByTool, c.win)
		var calls int64
		for _, r := range tu.Rows {
			calls += r.Calls
		}
		if err != nil || calls != c.calls {
			t.Errorf("ToolUsageIn(%v .. %v) = %+v, %v; want %d calls", c.win.Since, c.win.Until, tu, err, c.calls)
		}
	}
	st, err := w.RuntimeStatsIn(ctx, at(500_000), svc.Window{Since: at(300_000)})
	if err != nil || len(st.ErrorGroups) != 1 || st.Rejections["AgentRuntimeError"] != 1 || st.Header.AgentsFailed != 1 {
		t.Errorf("stats of the failure's window = %+v, %v", st, err)
	}
	st, err = w.RuntimeStatsIn(ctx, at(500_000), svc.Window{Until: at(300_000)})
	if err != nil || len(st.ErrorGroups) != 0 || len(st.Rejections) != 0 || st.Header.AgentsCompleted != 3 {
		t.Errorf("stats before the failure = %+v, %v", st, err)
	}
	if _, err := w.UsageIn(ctx, "", svc.Window{Since: at(2), Until: at(1)}); !errors.Is(err, svc.ErrSpecValidation) {
		t.Errorf("UsageIn with until before since = %v, want a SpecValidationError", err)
	}
}
