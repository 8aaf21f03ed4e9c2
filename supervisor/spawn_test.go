package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/supervisor"
)

// script is a hand-written model shared by a parent and the children
// derived from it (which inherit its model): fn tells them apart by their
// instructions. Every request is recorded.
type script struct {
	fn   func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error)
	mu   sync.Mutex
	reqs []svc.ModelRequest
}

func (s *script) registry() *model.Registry {
	reg := model.Default()
	reg.Register("script", func(string) (svc.Model, error) {
		return svc.ModelFunc(func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			s.mu.Lock()
			req.Messages = slices.Clone(req.Messages)
			s.reqs = append(s.reqs, req)
			s.mu.Unlock()
			return s.fn(ctx, req)
		}), nil
	})
	return reg
}

// requestsOf returns the requests whose instructions start with prefix.
func (s *script) requestsOf(prefix string) []svc.ModelRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []svc.ModelRequest
	for _, r := range s.reqs {
		if strings.HasPrefix(r.Instructions, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// spawnCall is a model turn that calls spawn_agents with args.
func spawnCall(args string) svc.ModelResponse {
	return svc.ModelResponse{ToolCalls: []svc.ToolCall{{ID: "spawn-1", Name: "spawn_agents", Arguments: json.RawMessage(args)}}}
}

// lastToolResult answers with the content of the last tool message, or
// reports false when there is none yet.
func lastToolResult(req svc.ModelRequest) (svc.ModelResponse, bool) {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.Role == svc.RoleTool {
			return svc.ModelResponse{Output: m.Content}, true
		}
	}
	return svc.ModelResponse{}, false
}

// spawner is the usual parent behaviour: spawn with args (chosen by the
// agent's instructions), then answer with the tool's result. Agents with
// no args in the map answer {"who": instructions, "input": input}.
func spawner(args map[string]string) func(context.Context, svc.ModelRequest) (svc.ModelResponse, error) {
	return func(_ context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
		first := strings.SplitN(req.Instructions, "\n", 2)[0]
		if a, ok := args[first]; ok {
			if resp, done := lastToolResult(req); done {
				return resp, nil
			}
			return spawnCall(a), nil
		}
		out, _ := json.Marshal(map[string]any{"who": first, "input": req.Messages[0].Content})
		return svc.ModelResponse{Output: out, InputTokens: 10, OutputTokens: 5}, nil
	}
}

type childResult struct {
	Name    string          `json:"name"`
	Success bool            `json:"success"`
	Output  json.RawMessage `json:"output"`
	Error   *svc.ErrorInfo  `json:"error"`
}

func childResults(t *testing.T, out json.RawMessage) []childResult {
	t.Helper()
	var rs []childResult
	if err := json.Unmarshal(out, &rs); err != nil {
		t.Fatalf("spawn_agents output %s: %v", out, err)
	}
	return rs
}

func boss(settings map[string]any) svc.Agent {
	return svc.Agent{Name: "boss", Model: "script:m", Instructions: "boss", BuiltinTools: []string{"spawn_agents"}, ModelSettings: settings}
}

// eventsOf returns the events of agent name.
func eventsOf(rec *emittertest.Recorder, name string) []svc.RuntimeEvent {
	var out []svc.RuntimeEvent
	for _, ev := range rec.Events() {
		if ev.AgentName == name {
			out = append(out, ev)
		}
	}
	return out
}

func TestSpawnAgents(t *testing.T) {
	for _, passer := range []string{svc.ContextNone, svc.ContextFull} {
		t.Run("context_passer="+passer, func(t *testing.T) {
			s := &script{fn: spawner(map[string]string{"boss": `{"agents":[
				{"name":"alpha","instructions":"child alpha","input":{"n":1}},
				{"name":"beta","instructions":"child beta","input":"two"}]}`})}
			rec := &emittertest.Recorder{}
			b := boss(nil)
			b.ContextPasser = passer
			rt := newRuntime(t, svc.Options{}, rec, s.registry(), b)
			res, err := rt.Run(context.Background(), "boss", svc.TaskSpec{Input: json.RawMessage(`"the parent's secret input"`), RequestID: "trace-boss"})
			if err != nil || !res.Success {
				t.Fatalf("Run = %+v, %v", res, err)
			}
			rs := childResults(t, res.Output)
			if len(rs) != 2 || rs[0].Name != "alpha" || rs[1].Name != "beta" || !rs[0].Success || !rs[1].Success ||
				rs[0].Error != nil || string(rs[0].Output) != `{"input":{"n":1},"who":"child alpha"}` ||
				string(rs[1].Output) != `{"input":"two","who":"child beta"}` {
				t.Fatalf("results = %+v", rs)
			}

			// Each child is its own run: agent_spawned then agent_completed,
			// a new trace of its own, the parent's trace as ParentTraceID.
			traces := map[string]bool{}
			for _, name := range []string{"alpha", "beta"} {
				evs := eventsOf(rec, name)
				if len(evs) != 2 || evs[0].EventType != svc.EventAgentSpawned || evs[1].EventType != svc.EventAgentCompleted {
					t.Fatalf("%s events = %+v", name, evs)
				}
				for _, ev := range evs {
					emittertest.CheckPayload(t, ev)
					if ev.ParentTraceID != "trace-boss" || ev.TraceID == "" || ev.TraceID == "trace-boss" || ev.TraceID != evs[0].TraceID {
						t.Errorf("%s %s: trace %q parent %q", name, ev.EventType, ev.TraceID, ev.ParentTraceID)
					}
				}
				traces[evs[0].TraceID] = true
			}
			if len(traces) != 2 {
				t.Errorf("children share a trace: %v", traces)
			}
			for _, ev := range eventsOf(rec, "boss") {
				if ev.TraceID != "trace-boss" || ev.ParentTraceID != "" {
					t.Errorf("parent event %s: trace %q parent %q", ev.EventType, ev.TraceID, ev.ParentTraceID)
				}
			}
			if n := len(rec.OfType(svc.EventToolCallCompleted)); n != 1 {
				t.Errorf("tool_call_completed = %d, want the parent's one spawn_agents call", n)
			}

			// What each child's model was given: its own input as its only
			// message; with context_passer full, the parent's conversation
			// in its instructions as well.
			alpha := s.requestsOf("child alpha")
			if len(alpha) != 1 || len(alpha[0].Messages) != 1 || string(alpha[0].Messages[0].Content) != `{"n":1}` {
				t.Fatalf("alpha's requests = %+v", alpha)
			}
			sees := strings.Contains(alpha[0].Instructions, "the parent's secret input")
			if passer == svc.ContextFull {
				if !sees || !strings.Contains(alpha[0].Instructions, "spawned by agent boss") {
					t.Errorf("full: alpha's instructions %q lack the parent's conversation", alpha[0].Instructions)
				}
			} else if alpha[0].Instructions != "child alpha" || sees {
				t.Errorf("null: alpha's instructions = %q, want only its own", alpha[0].Instructions)
			}
			// Derived children have the parent's model and tools.
			if tools := alpha[0].Tools; len(tools) != 1 || tools[0].Name != "spawn_agents" {
				t.Errorf("alpha's tools = %+v", tools)
			}
		})
	}
}

// The test provider can drive spawn_agents: call_tools gives it
// schema-valid arguments, one agent named "a", which runs the registered
// agent a.
func TestSpawnWithTestProvider(t *testing.T) {
	rec := &emittertest.Recorder{}
	parent := svc.Agent{Name: "boss", Model: "test:echo", BuiltinTools: []string{"spawn_agents"},
		ModelSettings: map[string]any{"call_tools": []any{"spawn_agents"}}}
	rt := newRuntime(t, svc.Options{}, rec, nil, parent, echo("a", map[string]any{"output": "from a"}))
	res, err := rt.Run(context.Background(), "boss", svc.TaskSpec{Input: json.RawMessage(`"go"`), RequestID: "r1"})
	if err != nil || !res.Success {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	var out struct {
		Tools map[string][]childResult `json:"tools"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	rs := out.Tools["spawn_agents"]
	if len(rs) != 1 || rs[0].Name != "a" || !rs[0].Success || string(rs[0].Output) != `"from a"` {
		t.Fatalf("output = %s", res.Output)
	}
	if evs := eventsOf(rec, "a"); len(evs) != 2 || evs[0].ParentTraceID != "r1" {
		t.Fatalf("a's events = %+v", evs)
	}
}

// A failed child is a result the parent's model reads, not a failure of
// the parent; so are rejected children.
func TestSpawnFailuresAreResults(t *testing.T) {
	s := &script{fn: spawner(map[string]string{"boss": `{"agents":[
		{"name":"bad"},
		{"name":"ok","instructions":"child ok"},
		{"name":"nobody"},
		{"name":"root"},
		{"name":"typed","input":{"n":"not a number"}}]}`})}
	rec := &emittertest.Recorder{}
	b := boss(nil)
	b.TrustLevel = svc.TrustLow
	typed := echo("typed", nil)
	typed.TrustLevel = svc.TrustLow
	typed.InputType = json.RawMessage(`{"type":"object","properties":{"n":{"type":"number"}}}`)
	root := echo("root", nil)
	root.TrustLevel = svc.TrustHigh
	bad := svc.Agent{Name: "bad", Model: "test:fail", TrustLevel: svc.TrustSandbox}
	rt := newRuntime(t, svc.Options{}, rec, s.registry(), b, bad, root, typed)
	res, err := rt.Run(context.Background(), "boss", svc.TaskSpec{Input: json.RawMessage(`1`), RequestID: "t-boss"})
	if err != nil || !res.Success {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	rs := childResults(t, res.Output)
	want := []struct {
		name, kind string
	}{
		{"bad", "ModelError"},
		{"ok", ""},
		{"nobody", "RegistryError"},
		{"root", "TrustViolationError"}, // above the parent's trust level
		{"typed", "SpecValidationError"},
	}
	if len(rs) != len(want) {
		t.Fatalf("results = %+v", rs)
	}
	for i, w := range want {
		r := rs[i]
		if r.Name != w.name || r.Success != (w.kind == "") || (w.kind != "" && (r.Error == nil || r.Error.Type != w.kind)) {
			t.Errorf("result %d = %+v, want %s %s", i, r, w.name, w.kind)
		}
	}
	// The model error ran: it has its agent_failed event under the parent.
	failed := eventsOf(rec, "bad")
	if len(failed) != 2 || failed[1].EventType != svc.EventAgentFailed || failed[1].ParentTraceID != "t-boss" || failed[1].Payload["reason"] != "ModelError" {
		t.Fatalf("bad's events = %+v", failed)
	}
	// The rejected ones never started.
	for _, name := range []string{"nobody", "root", "typed"} {
		if evs := eventsOf(rec, name); len(evs) != 0 {
			t.Errorf("%s: events %+v, want none", name, evs)
		}
	}
}

// max_spawn_depth applies to children: a grandchild past it is refused
// with DepthLimitError, after depth_limit_exceeded, and comes back as the
// child's result.
func TestSpawnDepthLimit(t *testing.T) {
	s := &script{fn: spawner(map[string]string{
		"boss": `{"agents":[{"name":"kid","instructions":"kid"}]}`,
		"kid":  `{"agents":[{"name":"grandkid","instructions":"grandkid"}]}`,
	})}
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, opts(func(o *svc.Options) { o.MaxSpawnDepth = 1 }), rec, s.registry(), boss(nil))
	res, err := rt.Run(context.Background(), "boss", svc.TaskSpec{Input: json.RawMessage(`1`), RequestID: "t-boss"})
	if err != nil || !res.Success {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	kid := childResults(t, res.Output)
	if len(kid) != 1 || !kid[0].Success {
		t.Fatalf("kid = %+v", kid)
	}
	grand := childResults(t, kid[0].Output)
	if len(grand) != 1 || grand[0].Success || grand[0].Error == nil || grand[0].Error.Type != "DepthLimitError" {
		t.Fatalf("grandkid = %+v", grand)
	}
	d := rec.OfType(svc.EventDepthLimitExceeded)
	if len(d) != 1 {
		t.Fatalf("depth_limit_exceeded = %+v", d)
	}
	emittertest.CheckPayload(t, d[0])
	kidTrace := eventsOf(rec, "kid")[0].TraceID
	if d[0].AgentName != "grandkid" || d[0].Payload["depth"] != 2 || d[0].Payload["limit"] != 1 || d[0].ParentTraceID != kidTrace {
		t.Errorf("depth_limit_exceeded = %+v (kid's trace %s)", d[0], kidTrace)
	}
	if len(s.requestsOf("grandkid")) != 0 {
		t.Error("the grandkid's model was called")
	}
}

// A spawn_agents call asking for more children than max_spawn_children
// ends its run with SpawnCapError, a rejection (the call's error, not a
// failed result), before any child starts and without another model
// turn; the events say so. A child whose own call asks for too many fails
// alone: its parent gets its failed result, as with the depth limit.
func TestSpawnCap(t *testing.T) {
	three := `{"agents":[{"name":"xa","instructions":"xa"},{"name":"xb","instructions":"xb"},{"name":"xc","instructions":"xc"}]}`
	s := &script{fn: spawner(map[string]string{
		"boss": three,
		"mid":  `{"agents":[{"name":"kid","instructions":"kid"}]}`,
		"kid":  three,
	})}
	rec := &emittertest.Recorder{}
	mid := svc.Agent{Name: "mid", Model: "script:m", Instructions: "mid", BuiltinTools: []string{"spawn_agents"}}
	rt := newRuntime(t, opts(func(o *svc.Options) { o.MaxSpawnChildren = 2 }), rec, s.registry(), boss(nil), mid)
	_, err := rt.Run(context.Background(), "boss", svc.TaskSpec{Input: json.RawMessage(`1`), RequestID: "t-boss"})
	var e *svc.Error
	if !errors.As(err, &e) || e.Kind != svc.KindSpawnCap || e.Agent != "boss" || !strings.Contains(e.Error(), "max_spawn_children is 2") {
		t.Fatalf("Run = %v, want boss's SpawnCapError", err)
	}
	if n := len(s.requestsOf("boss")); n != 1 {
		t.Errorf("boss's model was called %d times, want once: the refusal is not handed back to it", n)
	}
	for _, kid := range []string{"xa", "xb", "xc"} {
		if len(eventsOf(rec, kid)) != 0 || len(s.requestsOf(kid)) != 0 {
			t.Errorf("child %s started", kid)
		}
	}
	tf := rec.OfType(svc.EventToolCallFailed)
	af := rec.OfType(svc.EventAgentFailed)
	if len(tf) != 1 || tf[0].Payload["reason"] != string(svc.KindSpawnCap) || len(af) != 1 || af[0].Payload["reason"] != string(svc.KindSpawnCap) {
		t.Errorf("tool_call_failed %+v, agent_failed %+v: want one each, reason SpawnCapError", tf, af)
	}

	// In a gather, that task's failed result.
	out, err := rt.Gather(context.Background(), "boss", []svc.TaskSpec{{Input: json.RawMessage(`1`)}}, 1)
	if err != nil || len(out) != 1 || out[0].Success || out[0].Error == nil || out[0].Error.Type != string(svc.KindSpawnCap) {
		t.Errorf("gather = %+v, %v", out, err)
	}
	// One level down, the child that asked fails; its parent goes on.
	res, err := rt.Run(context.Background(), "mid", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil || !res.Success {
		t.Fatalf("mid = %+v, %v", res, err)
	}
	if kid := childResults(t, res.Output); len(kid) != 1 || kid[0].Success || kid[0].Error == nil || kid[0].Error.Type != string(svc.KindSpawnCap) {
		t.Errorf("kid = %+v, want its SpawnCapError", kid)
	}
}

// A child named after an agent already on its spawn path is refused with
// SpawnCycleError.
func TestSpawnCycle(t *testing.T) {
	s := &script{fn: spawner(map[string]string{
		"boss": `{"agents":[{"name":"kid","instructions":"kid"},{"name":"boss","instructions":"boss again"}]}`,
		"kid":  `{"agents":[{"name":"boss"},{"name":"kid","instructions":"kid"},{"name":"other","instructions":"other"}]}`,
	})}
	rt := newRuntime(t, svc.Options{}, nil, s.registry(), boss(nil))
	res, err := rt.Run(context.Background(), "boss", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil || !res.Success {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	rs := childResults(t, res.Output)
	if len(rs) != 2 || !rs[0].Success || rs[1].Success || rs[1].Error.Type != "SpawnCycleError" {
		t.Fatalf("boss's children = %+v", rs)
	}
	grand := childResults(t, rs[0].Output)
	if len(grand) != 3 || grand[0].Error == nil || grand[0].Error.Type != "SpawnCycleError" ||
		grand[1].Error == nil || grand[1].Error.Type != "SpawnCycleError" || !grand[2].Success {
		t.Fatalf("kid's children = %+v", grand)
	}
	if !strings.Contains(grand[0].Error.Message, "boss → kid") {
		t.Errorf("cycle message %q should show the path", grand[0].Error.Message)
	}
}

// Cancelling the parent's run cancels its children's model calls.
func TestSpawnCancel(t *testing.T) {
	started := make(chan struct{}, 2)
	var stopped atomic.Int32
	parent := spawner(map[string]string{"boss": `{"agents":[{"name":"a","instructions":"slow"},{"name":"b","instructions":"slow"}]}`})
	s := &script{fn: func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
		if req.Instructions != "slow" {
			return parent(ctx, req)
		}
		started <- struct{}{}
		<-ctx.Done()
		stopped.Add(1)
		return svc.ModelResponse{}, ctx.Err()
	}}
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, svc.Options{}, rec, s.registry(), boss(nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := rt.Run(ctx, "boss", svc.TaskSpec{Input: json.RawMessage(`1`)})
		done <- err
	}()
	<-started
	<-started
	cancel()
	if err := <-done; !errors.Is(err, svc.ErrCancelled) {
		t.Fatalf("parent: %v, want CancelledError", err)
	}
	if stopped.Load() != 2 {
		t.Fatalf("%d of 2 children saw the cancel", stopped.Load())
	}
	for _, name := range []string{"a", "b"} {
		evs := eventsOf(rec, name)
		if len(evs) != 2 || evs[1].EventType != svc.EventAgentFailed || evs[1].Payload["reason"] != "CancelledError" {
			t.Errorf("%s events = %+v", name, evs)
		}
	}
}

// Children draw on the parent's token budget.
func TestSpawnSharesBudget(t *testing.T) {
	parent := spawner(map[string]string{"boss": `{"agents":[{"name":"spender","instructions":"spend"}]}`})
	s := &script{fn: func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
		if req.Instructions == "spend" {
			return svc.ModelResponse{Output: json.RawMessage(`1`), TokensUsed: 20}, nil
		}
		resp, err := parent(ctx, req)
		resp.TokensUsed = 1
		return resp, err
	}}
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, opts(func(o *svc.Options) { o.MaxTokensPerRun = 10 }), rec, s.registry(), boss(nil))
	_, err := rt.Run(context.Background(), "boss", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("parent after its child overspent: %v", err)
	}
	b := rec.OfType(svc.EventBudgetExceeded)
	if len(b) < 1 || b[0].AgentName != "spender" || b[0].Payload["used"] != int64(21) {
		t.Fatalf("budget_exceeded = %+v", b)
	}
}

// In a gather each task has its own cap, and the runs its tools start draw
// on that task's cap: the spender a task spawns overdraws the task's 15
// tokens (1 + 20) and not a cap of its own, while the other task, under
// max_tokens_per_run 30, completes.
func TestGatherTaskCapSharedWithChildren(t *testing.T) {
	parent := spawner(map[string]string{"boss": `{"agents":[{"name":"spender","instructions":"spend"}]}`})
	s := &script{fn: func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
		if req.Instructions == "spend" {
			return svc.ModelResponse{Output: json.RawMessage(`1`), TokensUsed: 20}, nil
		}
		resp, err := parent(ctx, req)
		resp.TokensUsed = 1
		return resp, err
	}}
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, opts(func(o *svc.Options) { o.MaxTokensPerRun = 30 }), rec, s.registry(), boss(nil))
	out, err := rt.Gather(context.Background(), "boss", []svc.TaskSpec{
		{ID: "roomy", Input: json.RawMessage(`1`)}, {ID: "tight", Input: json.RawMessage(`1`), TokenBudget: 15},
	}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !out[0].Success || out[1].Success || out[1].Error.Type != string(svc.KindBudgetExceeded) {
		t.Fatalf("results: %+v", out)
	}
	b := rec.OfType(svc.EventBudgetExceeded)
	if len(b) < 1 || b[0].AgentName != "spender" || b[0].Payload["used"] != int64(21) || b[0].Payload["limit"] != int64(15) {
		t.Fatalf("budget_exceeded = %+v", b)
	}
}

func TestSpawnRegistration(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil)
	if err := rt.Register(svc.Agent{Name: "x", Model: "test:echo", BuiltinTools: []string{"fly"}}); !errors.Is(err, svc.ErrSpecValidation) {
		t.Fatalf("unknown builtin: %v", err)
	}
	if err := rt.Register(svc.Agent{Name: "y", Model: "test:echo", BuiltinTools: []string{"spawn_agents"}}, echo("z", nil)); err != nil {
		t.Fatalf("spawn_agents: %v", err)
	}
	// A team coordinator may spawn too.
	if err := rt.RegisterGroups(svc.Group{Name: "team", Kind: svc.GroupTeam, Coordinator: "y", Delegates: []string{"z"}}); err != nil {
		t.Fatalf("team with a spawning coordinator: %v", err)
	}
}

// The runtime prices model calls by its price table.
func TestRuntimePrices(t *testing.T) {
	reg := model.Default()
	reg.Register("acme", func(string) (svc.Model, error) {
		return svc.ModelFunc(func(context.Context, svc.ModelRequest) (svc.ModelResponse, error) {
			return svc.ModelResponse{Output: json.RawMessage(`1`), InputTokens: 2_000_000, OutputTokens: 1_000_000}, nil
		}), nil
	})
	prices := model.DefaultPrices().With(map[string]model.Price{"acme:big": {InputPerMTok: 1, OutputPerMTok: 3}})
	rt, err := supervisor.New(supervisor.Config{Models: reg, Prices: &prices})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.Register(svc.Agent{Name: "a", Model: "acme:big"}, svc.Agent{Name: "b", Model: "acme:small"}); err != nil {
		t.Fatal(err)
	}
	res, err := rt.Run(context.Background(), "a", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil || math.Abs(res.Metadata.CostUSD-5) > 1e-9 {
		t.Fatalf("priced: cost %v, %v", res.Metadata.CostUSD, err)
	}
	res, err = rt.Run(context.Background(), "b", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil || res.Metadata.CostUSD != 0 {
		t.Fatalf("unpriced: cost %v, %v", res.Metadata.CostUSD, err)
	}
}
