package spawn_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/supervisor/spawn"
	"go.uber.org/goleak"
)

// fakeRuns stands for the runtime: registered agents by name, and a Run
// that records what it was asked and answers with run's result.
type fakeRuns struct {
	registered map[string]svc.Agent
	run        func(ctx context.Context, c *agent.Compiled, task svc.TaskSpec) (svc.AgentResult, error)
	path       []string
	rounds     *atomic.Int64
	rec        emittertest.Recorder

	mu       sync.Mutex
	calls    []call
	compiled []compiled
}

type call struct {
	def  svc.Agent
	task svc.TaskSpec
	path []string
}

type compiled struct {
	def   svc.Agent
	owner string
}

func (f *fakeRuns) runs() *spawn.Runs {
	return &spawn.Runs{
		Lookup: func(name string) (*agent.Compiled, error) {
			a, ok := f.registered[name]
			if !ok {
				return nil, svc.Errorf(svc.KindRegistry, "unknown agent %q", name)
			}
			return &agent.Compiled{Def: a}, nil
		},
		Compile: func(def svc.Agent, owner string) (*agent.Compiled, error) {
			f.mu.Lock()
			f.compiled = append(f.compiled, compiled{def, owner})
			f.mu.Unlock()
			return &agent.Compiled{Def: def}, nil
		},
		Run: func(ctx context.Context, c *agent.Compiled, task svc.TaskSpec, path []string) (svc.AgentResult, error) {
			f.mu.Lock()
			f.calls = append(f.calls, call{c.Def, task, path})
			f.mu.Unlock()
			if f.run != nil {
				return f.run(ctx, c, task)
			}
			return svc.AgentResult{AgentName: c.Def.Name, Success: true, Output: task.Input}, nil
		},
		Path:    func(context.Context) []string { return f.path },
		Rounds:  func(context.Context) *atomic.Int64 { return f.rounds },
		Emitter: &f.rec,
		Backend: "local",
	}
}

type childResult struct {
	Name    string          `json:"name"`
	Success bool            `json:"success"`
	Output  json.RawMessage `json:"output"`
	Error   *svc.ErrorInfo  `json:"error"`
}

// results calls tool with args and returns the children's results.
func results(t *testing.T, tool svc.Tool, ctx context.Context, args string) []childResult {
	t.Helper()
	out, err := tool.Call(ctx, json.RawMessage(args))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	var rs []childResult
	if err := json.Unmarshal(out, &rs); err != nil {
		t.Fatalf("output %s: %v", out, err)
	}
	return rs
}

// nopTool is a tool a parent has, for its children to inherit.
type nopTool struct{}

