package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/group"
	"github.com/svc-dev/svc/stores/sqlitestore"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools"
)

// Human in the loop (issue 31): a submitted run pauses at a call that
// needs a person, holds nothing while it waits, survives its process, and
// goes on by replay once answered.

// startOpts configure startWaiting: the calls counter and the options.
type startOpts struct {
	c   *calls
	mod func(*svc.Options)
}

func startWaiting(t *testing.T, path string, o *startOpts, agents ...svc.Agent) *life {
	t.Helper()
	st, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	reg := countModels(o.c)
	reg.Register("ask", func(name string) (svc.Model, error) {
		return svc.ModelFunc(func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			if err := o.c.call(ctx, "ask#"+string(rune('0'+len(req.Messages)))); err != nil {
				return svc.ModelResponse{}, err
			}
			if len(req.Messages) == 1 {
				return svc.ModelResponse{ToolCalls: []svc.ToolCall{{ID: "q", Name: svc.AskHumanTool,
					Arguments: json.RawMessage(`{"question":"which color?","choices":["red","blue"]}`)}}, InputTokens: 3, OutputTokens: 2}, nil
			}
			return svc.ModelResponse{Output: req.Messages[len(req.Messages)-1].Content, InputTokens: 5, OutputTokens: 1}, nil
		}), nil
	})
	rec := &emittertest.Recorder{}
	rt, err := supervisor.New(supervisor.Config{Store: st, Emitter: rec, Models: reg,
		Options: opts(func(opt *svc.Options) {
			opt.TimeoutSeconds = 60
			if o.mod != nil {
				o.mod(opt)
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	rt.ResumeRuns(context.Background())
	return &life{rt: rt, store: st, rec: rec}
}

// approvalAgent calls the tool act once (count:tooly), which needs
// approval, and answers with what it returned.
func approvalAgent(c *calls) svc.Agent {
	act := tools.MustFunc("act", "acts", svc.AccessRead, func(ctx context.Context, _ struct{}) (string, error) {
		if err := c.call(ctx, "act"); err != nil {
			return "", err
		}
		return "done", nil
	})
	return svc.Agent{Name: "tooly", Model: "count:tooly", Tools: []svc.Tool{act}, Approval: []string{"act"}}
}

func outputOf(t *testing.T, rec svc.RunRecord) string {
	t.Helper()
	var res svc.AgentResult
	if err := json.Unmarshal(rec.Result, &res); err != nil {
		t.Fatalf("result %s: %v", rec.Result, err)
	}
	var s string
	_ = json.Unmarshal(res.Output, &s)
	return s
}

var yes, no = true, false

// The approval survives the process: the run waits, its process stops,
// the next one finds it waiting (neither failed nor resumed), the approval
// goes to the new process, and the tool is called once, the first model
// call not paid again.
func TestWaitApprovalAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	c := newCalls()
	l1 := startWaiting(t, path, &startOpts{c: c}, approvalAgent(c))
	id, err := l1.rt.Submit(context.Background(), svc.SubmitRequest{Target: "tooly", Task: svc.TaskSpec{Input: json.RawMessage(`"go"`)}})
	if err != nil {
		t.Fatal(err)
	}
	st := waitState(t, l1.rt, id, svc.RunWaiting)
	if len(st.Waiting) != 1 || st.Waiting[0].Kind != svc.WaitApproval || st.Waiting[0].Tool != "act" || st.Waiting[0].Agent != "tooly" {
		t.Fatalf("status waiting %+v, want one approval of act", st.Waiting)
	}
	req := st.Waiting[0]
	if got := l1.rec.OfType(svc.EventRunWaiting); len(got) != 1 || got[0].Payload["request_id"] != req.ID {
		t.Fatalf("run_waiting events %+v", got)
	} else {
		emittertest.CheckPayload(t, got[0])
	}
	if c.count("act") != 0 {
		t.Fatal("the tool was called before its approval")
	}
	if got := l1.rec.OfType(svc.EventAgentFailed); len(got) != 0 {
		t.Errorf("a pause emitted agent_failed: %+v", got)
	}
	if st.Progress == nil || st.Progress.Failed != 0 {
		t.Errorf("progress %+v of a waiting run: nothing failed", st.Progress)
	}
	if n, m := l1.rt.RunsInFlight(), l1.rt.InFlight(); n != 0 || m != 0 {
		t.Errorf("a waiting run holds %d runs and %d calls in flight, want none", n, m)
	}
	l1.end(t)

	l2 := startWaiting(t, path, &startOpts{c: c}, approvalAgent(c))
	defer l2.end(t)
	st = waitState(t, l2.rt, id, svc.RunWaiting)
	if st.Resumed != 0 || len(st.Waiting) != 1 || st.Waiting[0].ID != req.ID {
		t.Fatalf("after the restart: %+v, want the same request, not resumed", st)
	}
	// A decision that does not fit, and an unknown request: refused, the
	// run still waits.
	if _, err := l2.rt.ResumeRun(context.Background(), id, svc.Decision{RequestID: req.ID, Answer: json.RawMessage(`"red"`)}); !errors.Is(err, svc.ErrSpecValidation) {
		t.Errorf("an answer to an approval: %v, want a SpecValidationError", err)
	}
	if _, err := l2.rt.ResumeRun(context.Background(), id, svc.Decision{RequestID: "req_nope", Approve: &yes}); !errors.Is(err, svc.ErrRunState) || !strings.Contains(err.Error(), req.ID) {
		t.Errorf("an unknown request: %v, want a RunStateError naming the open one", err)
	}
	if _, err := l2.rt.ResumeRun(context.Background(), id, svc.Decision{RequestID: req.ID, Approve: &yes}); err != nil {
		t.Fatal(err)
	}
	rec, evs := waitEnd(t, l2.rt, l2.store, id)
	if rec.State != svc.RunCompleted || outputOf(t, rec) != "done" {
		t.Fatalf("run ended %s with %s", rec.State, rec.Result)
	}
	if a, m1, m3 := c.count("act"), c.count("tooly#1"), c.count("tooly#3"); a != 1 || m1 != 1 || m3 != 1 {
		t.Fatalf("calls: act %d, first model call %d, second %d; want 1 each", a, m1, m3)
	}
	var waiting, resumed int
	for _, ev := range evs {
		switch ev.Type {
		case svc.RunRunWaiting:
			waiting++
			if ev.Request == nil || ev.Request.ID != req.ID {
				t.Errorf("run_waiting %+v without its request", ev)
			}
		case svc.RunRunResumed:
			resumed++
		case svc.RunAgentFailed:
			t.Errorf("the history has %+v: a pause is not a failure", ev)
		}
	}
	if waiting != 1 || resumed != 1 {
		t.Errorf("history: %d run_waiting, %d run_resumed; want 1 each: %+v", waiting, resumed, evs)
	}
	if _, err := l2.rt.ResumeRun(context.Background(), id, svc.Decision{RequestID: req.ID, Approve: &yes}); !errors.Is(err, svc.ErrRunState) {
		t.Errorf("resume of a completed run: %v, want a RunStateError", err)
	}
}

// A denial reaches the model as a tool error with its reason; the tool is
// never called.
func TestWaitDenied(t *testing.T) {
	c := newCalls()
	l := startWaiting(t, filepath.Join(t.TempDir(), "runs.db"), &startOpts{c: c}, approvalAgent(c))
	defer l.end(t)
	id, err := l.rt.Submit(context.Background(), svc.SubmitRequest{Target: "tooly", Task: svc.TaskSpec{Input: json.RawMessage(`"go"`)}})
	if err != nil {
		t.Fatal(err)
	}
	st := waitState(t, l.rt, id, svc.RunWaiting)
	if _, err := l.rt.ResumeRun(context.Background(), id, svc.Decision{RequestID: st.Waiting[0].ID, Approve: &no, Reason: "not today"}); err != nil {
		t.Fatal(err)
	}
	rec, _ := waitEnd(t, l.rt, l.store, id)
	if out := outputOf(t, rec); rec.State != svc.RunCompleted || !strings.Contains(out, "denied") || !strings.Contains(out, "not today") {
		t.Fatalf("run ended %s with output %q, want the denial and its reason", rec.State, out)
	}
	if c.count("act") != 0 {
		t.Fatal("a denied call was made")
	}
}

// ask_human: the answer is the tool's result; an answer outside the
// choices is refused.
func TestWaitQuestion(t *testing.T) {
	c := newCalls()
	asker := svc.Agent{Name: "asker", Model: "ask:x", BuiltinTools: []string{svc.AskHumanTool}}
	l := startWaiting(t, filepath.Join(t.TempDir(), "runs.db"), &startOpts{c: c}, asker)
	defer l.end(t)
	id, err := l.rt.Submit(context.Background(), svc.SubmitRequest{Target: "asker", Task: svc.TaskSpec{Input: json.RawMessage(`"go"`)}})
	if err != nil {
		t.Fatal(err)
	}
	st := waitState(t, l.rt, id, svc.RunWaiting)
	q := st.Waiting[0]
	if q.Kind != svc.WaitQuestion || q.Question != "which color?" || len(q.Choices) != 2 {
		t.Fatalf("request %+v, want the question with its choices", q)
	}
	if _, err := l.rt.ResumeRun(context.Background(), id, svc.Decision{RequestID: q.ID, Answer: json.RawMessage(`"green"`)}); !errors.Is(err, svc.ErrSpecValidation) {
		t.Fatalf("an answer outside the choices: %v, want a SpecValidationError", err)
	}
	if _, err := l.rt.ResumeRun(context.Background(), id, svc.Decision{RequestID: q.ID, Answer: json.RawMessage(`"blue"`)}); err != nil {
		t.Fatal(err)
	}
	rec, _ := waitEnd(t, l.rt, l.store, id)
	if out := outputOf(t, rec); rec.State != svc.RunCompleted || out != "blue" {
		t.Fatalf("run ended %s with %q, want the answer", rec.State, out)
	}
	if n := c.count("ask#1"); n != 1 {
		t.Errorf("first model call made %d times, want 1 (replayed)", n)
	}
}

// A tool may declare that it needs approval itself (tools.NeedsApproval):
// the agent waits for it without listing it.
func TestWaitToolDeclared(t *testing.T) {
	c := newCalls()
	a := approvalAgent(c)
	a.Approval = nil
	a.Tools[0] = tools.NeedsApproval(tools.NotIdempotent(a.Tools[0]))
	if svc.ToolIdempotent(a.Tools[0]) {
		t.Fatal("NeedsApproval hid NotIdempotent")
	}
	l := startWaiting(t, filepath.Join(t.TempDir(), "runs.db"), &startOpts{c: c}, a)
	defer l.end(t)
	id, err := l.rt.Submit(context.Background(), svc.SubmitRequest{Target: "tooly", Task: svc.TaskSpec{Input: json.RawMessage(`"go"`)}})
	if err != nil {
		t.Fatal(err)
	}
	st := waitState(t, l.rt, id, svc.RunWaiting)
	if len(st.Waiting) != 1 || st.Waiting[0].Tool != "act" {
		t.Fatalf("waiting %+v", st.Waiting)
	}
}

// A synchronous run cannot wait: ApprovalRequiredError, the tool not
// called.
func TestWaitSyncRunRefused(t *testing.T) {
	c := newCalls()
	l := startWaiting(t, filepath.Join(t.TempDir(), "runs.db"), &startOpts{c: c}, approvalAgent(c))
	defer l.end(t)
	_, err := l.rt.Run(context.Background(), "tooly", svc.TaskSpec{Input: json.RawMessage(`"go"`)})
	if !errors.Is(err, svc.ErrApprovalRequired) || !strings.Contains(err.Error(), "submit") {
		t.Fatalf("sync run: %v, want an ApprovalRequiredError saying to submit", err)
	}
	if c.count("act") != 0 {
		t.Fatal("the tool was called")
	}
}

// Cancel ends a waiting run at once.
func TestWaitCancel(t *testing.T) {
	c := newCalls()
	l := startWaiting(t, filepath.Join(t.TempDir(), "runs.db"), &startOpts{c: c}, approvalAgent(c))
	defer l.end(t)
	id, err := l.rt.Submit(context.Background(), svc.SubmitRequest{Target: "tooly", Task: svc.TaskSpec{Input: json.RawMessage(`"go"`)}})
	if err != nil {
		t.Fatal(err)
	}
	st := waitState(t, l.rt, id, svc.RunWaiting)
	if err := l.rt.CancelRun(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	waitState(t, l.rt, id, svc.RunCancelled)
	if _, err := l.rt.ResumeRun(context.Background(), id, svc.Decision{RequestID: st.Waiting[0].ID, Approve: &yes}); !errors.Is(err, svc.ErrRunState) {
		t.Fatalf("resume of a cancelled run: %v, want a RunStateError", err)
	}
}

// A deadline denies (the model is told) or fails the run, as configured.
func TestWaitDeadline(t *testing.T) {
	for _, action := range []string{svc.TimeoutDeny, svc.TimeoutFail} {
		t.Run(action, func(t *testing.T) {
			c := newCalls()
			a := approvalAgent(c)
			a.ApprovalTimeoutSeconds = 0.3
			a.ApprovalTimeoutAction = action
			l := startWaiting(t, filepath.Join(t.TempDir(), "runs.db"), &startOpts{c: c}, a)
			defer l.end(t)
			id, err := l.rt.Submit(context.Background(), svc.SubmitRequest{Target: "tooly", Task: svc.TaskSpec{Input: json.RawMessage(`"go"`)}})
			if err != nil {
				t.Fatal(err)
			}
			rec, _ := waitEnd(t, l.rt, l.store, id)
			switch action {
			case svc.TimeoutDeny:
				if out := outputOf(t, rec); rec.State != svc.RunCompleted || !strings.Contains(out, "no approval came in time") {
					t.Fatalf("run ended %s with %q", rec.State, out)
				}
			case svc.TimeoutFail:
				if rec.State != svc.RunFailed || rec.Reason != svc.ReasonApprovalTimeout {
					t.Fatalf("run ended %s (%s), want failed, approval_timeout", rec.State, rec.Reason)
				}
			}
			if c.count("act") != 0 {
				t.Fatal("the tool was called")
			}
		})
	}
}

// A group run pauses at a node's approval and goes on from that node once
// approved: the nodes before it are not run again.
func TestWaitInGroup(t *testing.T) {
	c := newCalls()
	g := mustGroup(t, group.New("flow").Node("a", "a").Node("t", "tooly").Node("c", "c").Edge("a", "t").Edge("t", "c"))
	rt, st, id := waitingGroup(t, c, g)
	status := waitState(t, rt, id, svc.RunWaiting)
	if len(status.Waiting) != 1 || status.Waiting[0].Agent != "tooly" {
		t.Fatalf("waiting %+v, want node t's approval", status.Waiting)
	}
	if _, err := rt.ResumeRun(context.Background(), id, svc.Decision{RequestID: status.Waiting[0].ID, Approve: &yes}); err != nil {
		t.Fatal(err)
	}
	rec, _ := waitEnd(t, rt, st, id)
	if rec.State != svc.RunCompleted {
		t.Fatalf("group run ended %s: %s", rec.State, rec.Result)
	}
	if a, act, cc := c.count("a"), c.count("act"), c.count("c"); a != 1 || act != 1 || cc != 1 {
		t.Fatalf("calls a=%d act=%d c=%d, want 1 each", a, act, cc)
	}
	var res svc.AgentResult
	_ = json.Unmarshal(rec.Result, &res)
	if string(res.Output) != `"done+c"` {
		t.Errorf("output %s, want \"done+c\"", res.Output)
	}
}

// Parallel nodes: one pauses for approval, the other completes; after the
// approval the run completes, every node's model called once.
func TestWaitParallelNodes(t *testing.T) {
	c := newCalls()
	g := mustGroup(t, group.New("par").Node("t", "tooly").Node("a", "a").Node("c", "c").Edge("t", "c").Edge("a", "c"))
	rt, st, id := waitingGroup(t, c, g)
	status := waitState(t, rt, id, svc.RunWaiting)
	if _, err := rt.ResumeRun(context.Background(), id, svc.Decision{RequestID: status.Waiting[0].ID, Approve: &yes}); err != nil {
		t.Fatal(err)
	}
	rec, _ := waitEnd(t, rt, st, id)
	if rec.State != svc.RunCompleted {
		t.Fatalf("group run ended %s: %s", rec.State, rec.Result)
	}
	if a, act, cc := c.count("a"), c.count("act"), c.count("c"); a != 1 || act != 1 || cc != 1 {
		t.Fatalf("calls a=%d act=%d c=%d, want 1 each", a, act, cc)
	}
}

// waitingGroup starts a runtime on a new SQLite store with the agents a
// and c (count models) and tooly (approvalAgent) and the group g, submits
// a run of g and returns the runtime, its store and the run's id; the
// runtime is shut down when t ends.
func waitingGroup(t *testing.T, c *calls, g svc.Group) (*supervisor.Runtime, *sqlitestore.Store, string) {
	t.Helper()
	st, err := sqlitestore.Open(filepath.Join(t.TempDir(), "runs.db"))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := supervisor.New(supervisor.Config{Store: st, Models: countModels(c), Options: opts(func(o *svc.Options) { o.TimeoutSeconds = 60 })})
	if err != nil {
		t.Fatal(err)
	}
	l := &life{rt: rt, store: st}
	t.Cleanup(func() { l.end(t) })
	if err := rt.Register(countAgent("a"), approvalAgent(c), countAgent("c")); err != nil {
		t.Fatal(err)
	}
	if err := rt.RegisterGroups(g); err != nil {
		t.Fatal(err)
	}
	rt.ResumeRuns(context.Background())
	id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: g.Name, Task: svc.TaskSpec{Input: json.RawMessage(`"in"`)}})
	if err != nil {
		t.Fatal(err)
	}
	return rt, st, id
}
