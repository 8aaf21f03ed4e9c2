package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/supervisor/remote"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeDispatcher records the tasks it is given and answers with res, err.
type fakeDispatcher struct {
	reqs []dispatch.Request
	res  svc.AgentResult
	err  error
}

func (d *fakeDispatcher) Dispatch(_ context.Context, req dispatch.Request) (svc.AgentResult, error) {
	d.reqs = append(d.reqs, req)
	return d.res, d.err
}
func (d *fakeDispatcher) Cancel(string, string) {}
func (d *fakeDispatcher) Backend() string       { return "broker:fake" }

// fakeBudget records the reservations and charges of an invocation with
// a run cap of which left remains.
type fakeBudget struct {
	left     int64
	reserved []int64
	charged  []int64
}

func (b *fakeBudget) Reserve(n int64) error { b.reserved = append(b.reserved, n); return nil }
func (b *fakeBudget) Charge(n int64) error  { b.charged = append(b.charged, n); return nil }
func (b *fakeBudget) RunRemaining() (int64, bool) {
	return b.left, true
}

type ctxKey struct{}

// executor dispatches to d the agents in registered; a run is nested, and
// belongs to a submitted run, as the context says under ctxKey.
func executor(d remote.Dispatcher, nestedOnly bool, registered ...*agent.Compiled) *remote.Executor {
	return remote.New(remote.Config{Dispatcher: d, NestedOnly: nestedOnly, Timeout: time.Minute,
		Registered: func(c *agent.Compiled) bool {
			for _, r := range registered {
				if r == c {
					return true
				}
			}
			return false
		},
		Nested: func(ctx context.Context) bool { return ctx.Value(ctxKey{}) != nil },
		RunID: func(ctx context.Context) string {
			id, _ := ctx.Value(ctxKey{}).(string)
			return id
		},
	})
}

