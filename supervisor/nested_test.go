package supervisor_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/supervisor/spawn"
)

// nestedDispatcher answers every dispatch with a canned result and
// records what it was asked.
type nestedDispatcher struct {
	mu   sync.Mutex
	reqs []dispatch.Request
}

func (d *nestedDispatcher) Dispatch(_ context.Context, req dispatch.Request) (svc.AgentResult, error) {
	d.mu.Lock()
	d.reqs = append(d.reqs, req)
	d.mu.Unlock()
	return svc.AgentResult{AgentName: req.Agent, TaskID: req.TaskID, Success: true, Output: json.RawMessage(`"from the fleet"`),
		Metadata: svc.ResultMetadata{TraceID: req.TraceID, TokensUsed: 30, Backend: "broker:memory"}}, nil
}
func (d *nestedDispatcher) Cancel(string, string) {}
func (d *nestedDispatcher) Backend() string       { return "broker:memory" }

func (d *nestedDispatcher) requests() []dispatch.Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]dispatch.Request(nil), d.reqs...)
}

// With a NestedDispatcher, the run a worker is asked for runs here and the
// child it spawns goes to the fleet, with its depth, the run id and events
// subject of the worker's task, what is left of the run's cap and its
// place in the trace; this side emits no per-agent events for the child
// (its worker does).
func TestNestedDispatcher(t *testing.T) {
	base := spawner(map[string]string{"parent": `{"agents":[{"name":"child","input":{"x":1}}]}`})
	s := &script{fn: func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
		resp, err := base(ctx, req)
		resp.TokensUsed = 10 // the parent's spawn turn takes 10 of the cap
		return resp, err
	}}
	d := &nestedDispatcher{}
	rec := &emittertest.Recorder{}
	rt, err := supervisor.New(supervisor.Config{Models: s.registry(), Emitter: rec,
		Backend: "broker:memory", NestedDispatcher: d})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.Register(
		svc.Agent{Name: "parent", Model: "script:p", Instructions: "parent", BuiltinTools: []string{spawn.AgentsTool}},
		svc.Agent{Name: "child", Model: "script:c", Instructions: "child"},
	); err != nil {
		t.Fatal(err)
	}
	// What a worker puts in the context of the task it runs.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx = svc.WithScope(ctx, svc.Scope{Depth: -1, ParentTrace: "outer", ParentSpan: "dispatching-span",
		RunID: "run-1", EventsTo: fleetwire.EventSubject("origin")})
	res, err := rt.Run(ctx, "parent", svc.TaskSpec{TokenBudget: 1000, Input: json.RawMessage(`{}`)})
	if err != nil || !res.Success || !strings.Contains(string(res.Output), "from the fleet") {
		t.Fatalf("parent: %+v %v", res, err)
	}
	reqs := d.requests()
	if len(reqs) != 1 {
		t.Fatalf("dispatched %d runs, want the child only: %+v", len(reqs), reqs)
	}
	r := reqs[0]
	if r.Agent != "child" || r.Depth != 1 || r.RunID != "run-1" || r.EventsTo != "svc.events.origin" ||
		r.ParentTraceID != res.Metadata.TraceID || r.TraceID == res.Metadata.TraceID || r.ParentSpanID == "" ||
		string(r.Input) != `{"x":1}` {
		t.Errorf("child request = %+v; parent trace %s", r, res.Metadata.TraceID)
	}
	// The parent's first call took 10 of the cap; the child may spend the
	// rest.
	if r.TokenBudget != 990 {
		t.Errorf("child token_budget = %d, want 990: what is left of 1000 after the parent's first call", r.TokenBudget)
	}
	for _, typ := range []svc.EventType{svc.EventAgentSpawned, svc.EventAgentCompleted} {
		for _, ev := range rec.OfType(typ) {
			if ev.AgentName == "child" {
				t.Errorf("%s of the dispatched child emitted on the dispatching side: %+v", typ, ev)
			}
		}
	}
	if n := len(rec.OfType(svc.EventAgentSpawned)); n != 1 {
		t.Errorf("agent_spawned %d times, want once (the parent)", n)
	}
	// Without a scope from a worker (no run id), the run id is the child's
	// trace, and without a cap no token_budget goes.
	res, err = rt.Run(context.Background(), "parent", svc.TaskSpec{Input: json.RawMessage(`{}`)})
	if err != nil || !res.Success {
		t.Fatalf("parent: %+v %v", res, err)
	}
	reqs = d.requests()
	if r := reqs[len(reqs)-1]; r.RunID != r.TraceID || r.TokenBudget != 0 || r.EventsTo != "" || r.Depth != 1 {
		t.Errorf("child request without a worker's scope = %+v", r)
	}
}

// A NestedDispatcher excludes Dispatcher: a runtime sends everything to
// the fleet or only its nested runs.
func TestNestedDispatcherExcludesDispatcher(t *testing.T) {
	d := &nestedDispatcher{}
	if _, err := supervisor.New(supervisor.Config{Dispatcher: d, NestedDispatcher: d}); svc.KindOf(err) != svc.KindSpecValidation {
		t.Fatalf("err = %v, want a SpecValidationError", err)
	}
}
