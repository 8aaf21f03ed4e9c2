package supervisor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// A submitted run's scope reaches the runs nested in it: a spawned child's
// invocation reports to the same run event stream and counts in the same
// progress (before the one scope, each nested run counted in a tracker of
// its own, and their reports overwrote each other).
func TestScopeReachesNestedRuns(t *testing.T) {
	s := &script{fn: spawner(map[string]string{"boss": `{"agents":[{"name":"kid","instructions":"kid"}]}`})}
	rt := newRuntime(t, svc.Options{}, nil, s.registry(), boss(nil))
	ctx := context.Background()
	id, err := rt.Submit(ctx, svc.SubmitRequest{Target: "boss", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	var st svc.RunStatus
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, err = rt.RunStatus(ctx, id); err != nil {
			t.Fatal(err)
		}
		if st.State.Terminal() || time.Now().After(deadline) {
			break
		}
	}
	if st.State != svc.RunCompleted || st.Progress == nil || *st.Progress != (svc.RunProgress{Total: 2, Completed: 2}) {
		t.Fatalf("status %+v, progress %+v; want completed with 2 of 2", st, st.Progress)
	}
	ch, err := rt.RunEvents(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var agents []string
	for ev := range ch {
		if ev.Type == svc.RunAgentStarted {
			agents = append(agents, ev.Agent)
		}
	}
	if len(agents) != 2 || agents[0] != "boss" || agents[1] != "kid" {
		t.Errorf("agent_started of %v, want boss then kid", agents)
	}
}

// The public helpers read and write their part of the one scope, and
// leave the others alone.
func TestScopeHelpers(t *testing.T) {
	ctx := svc.WithRequestID(context.Background(), "req")
	ctx = svc.WithDepth(ctx, 2)
	ctx = svc.WithParentTrace(ctx, "parent")
	var got svc.RunProgress
	ctx = svc.WithProgress(ctx, func(p svc.RunProgress) { got = p })
	s := svc.ScopeFrom(ctx)
	if s.RequestID != "req" || s.Depth != 2 || s.ParentTrace != "parent" || s.Progress == nil {
		t.Fatalf("scope %+v", s)
	}
	s.Progress(svc.RunProgress{Total: 1})
	if got.Total != 1 || svc.DepthFrom(context.Background()) != -1 || svc.ScopeFrom(context.Background()).Depth != -1 {
		t.Errorf("progress %+v, empty depth %d", got, svc.DepthFrom(context.Background()))
	}
}
