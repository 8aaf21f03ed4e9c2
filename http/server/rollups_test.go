package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/memevents"
	"github.com/svc-dev/svc/http/server"
)

// observedBackend adds a tool catalog and a run list to the fake backend.
type observedBackend struct {
	*fakeBackend
	lastFilter svc.RunFilter
}

func (o *observedBackend) Tools(context.Context) ([]svc.ToolDescriptor, error) {
	return []svc.ToolDescriptor{{Name: "clock", Description: "the time", InputSchema: json.RawMessage(`{"type":"object"}`),
		Access: "read", Source: "function", Agents: []string{"echo"}}}, nil
}

func (o *observedBackend) ToolServers(context.Context) ([]svc.ToolServerStatus, error) {
	return []svc.ToolServerStatus{{Name: "fs", Agent: "echo", Transport: "stdio", State: "ready", Tools: []string{"read"}}}, nil
}

func (o *observedBackend) ListRuns(_ context.Context, f svc.RunFilter) (svc.RunPage, error) {
	o.lastFilter = f
	return svc.RunPage{Runs: []svc.RunSummary{{RunID: "r1", Target: "echo", Kind: "agent", State: svc.RunCompleted}}, NextCursor: "next"}, nil
}

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func sampleEvents() []svc.RuntimeEvent {
	ev := func(sec int, typ svc.EventType, agent, trace string, p svc.Payload) svc.RuntimeEvent {
		return svc.RuntimeEvent{EventType: typ, Timestamp: t0.Add(time.Duration(sec) * time.Second), AgentName: agent, TraceID: trace, Payload: p}
	}
	return []svc.RuntimeEvent{
		ev(0, svc.EventAgentSpawned, "echo", "t1", svc.Payload{"backend": "local", "trust_level": "medium"}),
		ev(1, svc.EventToolCallStarted, "echo", "t1", svc.Payload{"tool_name": "clock", "trust_level": "medium"}),
		ev(2, svc.EventToolCallCompleted, "echo", "t1", svc.Payload{"tool_name": "clock", "duration_ms": 10.0, "tokens_used": 0}),
		ev(3, svc.EventToolCallFailed, "echo", "t1", svc.Payload{"tool_name": "clock", "duration_ms": 30.0, "error": "boom"}),
		ev(4, svc.EventAgentCompleted, "echo", "t1", svc.Payload{"duration_ms": 40.0, "tokens_used": 7, "cached_tokens": 4, "backend": "local", "model": "test:echo"}),
		ev(5, svc.EventAgentSpawned, "other", "t2", svc.Payload{"backend": "local", "trust_level": "medium"}),
		ev(6, svc.EventAgentCompleted, "other", "t2", svc.Payload{"duration_ms": 5.0, "tokens_used": 5, "backend": "local"}),
	}
}

func newStandaloneWithEvents(t *testing.T) (*httptest.Server, *observedBackend) {
	t.Helper()
	store := memevents.New(eventstore.Retention{})
	t.Cleanup(func() { _ = store.Close() })
	if err := store.Write(t.Context(), sampleEvents()); err != nil {
		t.Fatal(err)
	}
	b := &observedBackend{fakeBackend: &fakeBackend{}}
	h, err := server.NewStandalone(b, server.StandaloneConfig{Events: store})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, h), b
}

func decode[T any](t *testing.T, r reply) T {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("%s: %v", r.body, err)
	}
	return v
}

