package supervisor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/group"
)

// TestSubmittedRunKnowsItsTrace checks a submitted run's status and
// listing row carry its trace id from the first status on (the dashboard
// opens /runs/{trace_id}/tree by it), and that it is the trace of the
// run's events and result: the task's request id, else the context's
// (the X-Request-Id header), else a new id; for agent and group runs.
func TestSubmittedRunKnowsItsTrace(t *testing.T) {
	rec := &emittertest.Recorder{}
	slow := echo("slow", map[string]any{"latency_ms": 300})
	g := mustGroup(t, group.New("pipe").Node("a", "echo").Node("b", "echo").Edge("a", "b"))
	rt := groupRuntime(t, rec, []svc.Agent{echo("echo", nil), slow}, g)
	ctx := context.Background()
	cases := []struct {
		name, target, given string
		ctx                 context.Context
	}{
		{"task request id", "slow", "req-task", ctx},
		{"context request id", "slow", "", svc.WithRequestID(ctx, "req-header")},
		{"new id", "slow", "", ctx},
		{"group", "pipe", "", ctx},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := rt.Submit(tc.ctx, svc.SubmitRequest{Target: tc.target,
				Task: svc.TaskSpec{Input: json.RawMessage(`"x"`), RequestID: tc.given}})
			if err != nil {
				t.Fatal(err)
			}
			first, err := rt.RunStatus(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if first.TraceID == "" {
				t.Fatalf("first status %+v has no trace id", first)
			}
			if want := tc.given + svc.RequestIDFrom(tc.ctx); want != "" && first.TraceID != want {
				t.Errorf("trace id %q, want %q", first.TraceID, want)
			}
			page, err := rt.ListRuns(ctx, svc.RunFilter{})
			if err != nil {
				t.Fatal(err)
			}
			var listed bool
			for _, r := range page.Runs {
				listed = listed || r.RunID == id && r.TraceID == first.TraceID
			}
			if !listed {
				t.Errorf("ListRuns = %+v, want %s with trace id %s", page.Runs, id, first.TraceID)
			}
			done := waitState(t, rt, id, svc.RunCompleted)
			if done.TraceID != first.TraceID {
				t.Errorf("trace id changed from %q to %q", first.TraceID, done.TraceID)
			}
			var res struct {
				Metadata svc.ResultMetadata `json:"metadata"`
			}
			raw, err := rt.RunResult(ctx, id)
			if err != nil || json.Unmarshal(raw, &res) != nil || res.Metadata.TraceID != first.TraceID {
				t.Errorf("result %s (%v): want metadata.trace_id %s", raw, err, first.TraceID)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				var n int
				for _, ev := range rec.OfType(svc.EventAgentCompleted) {
					if ev.TraceID == first.TraceID {
						n++
					}
				}
				if n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no agent_completed event of trace %s; events: %+v", first.TraceID, rec.Events())
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
