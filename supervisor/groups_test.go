package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/group"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/supervisor"
)

func fixed(name string, output string, extra map[string]any) svc.Agent {
	s := map[string]any{"output": json.RawMessage(output)}
	for k, v := range extra {
		s[k] = v
	}
	return svc.Agent{Name: name, Model: "test:echo", ModelSettings: s}
}

func mustGroup(t *testing.T, b *group.Builder) svc.Group {
	t.Helper()
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func groupRuntime(t *testing.T, rec svc.Emitter, agents []svc.Agent, groups ...svc.Group) *supervisor.Runtime {
	t.Helper()
	rt := newRuntime(t, svc.Options{}, rec, nil, agents...)
	if err := rt.RegisterGroups(groups...); err != nil {
		t.Fatal(err)
	}
	return rt
}

func TestGroupPipeline(t *testing.T) {
	rec := &emittertest.Recorder{}
	g := mustGroup(t, group.New("pipe").Node("a", "echo").Node("b", "echo").Node("c", "echo").Edge("a", "b").Edge("b", "c"))
	rt := groupRuntime(t, rec, []svc.Agent{echo("echo", nil)}, g)
	res, err := rt.RunGroup(context.Background(), "pipe", svc.TaskSpec{ID: "t1", Input: json.RawMessage(`{"text":"one two"}`), RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	a := res.Agent
	if a == nil || res.Group != nil || !a.Success || string(a.Output) != `{"text":"one two"}` || a.TaskID != "t1" || a.Metadata.TraceID != "r1" {
		t.Fatalf("result = %+v", res)
	}
	completed := rec.OfType(svc.EventAgentCompleted)
	if len(completed) != 3 {
		t.Fatalf("agent_completed = %d, want one per node", len(completed))
	}
	var sum int64
	for _, ev := range completed {
		if ev.TraceID != "r1" {
			t.Errorf("node event trace = %q", ev.TraceID)
		}
		sum += ev.Payload["tokens_used"].(int64)
	}
	if a.Metadata.TokensUsed != sum {
		t.Errorf("tokens %d, want the sum over nodes %d", a.Metadata.TokensUsed, sum)
	}
	gs, gc := rec.OfType(svc.EventGroupStarted), rec.OfType(svc.EventGroupCompleted)
	if len(gs) != 1 || len(gc) != 1 || gs[0].Payload["node_count"] != 3 || gc[0].Payload["group_name"] != "pipe" || gs[0].TraceID != "r1" {
		t.Fatalf("group events %+v %+v", gs, gc)
	}
	emittertest.CheckPayload(t, gs[0])
	emittertest.CheckPayload(t, gc[0])
}

func TestGroupBranchRouting(t *testing.T) {
	rec := &emittertest.Recorder{}
	g := mustGroup(t, group.New("support").Node("triage", "triage").Node("billing", "billing").Node("tech", "tech").
		Edge("triage", "billing", group.When(`output.category == "billing"`)).
		Edge("triage", "tech", group.When(`output.category == "tech"`)))
	rt := groupRuntime(t, rec, []svc.Agent{
		fixed("triage", `{"category":"billing"}`, nil), fixed("billing", `"refund issued"`, nil), fixed("tech", `"rebooted"`, nil),
	}, g)
	res, err := rt.RunGroup(context.Background(), "support", svc.TaskSpec{Input: json.RawMessage(`"my bill"`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Agent == nil || res.Agent.AgentName != "billing" || string(res.Agent.Output) != `"refund issued"` {
		t.Fatalf("result = %+v", res)
	}
	for _, ev := range rec.Events() {
		if ev.AgentName == "tech" {
			t.Fatalf("tech ran although its condition was false: %+v", ev)
		}
	}
}

func TestGroupSeveralTerminals(t *testing.T) {
	g := mustGroup(t, group.New("panel").Node("mod", "echo").Node("a", "sa").Node("b", "sb").Edge("mod", "a").Edge("mod", "b"))
	rt := groupRuntime(t, nil, []svc.Agent{echo("echo", nil), fixed("sa", `"A"`, nil), fixed("sb", `"B"`, nil)}, g)
	res, err := rt.RunGroup(context.Background(), "panel", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	gr := res.Group
	if gr == nil || res.Agent != nil || !gr.Group || !gr.Success || len(gr.Outputs) != 2 ||
		string(gr.Outputs["a"].Output) != `"A"` || string(gr.Outputs["b"].Output) != `"B"` || gr.Metadata.Invocations != 3 {
		t.Fatalf("result = %+v", res)
	}
	b, _ := json.Marshal(res)
	if !strings.Contains(string(b), `"group":true`) {
		t.Fatalf("GroupResult JSON lacks the group key: %s", b)
	}
}

func TestGroupNoTerminalFired(t *testing.T) {
	g := mustGroup(t, group.New("none").Node("a", "echo").Node("b", "echo").Edge("a", "b", group.When(`output == "never"`)))
	rt := groupRuntime(t, nil, []svc.Agent{echo("echo", nil)}, g)
	_, err := rt.RunGroup(context.Background(), "none", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if !errors.Is(err, svc.ErrTopology) {
		t.Fatalf("err = %v, want TopologyError", err)
	}
}

// A condition that compiled but fails on a run's data (a missing key, the
// cost limit, an overflow) fails the run with a ConditionError, not the
// TopologyError (400) of a bad group: the request was fine.
func TestGroupConditionErrorAtRunTime(t *testing.T) {
	for name, when := range map[string]string{
		"missing key": `output.missing == 1`,
		"cost limit":  `lists.range(100000).map(x, lists.range(1000).map(y, y)).size() > 0`,
		"overflow":    `int(output.x) * 9223372036854775807 > 0`,
	} {
		t.Run(name, func(t *testing.T) {
			g := mustGroup(t, group.New("bad").Node("a", "echo").Node("b", "echo").Edge("a", "b", group.When(when)))
			rt := groupRuntime(t, nil, []svc.Agent{echo("echo", nil)}, g)
			_, err := rt.RunGroup(context.Background(), "bad", svc.TaskSpec{Input: json.RawMessage(`{"x":2}`)})
			if !errors.Is(err, svc.ErrCondition) || errors.Is(err, svc.ErrTopology) || svc.KindOf(err) != svc.KindCondition ||
				!strings.Contains(err.Error(), "edges[0].when") {
				t.Fatalf("err = %v (%s), want a ConditionError naming edges[0].when", err, svc.KindOf(err))
			}
			// Submitted, the run fails with the same kind in its result.
			id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "bad", Task: svc.TaskSpec{Input: json.RawMessage(`{"x":2}`)}})
			if err != nil {
				t.Fatal(err)
			}
			waitState(t, rt, id, svc.RunFailed)
			res, err := rt.RunResult(context.Background(), id)
			if err != nil || !strings.Contains(string(res), `"ConditionError"`) {
				t.Fatalf("result %s, %v; want a failed result of type ConditionError", res, err)
			}
		})
	}
}

func TestGroupFanOut(t *testing.T) {
	var mu sync.Mutex
	var seen []svc.RunProgress
	ctx := svc.WithProgress(context.Background(), func(p svc.RunProgress) {
		mu.Lock()
		seen = append(seen, p)
		mu.Unlock()
	})
	g := mustGroup(t, group.New("fan").Node("src", "src").Node("work", "worker").Node("sum", "echo").
		Edge("src", "work", group.FanOut("output.items", 2)).Edge("work", "sum"))
	rt := groupRuntime(t, nil, []svc.Agent{
		fixed("src", `{"items":[1,"bad",3,4]}`, nil), echo("worker", map[string]any{"fail_on": "bad"}), echo("echo", nil),
	}, g)
	res, err := rt.RunGroup(ctx, "fan", svc.TaskSpec{Input: json.RawMessage(`"go"`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Agent == nil || string(res.Agent.Output) != `[1,3,4]` {
		t.Fatalf("result = %+v (failed items are dropped, the rest keep their order)", res.Agent)
	}
	mu.Lock()
	defer mu.Unlock()
	last := seen[len(seen)-1]
	if last.Total != 6 || last.Completed != 5 || last.Failed != 1 || last.Running != 0 {
		t.Fatalf("final progress %+v, want total 6 (1 + 4 items + 1), 5 completed, 1 failed", last)
	}
	if seen[0].Total != 1 {
		t.Errorf("progress should start at total 1 and grow as the fan-out resolves: %+v", seen[0])
	}
}

func TestGroupFanOutAllFail(t *testing.T) {
	g := mustGroup(t, group.New("fan").Node("src", "src").Node("work", "worker").Edge("src", "work", group.FanOut("output", 0)))
	rt := groupRuntime(t, nil, []svc.Agent{fixed("src", `["bad","bad"]`, nil), echo("worker", map[string]any{"fail_on": "bad"})}, g)
	_, err := rt.RunGroup(context.Background(), "fan", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if !errors.Is(err, svc.ErrAllAgentsFailed) {
		t.Fatalf("err = %v, want AllAgentsFailedError", err)
	}
}

func TestGroupMultiInput(t *testing.T) {
	g := mustGroup(t, group.New("join").Node("a", "fa").Node("b", "fb").Node("c", "echo").Edge("a", "c").Edge("b", "c"))
	rt := groupRuntime(t, nil, []svc.Agent{fixed("fa", `"from a"`, nil), fixed("fb", `{"n":2}`, nil), echo("echo", nil)}, g)
	res, err := rt.RunGroup(context.Background(), "join", svc.TaskSpec{Input: json.RawMessage(`0`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Agent.Output) != `{"a":"from a","b":{"n":2}}` {
		t.Fatalf("multi-input = %s", res.Agent.Output)
	}
}

// A node failure fails the run at once and stops the nodes still running.
func TestGroupNodeFailureStopsOthers(t *testing.T) {
	rec := &emittertest.Recorder{}
	g := mustGroup(t, group.New("g").Node("a", "echo").Node("slow", "slow").Node("bad", "bad").Edge("a", "slow").Edge("a", "bad"))
	rt := groupRuntime(t, rec, []svc.Agent{echo("echo", nil), echo("slow", map[string]any{"latency_ms": 30000}), {Name: "bad", Model: "test:fail"}}, g)
	start := time.Now()
	res, err := rt.RunGroup(context.Background(), "g", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Agent == nil || res.Agent.Success || res.Agent.AgentName != "bad" {
		t.Fatalf("result = %+v, want the failed node's result", res.Agent)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("the run waited for the slow node: %v", time.Since(start))
	}
	// The slow node's invocation was cancelled, not left running.
	testutil.Eventually(t, "the slow node to be stopped", func() bool {
		for _, ev := range rec.OfType(svc.EventAgentFailed) {
			if ev.AgentName == "slow" {
				return true
			}
		}
		return false
	})
}

// Scheduling is by dataflow, not tier by tier: a short branch finishes while
// a long one is still running.
func TestGroupDataflowScheduling(t *testing.T) {
	rec := &emittertest.Recorder{}
	g := mustGroup(t, group.New("df").Node("a", "echo").Node("slow", "slow").Node("f1", "echo").Node("f2", "echo").Node("f3", "echo").
		Edge("a", "slow").Edge("a", "f1").Edge("f1", "f2").Edge("f2", "f3"))
	rt := groupRuntime(t, rec, []svc.Agent{echo("echo", nil), echo("slow", map[string]any{"latency_ms": 300})}, g)
	if _, err := rt.RunGroup(context.Background(), "df", svc.TaskSpec{ID: "t", Input: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	order := map[string]int{}
	for i, ev := range rec.OfType(svc.EventAgentCompleted) {
		order[ev.TaskID] = i
	}
	if order["t/f3"] > order["t/slow"] {
		t.Fatalf("f3 (third of a short branch) finished after slow: %v", order)
	}
}

func TestGroupCancel(t *testing.T) {
	g := mustGroup(t, group.New("g").Node("a", "slow").Node("b", "echo").Edge("a", "b"))
	rt := groupRuntime(t, nil, []svc.Agent{echo("echo", nil), echo("slow", map[string]any{"latency_ms": 30000})}, g)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := rt.RunGroup(ctx, "g", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if !errors.Is(err, svc.ErrCancelled) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("cancel took %v", time.Since(start))
	}
}

func TestGroupUnknownAndTopology(t *testing.T) {
	g := mustGroup(t, group.New("pipe").Node("a", "echo").Node("b", "echo").Edge("a", "b", group.When(`output != 0`)))
	rt := groupRuntime(t, nil, []svc.Agent{echo("echo", nil)}, g)
	if _, err := rt.RunGroup(context.Background(), "nope", svc.TaskSpec{Input: json.RawMessage(`1`)}); !errors.Is(err, svc.ErrRegistry) ||
		err.Error() != `unknown group "nope" (registered groups: pipe)` {
		t.Fatalf("unknown group: %v, want a RegistryError listing the groups", err)
	}
	// A name of the other kind says which call to make instead.
	if _, err := rt.RunGroup(context.Background(), "echo", svc.TaskSpec{Input: json.RawMessage(`1`)}); !errors.Is(err, svc.ErrRegistry) ||
		!strings.Contains(err.Error(), "echo is an agent: POST /agents/echo/run") {
		t.Fatalf("group run of an agent: %v, want a RegistryError pointing at the agent route", err)
	}
	if _, err := rt.Run(context.Background(), "pipe", svc.TaskSpec{Input: json.RawMessage(`1`)}); !errors.Is(err, svc.ErrRegistry) ||
		!strings.Contains(err.Error(), "pipe is a group: POST /groups/pipe/run") {
		t.Fatalf("agent run of a group: %v, want a RegistryError pointing at the group route", err)
	}
	if _, err := rt.Run(context.Background(), "nope", svc.TaskSpec{Input: json.RawMessage(`1`)}); err == nil ||
		err.Error() != `unknown agent "nope" (registered agents: echo)` {
		t.Fatalf("unknown agent: %v, want it to list the agents", err)
	}
	top, err := rt.GroupTopology(context.Background(), "pipe")
	if err != nil || fmt.Sprint(top.Entry) != "[a]" || fmt.Sprint(top.Terminal) != "[b]" || top.Edges[0].When != `output != 0` || !strings.Contains(top.Mermaid, "flowchart") {
		t.Fatalf("topology = %+v, %v", top, err)
	}
	names, _ := rt.Groups(context.Background())
	if fmt.Sprint(names) != "[pipe]" {
		t.Fatalf("groups = %v", names)
	}
	// A group naming an agent that is not registered is refused.
	bad := svc.Group{Name: "bad", Nodes: []svc.GroupNode{{Name: "x", Agent: "ghost"}}}
	if err := rt.RegisterGroups(bad); !errors.Is(err, svc.ErrTopology) {
		t.Fatalf("unknown agent: %v", err)
	}
}

// Replace swaps agents and groups together; a run in flight keeps the
// definitions it started with.
func TestReplaceKeepsInFlightDefinitions(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil, fixed("v", `"old"`, map[string]any{"latency_ms": 300}))
	done := make(chan svc.AgentResult, 1)
	go func() {
		r, _ := rt.Run(context.Background(), "v", svc.TaskSpec{Input: json.RawMessage(`1`)})
		done <- r
	}()
	time.Sleep(50 * time.Millisecond)
	if err := rt.Replace([]svc.Agent{fixed("v", `"new"`, nil)}, nil); err != nil {
		t.Fatal(err)
	}
	if r := <-done; string(r.Output) != `"old"` {
		t.Fatalf("in-flight run saw %s", r.Output)
	}
	r, _ := rt.Run(context.Background(), "v", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if string(r.Output) != `"new"` {
		t.Fatalf("after Replace: %s", r.Output)
	}
	// A Replace that fails validation changes nothing.
	bad := svc.Group{Name: "g", Nodes: []svc.GroupNode{{Name: "x", Agent: "ghost"}}}
	if err := rt.Replace([]svc.Agent{fixed("v", `"newer"`, nil)}, []svc.Group{bad}); err == nil {
		t.Fatal("bad Replace accepted")
	}
	r, _ = rt.Run(context.Background(), "v", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if string(r.Output) != `"new"` {
		t.Fatalf("failed Replace changed the agents: %s", r.Output)
	}
}

func TestTeam(t *testing.T) {
	rec := &emittertest.Recorder{}
	lead := svc.Agent{Name: "lead", Model: "test:echo", TrustLevel: svc.TrustLow, ModelSettings: map[string]any{"call_tools": "all"}}
	team := group.Team("crew", "lead", []string{"researcher", "writer"}, 3)
	rt := groupRuntime(t, rec, []svc.Agent{lead, fixed("researcher", `"facts"`, nil), fixed("writer", `"prose"`, nil)}, team)
	res, err := rt.RunGroup(context.Background(), "crew", svc.TaskSpec{Input: json.RawMessage(`"topic"`), RequestID: "tr"})
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Tools map[string]struct {
			Success bool            `json:"success"`
			Output  json.RawMessage `json:"output"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(res.Agent.Output, &out); err != nil || !out.Tools["delegate"].Success || string(out.Tools["delegate"].Output) != `"facts"` {
		t.Fatalf("team result = %s", res.Agent.Output)
	}
	var delegated bool
	for _, ev := range rec.OfType(svc.EventAgentCompleted) {
		delegated = delegated || (ev.AgentName == "researcher" && ev.TraceID == "tr")
	}
	if !delegated || len(rec.OfType(svc.EventGroupStarted)) != 1 {
		t.Fatalf("delegate events missing: %+v", rec.Events())
	}
	top, _ := rt.GroupTopology(context.Background(), "crew")
	if top.Kind != "team" || top.Coordinator != "lead" || len(top.Delegates) != 2 {
		t.Fatalf("team topology = %+v", top)
	}
}

// The coordinator may delegate at most max_rounds times per run; the next
// call fails as a tool error the model sees.
func TestTeamMaxRounds(t *testing.T) {
	reg := model.Default()
	reg.Register("loop", func(string) (svc.Model, error) {
		return svc.ModelFunc(func(_ context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			if n := len(req.Messages); n < 5 { // two rounds of one delegate call each
				return svc.ModelResponse{ToolCalls: []svc.ToolCall{{ID: fmt.Sprint(n), Name: "delegate",
					Arguments: json.RawMessage(`{"target":"helper","input":1}`)}}}, nil
			}
			last := req.Messages[len(req.Messages)-1]
			return svc.ModelResponse{Output: last.Content}, nil
		}), nil
	})
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, svc.Options{}, rec, reg, svc.Agent{Name: "boss", Model: "loop:x"}, echo("helper", nil))
	if err := rt.RegisterGroups(group.Team("t", "boss", []string{"helper"}, 1)); err != nil {
		t.Fatal(err)
	}
	res, err := rt.RunGroup(context.Background(), "t", svc.TaskSpec{Input: json.RawMessage(`0`)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res.Agent.Output), "max_rounds") {
		t.Fatalf("second delegate call should fail with max_rounds: %s", res.Agent.Output)
	}
	if n := len(rec.OfType(svc.EventToolCallFailed)); n != 1 {
		t.Fatalf("tool_call_failed = %d, want 1", n)
	}
}

// Budget and depth apply inside groups and teams as for single runs.
func TestGroupBudgetAndTeamDepth(t *testing.T) {
	o := opts(func(o *svc.Options) { o.MaxTokensPerRun = 15; o.MaxSpawnDepth = 0 })
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, o, rec, nil, echo("spend", map[string]any{"tokens": 10}),
		svc.Agent{Name: "lead", Model: "test:echo", TrustLevel: svc.TrustLow, ModelSettings: map[string]any{"call_tools": "all"}},
		echo("helper", nil))
	g := mustGroup(t, group.New("g").Node("a", "spend").Node("b", "spend").Edge("a", "b"))
	if err := rt.RegisterGroups(g, group.Team("t", "lead", []string{"helper"}, 2)); err != nil {
		t.Fatal(err)
	}
	// Two nodes of 10 tokens each share one budget of 15: the second fails.
	if _, err := rt.RunGroup(context.Background(), "g", svc.TaskSpec{Input: json.RawMessage(`1`)}); !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("group over budget: %v", err)
	}
	// max_spawn_depth 0: the team's coordinator runs, its delegate may not.
	res, err := rt.RunGroup(context.Background(), "t", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.OfType(svc.EventDepthLimitExceeded)) != 1 || !strings.Contains(string(res.Agent.Output), "max_spawn_depth") {
		t.Fatalf("delegate past max_spawn_depth: %s", res.Agent.Output)
	}
}

func TestGatherProgress(t *testing.T) {
	var mu sync.Mutex
	var last svc.RunProgress
	var maxRunning int
	ctx := svc.WithProgress(context.Background(), func(p svc.RunProgress) {
		mu.Lock()
		last = p
		maxRunning = max(maxRunning, p.Running)
		mu.Unlock()
	})
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("e", map[string]any{"fail_on": "x"}))
	tasks := []svc.TaskSpec{{Input: json.RawMessage(`1`)}, {Input: json.RawMessage(`"x"`)}, {Input: json.RawMessage(`3`)}}
	if _, err := rt.Gather(ctx, "e", tasks, 2); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if last != (svc.RunProgress{Total: 3, Completed: 2, Failed: 1}) || maxRunning < 1 || maxRunning > 2 {
		t.Fatalf("progress = %+v, max running %d", last, maxRunning)
	}
}