func (nopTool) Name() string                 { return "nop" }
func (nopTool) Description() string          { return "does nothing" }
func (nopTool) InputSchema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (nopTool) Access() svc.Access           { return svc.AccessRead }
func (nopTool) Call(context.Context, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

var parent = svc.Agent{Name: "boss", Model: "test:echo", FallbackModels: []string{"test:fail"}, TrustLevel: svc.TrustMedium,
	ModelSettings: map[string]any{"tokens": 3}, Tools: []svc.Tool{nopTool{}}, BuiltinTools: []string{spawn.AgentsTool},
	MCPServers: []svc.MCPServer{{Name: "fs", Transport: "stdio", Command: "x"}}, Instructions: "boss", InputType: json.RawMessage(`{"type":"object"}`)}

// A registered child runs as registered; a new child is derived from its
// parent (its model, settings, trust, tools and servers, not its schemas
// or instructions) with the parent's MCP servers; each runs with a trace
// of its own along the spawn path, and the results come back in the order
// asked.
func TestChildren(t *testing.T) {
	f := &fakeRuns{registered: map[string]svc.Agent{"reg": {Name: "reg", Model: "test:echo", TrustLevel: svc.TrustLow}}}
	tool := spawn.NewAgentsTool(f.runs(), parent)
	rs := results(t, tool, context.Background(), `{"agents":[{"name":"new","instructions":"do it","input":{"x":1}},{"name":"reg","input":2},{"name":"bare","instructions":"b"}]}`)
	if len(rs) != 3 || rs[0].Name != "new" || string(rs[0].Output) != `{"x":1}` || rs[1].Name != "reg" ||
		string(rs[1].Output) != "2" || string(rs[2].Output) != "null" || !rs[0].Success || !rs[1].Success {
		t.Fatalf("results %+v", rs)
	}
	if len(f.compiled) != 2 {
		t.Fatalf("compiled %+v, want the two new agents", f.compiled)
	}
	i := slices.IndexFunc(f.compiled, func(c compiled) bool { return c.def.Name == "new" })
	if i < 0 {
		t.Fatalf("compiled %+v, want new", f.compiled)
	}
	c := f.compiled[i]
	if c.owner != "boss" || c.def.Name != "new" || c.def.Instructions != "do it" || c.def.Model != parent.Model ||
		!slices.Equal(c.def.FallbackModels, parent.FallbackModels) || c.def.TrustLevel != parent.TrustLevel ||
		len(c.def.Tools) != 1 || len(c.def.MCPServers) != 1 || c.def.ModelSettings["tokens"] != 3 ||
		len(c.def.InputType) != 0 || !slices.Equal(c.def.BuiltinTools, parent.BuiltinTools) {
		t.Errorf("derived child %+v (owner %s)", c.def, c.owner)
	}
	for _, cl := range f.calls {
		if cl.task.RequestID != "" {
			t.Errorf("%s: request id %q, want a trace of its own", cl.def.Name, cl.task.RequestID)
		}
		if want := []string{"boss", cl.def.Name}; !slices.Equal(cl.path, want) {
			t.Errorf("%s: path %v, want %v", cl.def.Name, cl.path, want)
		}
	}
}

// A parent that was itself spawned extends its path rather than adding
// itself again; a child already on the path is refused as a spawn cycle,
// emitted as its agent_failed under the parent's trace, and never runs.
func TestCycle(t *testing.T) {
	f := &fakeRuns{path: []string{"top", "boss"}}
	tool := spawn.NewAgentsTool(f.runs(), parent)
	ctx := svc.WithScope(context.Background(), svc.Scope{Depth: 1, ParentTrace: "tr", ParentSpan: "sp"})
	rs := results(t, tool, ctx, `{"agents":[{"name":"top","instructions":"x"},{"name":"kid","instructions":"x"}]}`)
	if len(rs) != 2 || rs[0].Success || rs[0].Error == nil || rs[0].Error.Type != "SpawnCycleError" ||
		!strings.Contains(rs[0].Error.Message, "top → boss") || !rs[1].Success {
		t.Fatalf("results %+v", rs)
	}
	if len(f.calls) != 1 || !slices.Equal(f.calls[0].path, []string{"top", "boss", "kid"}) {
		t.Errorf("runs %+v, want kid only, along top → boss → kid", f.calls)
	}
	evs := f.rec.OfType(svc.EventAgentFailed)
	if len(evs) != 1 || evs[0].AgentName != "top" || evs[0].TraceID != "tr" || evs[0].ParentSpanID != "sp" ||
		evs[0].Payload["reason"] != "SpawnCycleError" || evs[0].Payload["backend"] != "local" {
		t.Errorf("agent_failed %+v", evs)
	}
	emittertest.CheckPayload(t, evs[0])
}

// A child may not do more than its parent: a registered agent of a higher
// trust level, or an unknown one, is a failed result, and so is a child
// whose run fails or is refused; none fails the call.
func TestRefusedChildrenAreResults(t *testing.T) {
	f := &fakeRuns{registered: map[string]svc.Agent{"root": {Name: "root", TrustLevel: svc.TrustHigh}}}
	f.run = func(_ context.Context, c *agent.Compiled, _ svc.TaskSpec) (svc.AgentResult, error) {
		return svc.AgentResult{}, &svc.Error{Kind: svc.KindDepthLimit, Message: "too deep"}
	}
	tool := spawn.NewAgentsTool(f.runs(), parent)
	rs := results(t, tool, context.Background(), `{"agents":[{"name":"root"},{"name":"ghost"},{"name":"deep","instructions":"x"}]}`)
	var kinds []string
	for _, r := range rs {
		if r.Success || r.Error == nil || string(r.Output) != "null" {
			t.Fatalf("result %+v should be a failure", r)
		}
		kinds = append(kinds, r.Error.Type)
	}
	if want := []string{"TrustViolationError", "RegistryError", "DepthLimitError"}; !slices.Equal(kinds, want) {
		t.Errorf("errors %v, want %v", kinds, want)
	}
}

// With context_passer full, each child is told its parent's conversation
// in its instructions; its input stays its input.
func TestContextPasser(t *testing.T) {
	f := &fakeRuns{registered: map[string]svc.Agent{"reg": {Name: "reg", Instructions: "reg"}}}
	p := parent.Clone()
	p.ContextPasser = svc.ContextFull
	conv := []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"the ticket"`)}}
	ctx := svc.WithScope(context.Background(), svc.Scope{Depth: 0, Conversation: func() []svc.Message { return conv }})
	results(t, spawn.NewAgentsTool(f.runs(), p), ctx, `{"agents":[{"name":"new","instructions":"go","input":5},{"name":"reg"}]}`)
	if len(f.compiled) != 2 {
		t.Fatalf("compiled %+v", f.compiled)
	}
	for _, c := range f.compiled {
		if !strings.Contains(c.def.Instructions, "spawned by agent boss") || !strings.Contains(c.def.Instructions, "the ticket") {
			t.Errorf("%s: instructions %q should carry the conversation", c.def.Name, c.def.Instructions)
		}
	}
	for _, c := range f.compiled {
		if c.def.Name == "reg" && (c.owner != "reg" || !strings.HasPrefix(c.def.Instructions, "reg")) {
			t.Errorf("registered child compiled %+v, want its own definition and servers", c)
		}
	}
	for _, c := range f.calls {
		if c.def.Name == "new" && string(c.task.Input) != "5" {
			t.Errorf("new's input %s, want 5", c.task.Input)
		}
	}
}

// A malformed call fails as a whole, and starts nothing.
func TestBadArguments(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{`{"agents":[]}`, "at least one agent"},
		{`{"agents":[{"name":"a b","instructions":"x"}]}`, `agents[0].name`},
		{`{"agents":[{"name":"a","instructions":"x"}],"max_concurrency":99}`, "max_concurrency 99"},
		{`{"agents":[{"name":"a","instructions":"x","extra":1}]}`, "bad arguments"},
	} {
		f := &fakeRuns{}
		_, err := spawn.NewAgentsTool(f.runs(), parent).Call(context.Background(), json.RawMessage(tc.args))
		if !errors.Is(err, svc.ErrToolExecution) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a ToolExecutionError saying %q", tc.args, err, tc.want)
		}
		if len(f.calls) != 0 {
			t.Errorf("%s: %d children ran", tc.args, len(f.calls))
		}
	}
}

// A call asking for more children than max_spawn_children (Runs.
// MaxChildren, 32 when 0) is a SpawnCapError, and starts none of them; up
// to the limit, all run. The schema tells the model the limit.
func TestSpawnCap(t *testing.T) {
	ask := func(n int) string {
		return `{"agents":[` + strings.TrimSuffix(strings.Repeat(`{"name":"a","instructions":"x"},`, n), ",") + `]}`
	}
	for _, tc := range []struct{ configured, limit int }{{0, 32}, {3, 3}, {50, 50}} {
		f := &fakeRuns{}
		runs := f.runs()
		runs.MaxChildren = tc.configured
		tool := spawn.NewAgentsTool(runs, parent)
		var schema struct {
			Properties struct {
				Agents struct {
					MaxItems int `json:"maxItems"`
				} `json:"agents"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(tool.InputSchema(), &schema); err != nil || schema.Properties.Agents.MaxItems != tc.limit {
			t.Errorf("limit %d: schema maxItems %d (%v), want the limit", tc.limit, schema.Properties.Agents.MaxItems, err)
		}
		_, err := tool.Call(context.Background(), json.RawMessage(ask(tc.limit+1)))
		var e *svc.Error
		if !errors.As(err, &e) || e.Kind != svc.KindSpawnCap || e.Agent != parent.Name ||
			!strings.Contains(err.Error(), fmt.Sprintf("asked for %d agents", tc.limit+1)) ||
			!strings.Contains(err.Error(), fmt.Sprintf("max_spawn_children is %d", tc.limit)) {
			t.Errorf("limit %d, %d asked: %v, want a SpawnCapError of %s naming both", tc.limit, tc.limit+1, err, parent.Name)
		}
		if len(f.calls) != 0 {
			t.Errorf("limit %d: %d children ran after the refusal", tc.limit, len(f.calls))
		}
		if _, err := tool.Call(context.Background(), json.RawMessage(ask(tc.limit))); err != nil || len(f.calls) != tc.limit {
			t.Errorf("limit %d, as many asked: %v, %d children ran", tc.limit, err, len(f.calls))
		}
	}
}