func TestEventsRoute(t *testing.T) {
	srv, _ := newStandaloneWithEvents(t)
	all := decode[[]svc.RuntimeEvent](t, do(t, srv, "GET", "/events", ""))
	if len(all) != 7 || all[0].EventType != svc.EventAgentCompleted || all[0].TraceID != "t2" {
		t.Fatalf("GET /events: %d events, first %+v; want 7, newest first", len(all), all[0])
	}
	if got := decode[[]svc.RuntimeEvent](t, do(t, srv, "GET", "/events?limit=2", "")); len(got) != 2 {
		t.Errorf("limit=2: %d events", len(got))
	}
	if got := decode[[]svc.RuntimeEvent](t, do(t, srv, "GET", "/events?trace_id=t1&event_type=tool_call_failed", "")); len(got) != 1 || got[0].Payload["error"] != "boom" {
		t.Errorf("trace_id+event_type: %+v", got)
	}
	// since (inclusive) as RFC 3339, until (exclusive) as Unix milliseconds.
	until := strconv.FormatInt(t0.Add(4*time.Second).UnixMilli(), 10)
	got := decode[[]svc.RuntimeEvent](t, do(t, srv, "GET", "/events?since=2026-11-22T10:00:02Z&until="+until, ""))
	if len(got) != 2 || got[0].EventType != svc.EventToolCallFailed || got[1].EventType != svc.EventToolCallCompleted {
		t.Errorf("since/until window: %+v", got)
	}
	for _, q := range []string{"limit=100001", "limit=0", "limit=x", "since=yesterday", "until=2026-13-01T00:00:00Z",
		"event_type=agent_exploded", "trace=t1", "limit=1&limit=2", "since=2026-11-22T10:00:05Z&until=2026-11-22T10:00:01Z"} {
		p := problem(t, do(t, srv, "GET", "/events?"+q, ""), http.StatusBadRequest)
		if p.Error != string(svc.KindSpecValidation) {
			t.Errorf("%s: error %q", q, p.Error)
		}
	}
	if got := decode[[]svc.RuntimeEvent](t, do(t, srv, "GET", "/events?limit=100000", "")); len(got) != 7 {
		t.Errorf("limit=100000 (the maximum) refused or wrong: %d", len(got))
	}
}

func TestUsageRoute(t *testing.T) {
	srv, _ := newStandaloneWithEvents(t)
	total := decode[svc.Usage](t, do(t, srv, "GET", "/usage", ""))
	if total.Total.TokensUsed != 12 || total.Total.CachedTokens != 4 || total.Total.Invocations != 2 || len(total.Groups) != 0 {
		t.Errorf("runtime-wide usage = %+v, want 12 tokens (4 cached) over 2 invocations and no groups", total)
	}
	byAgent := decode[svc.Usage](t, do(t, srv, "GET", "/usage?group_by=agent", ""))
	if byAgent.Groups["echo"].TokensUsed != 7 || byAgent.Groups["other"].TokensUsed != 5 || byAgent.GroupBy != "agent" {
		t.Errorf("by agent = %+v", byAgent)
	}
	byModel := decode[svc.Usage](t, do(t, srv, "GET", "/usage?group_by=model", ""))
	if byModel.Groups["test:echo"].TokensUsed != 7 || byModel.Groups[svc.UnknownModel].TokensUsed != 5 {
		t.Errorf("by model = %+v, want test:echo 7 and unknown 5", byModel)
	}
	byTrace := decode[svc.Usage](t, do(t, srv, "GET", "/usage?group_by=trace", ""))
	if byTrace.Groups["t1"].TokensUsed != 7 || byTrace.Groups["t2"].TokensUsed != 5 {
		t.Errorf("by trace = %+v", byTrace)
	}
	problem(t, do(t, srv, "GET", "/usage?group_by=planet", ""), http.StatusBadRequest)

	// cached_tokens on the wire, beside tokens_used: echo's completion
	// read 4 from a prompt cache; other's has no cached_tokens (no cache
	// hit, or an event from before the key) and counts 0, written out.
	type totals map[string]any
	raw := decode[struct {
		Total  totals            `json:"total"`
		Groups map[string]totals `json:"groups"`
	}](t, do(t, srv, "GET", "/usage?group_by=agent", ""))
	for what, got := range map[string]totals{"total": raw.Total, "echo": raw.Groups["echo"], "other": raw.Groups["other"]} {
		want := map[string]string{"total": "4", "echo": "4", "other": "0"}[what]
		if fmt.Sprint(got["cached_tokens"]) != want {
			t.Errorf("/usage?group_by=agent %s: cached_tokens %v, want %s (all: %v)", what, got["cached_tokens"], want, got)
		}
	}
}