func compiled(t *testing.T, name string) *agent.Compiled {
	t.Helper()
	c, err := agent.Compile(svc.Agent{Name: name, Model: "test:echo", ModelSettings: map[string]any{"max_tokens": 10}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A registered agent's attempt becomes a task: its ids, depth, what is
// left of its run's cap, the run a cancel names and where its events go;
// the budget reserves before and is charged what the worker reports.
func TestExecuteDispatches(t *testing.T) {
	c := compiled(t, "a")
	d := &fakeDispatcher{res: svc.AgentResult{Success: true, Output: json.RawMessage(`7`),
		Metadata: svc.ResultMetadata{Model: "test:echo", TokensUsed: 3}}}
	ex := executor(d, false, c)
	b := &fakeBudget{left: 50}
	inv := &agent.Invocation{Agent: c, Input: json.RawMessage(`"12345678"`), TaskID: "task", TraceID: "trace",
		ParentTraceID: "pt", SpanID: "sp", ParentSpanID: "psp", Depth: 2, Budget: b}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		run  string
	}{
		{"synchronous", svc.WithScope(context.Background(), svc.Scope{Depth: 1, EventsTo: "svc.events.x"}), "trace"},
		{"on a worker", svc.WithScope(context.Background(), svc.Scope{Depth: 1, RunID: "worker-run", EventsTo: "svc.events.x"}), "worker-run"},
		{"submitted", context.WithValue(svc.WithScope(context.Background(), svc.Scope{Depth: 1, RunID: "worker-run", EventsTo: "svc.events.x"}), ctxKey{}, "sub"), "sub"},
	} {
		d.reqs = nil
		out, err := ex.Execute(tc.ctx, inv)
		if err != nil || string(out.Output) != "7" || out.TokensUsed != 3 || !out.Remote {
			t.Fatalf("%s: Execute = %+v, %v", tc.name, out, err)
		}
		r := d.reqs[0]
		if r.Agent != "a" || r.TaskID != "task" || r.TraceID != "trace" || r.ParentTraceID != "pt" || r.SpanID != "sp" ||
			r.ParentSpanID != "psp" || r.Depth != 2 || r.TokenBudget != 50 || r.EventsTo != "svc.events.x" || r.RunID != tc.run ||
			time.Until(r.Deadline) < 50*time.Second {
			t.Errorf("%s: request %+v, run id want %s", tc.name, r, tc.run)
		}
	}
	if b.reserved[0] != 10+3 || b.charged[0] != 3 {
		t.Errorf("reserved %v, charged %v; want max_tokens + the input's estimate, then the reported tokens", b.reserved, b.charged)
	}
}

// A failed dispatch releases the reservation; a failure on the worker is
// the attempt's error, of its kind.
func TestExecuteFailures(t *testing.T) {
	c := compiled(t, "a")
	b := &fakeBudget{}
	d := &fakeDispatcher{err: svc.Errorf(svc.KindTimeout, "no result")}
	inv := &agent.Invocation{Agent: c, Input: json.RawMessage(`1`), TaskID: "t", TraceID: "t", Budget: b}
	if _, err := executor(d, false, c).Execute(context.Background(), inv); !errors.Is(err, svc.ErrTimeout) ||
		len(b.charged) != 1 || b.charged[0] != 0 {
		t.Errorf("dispatch failure: %v, charged %v", err, b.charged)
	}
	d = &fakeDispatcher{res: svc.AgentResult{Error: &svc.ErrorInfo{Type: "ModelError", Message: "down"}}}
	if _, err := executor(d, false, c).Execute(context.Background(), inv); !errors.Is(err, svc.ErrModel) {
		t.Errorf("worker failure: %v, want a ModelError", err)
	}
}

// nopJournal is a submitted run's journal with nothing recorded.
type nopJournal struct{}

func (nopJournal) Replay(svc.StepKind, string) (json.RawMessage, bool)           { return nil, false }
func (nopJournal) Record(context.Context, svc.StepKind, string, json.RawMessage) {}
func (nopJournal) Queue(svc.StepKind, string, json.RawMessage)                   {}
func (nopJournal) Started(string) bool                                           { return false }
func (nopJournal) Ended(string) bool                                             { return false }

// What has no twin on the workers runs here: an agent the runtime did not
// register (a spawned child, a team's coordinator), with NestedOnly a run
// that is not nested, and an agent of a submitted run that may wait for a
// person (it parks on the serve node's run store; a worker has none).
func TestExecuteLocal(t *testing.T) {
	reg, derived := compiled(t, "a"), compiled(t, "a")
	asker, err := agent.Compile(svc.Agent{Name: "asker", Model: "test:echo", BuiltinTools: []string{svc.AskHumanTool}}, nil,
		agent.WithBuiltins(map[string]agent.Builtin{svc.AskHumanTool: agent.AskHuman}))
	if err != nil {
		t.Fatal(err)
	}
	submitted := svc.WithJournal(context.Background(), nopJournal{})
	d := &fakeDispatcher{res: svc.AgentResult{Success: true, Output: json.RawMessage(`"remote"`)}}
	for _, tc := range []struct {
		name       string
		nestedOnly bool
		c          *agent.Compiled
		ctx        context.Context
		remote     bool
	}{
		{"derived agent", false, derived, context.Background(), false},
		{"registered agent", false, reg, context.Background(), true},
		{"nested only, top-level run", true, reg, context.Background(), false},
		{"nested only, nested run", true, reg, context.WithValue(context.Background(), ctxKey{}, ""), true},
		{"nested only, derived agent", true, derived, context.WithValue(context.Background(), ctxKey{}, ""), false},
		{"submitted, registered agent", false, reg, submitted, true},
		{"submitted, an agent that may wait", false, asker, submitted, false},
		{"synchronous, an agent that may wait", false, asker, context.Background(), true},
	} {
		d.reqs = nil
		inv := &agent.Invocation{Agent: tc.c, Input: json.RawMessage(`"here"`), TaskID: "t", TraceID: "t"}
		ex := executor(d, tc.nestedOnly, reg, asker)
		out, err := ex.Execute(tc.ctx, inv)
		if err != nil || out.Remote != tc.remote || (len(d.reqs) == 1) != tc.remote || ex.Dispatches(tc.ctx, inv) != tc.remote {
			t.Errorf("%s: %+v, %v after %d dispatches; want remote %v", tc.name, out, err, len(d.reqs), tc.remote)
		}
		if !tc.remote && string(out.Output) != `"here"` {
			t.Errorf("%s: output %s, want the local echo", tc.name, out.Output)
		}
	}
}