// max_concurrency bounds the children running at once; without it the
// default applies.
func TestConcurrency(t *testing.T) {
	for _, tc := range []struct {
		max   string
		bound int64
	}{{`,"max_concurrency":2`, 2}, {``, spawn.DefaultConcurrency}} {
		var cur, peak atomic.Int64
		f := &fakeRuns{run: func(_ context.Context, c *agent.Compiled, task svc.TaskSpec) (svc.AgentResult, error) {
			n := cur.Add(1)
			defer cur.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			return svc.AgentResult{Success: true, Output: task.Input}, nil
		}}
		var agents []string
		for i := range 3 * spawn.DefaultConcurrency {
			agents = append(agents, fmt.Sprintf(`{"name":"c%d","instructions":"child"}`, i))
		}
		rs := results(t, spawn.NewAgentsTool(f.runs(), parent), context.Background(),
			`{"agents":[`+strings.Join(agents, ",")+`]`+tc.max+`}`)
		if len(rs) != len(agents) {
			t.Fatalf("%d results", len(rs))
		}
		if p := peak.Load(); p > tc.bound || p < 1 {
			t.Errorf("max_concurrency %q: peak %d, bound %d", tc.max, p, tc.bound)
		}
	}
}

// Children not started when the parent's run ends never start, and say so.
func TestCancelledParent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeRuns{run: func(_ context.Context, c *agent.Compiled, task svc.TaskSpec) (svc.AgentResult, error) {
		cancel()
		return svc.AgentResult{Success: true, Output: task.Input}, nil
	}}
	rs := results(t, spawn.NewAgentsTool(f.runs(), parent), ctx,
		`{"agents":[{"name":"a","instructions":"x"},{"name":"b","instructions":"x"}],"max_concurrency":1}`)
	if len(f.calls) != 1 || !rs[0].Success || rs[1].Success || rs[1].Error.Type != "CancelledError" ||
		!strings.Contains(rs[1].Error.Message, "not started") {
		t.Errorf("results %+v after %d runs", rs, len(f.calls))
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