func TestToolsRoute(t *testing.T) {
	srv, _ := newStandaloneWithEvents(t)
	ds := decode[[]svc.ToolDescriptor](t, do(t, srv, "GET", "/tools", ""))
	if len(ds) != 1 || ds[0].Name != "clock" || ds[0].Agents[0] != "echo" {
		t.Errorf("GET /tools = %+v, want the registered descriptors", ds)
	}
	u := decode[svc.ToolUsage](t, do(t, srv, "GET", "/tools?group_by=tool", ""))
	if len(u.Rows) != 1 {
		t.Fatalf("by tool = %+v", u)
	}
	r := u.Rows[0]
	if r.Tool != "clock" || r.Calls != 2 || r.Failures != 1 || r.AvgMS != 20 || r.P99MS != 30 {
		t.Errorf("clock row = %+v, want 2 calls, 1 failure, avg 20, p99 30", r)
	}
	at := decode[svc.ToolUsage](t, do(t, srv, "GET", "/tools?group_by=agent_tool", ""))
	if len(at.Rows) != 1 || at.Rows[0].Agent != "echo" {
		t.Errorf("by agent_tool = %+v", at)
	}
	problem(t, do(t, srv, "GET", "/tools?group_by=agent", ""), http.StatusBadRequest)
}

func TestStatsTreeAndRunsRoutes(t *testing.T) {
	srv, b := newStandaloneWithEvents(t)
	st := decode[svc.RuntimeStats](t, do(t, srv, "GET", "/runtime/stats", ""))
	if st.Header.AgentsCompleted != 2 || st.Header.ToolCalls != 2 || st.Header.ToolFailures != 1 || st.Header.TokensUsed != 12 {
		t.Errorf("stats header = %+v", st.Header)
	}
	if len(st.ToolServers) != 1 || st.ToolServers[0].Name != "fs" {
		t.Errorf("stats tool servers = %+v, want the backend's", st.ToolServers)
	}
	tree := decode[svc.EventTree](t, do(t, srv, "GET", "/runs/t1/tree", ""))
	// The sample's failed call has no tool_call_started: two tool nodes.
	if tree.Root == nil || len(tree.Root.Children) != 1 || tree.Root.Children[0].Kind != "agent" ||
		len(tree.Root.Children[0].Children) != 2 || tree.Root.Children[0].Children[1].Status != "failed" {
		t.Errorf("tree of t1 = %s", mustJSON(t, tree))
	}
	problem(t, do(t, srv, "GET", "/runs/nope/tree", ""), http.StatusNotFound)

	page := decode[svc.RunPage](t, do(t, srv, "GET", "/runs?state=completed&limit=10&cursor=abc", ""))
	if len(page.Runs) != 1 || page.NextCursor != "next" {
		t.Errorf("GET /runs = %+v", page)
	}
	if b.lastFilter != (svc.RunFilter{State: svc.RunCompleted, Limit: 10, Cursor: "abc"}) {
		t.Errorf("filter passed = %+v", b.lastFilter)
	}
	for _, q := range []string{"state=done", "limit=1001", "limit=-1", "page=2"} {
		problem(t, do(t, srv, "GET", "/runs?"+q, ""), http.StatusBadRequest)
	}
}

func TestRollupsNeedAnEventStore(t *testing.T) {
	h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)
	for _, p := range []string{"/events", "/usage", "/runtime/stats", "/runs/t1/tree", "/tools", "/runs"} {
		problem(t, do(t, srv, "GET", p, ""), http.StatusNotFound)
	}
}

// liveBackend reports runs in flight, as the runtime does.
type liveBackend struct {
	*fakeBackend
	runs int64
}

func (l *liveBackend) RunsInFlight() int64 { return l.runs }

// TestStatsRunsInFlight: the header's runs_in_flight is the backend's live
// count, not anything the events add up to (the sample's spawns all
// ended), and /runtime/stats is served without an event store when the
// backend has the count.
func TestStatsRunsInFlight(t *testing.T) {
	store := memevents.New(eventstore.Retention{})
	t.Cleanup(func() { _ = store.Close() })
	if err := store.Write(t.Context(), sampleEvents()); err != nil {
		t.Fatal(err)
	}
	b := &liveBackend{fakeBackend: &fakeBackend{}, runs: 3}
	for _, events := range []svc.EventReader{store, nil} {
		h, err := server.NewStandalone(b, server.StandaloneConfig{Events: events})
		if err != nil {
			t.Fatal(err)
		}
		st := decode[svc.RuntimeStats](t, do(t, serve(t, h), "GET", "/runtime/stats", ""))
		if st.Header.RunsInFlight != 3 {
			t.Errorf("events %v: runs_in_flight = %d, want the backend's 3", events != nil, st.Header.RunsInFlight)
		}
		if events == nil && (st.Header.AgentsStarted != 0 || st.Rejections == nil || st.ErrorGroups == nil || st.Workers == nil) {
			t.Errorf("without an event store: %s", mustJSON(t, st))
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
