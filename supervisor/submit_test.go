package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/group"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/stores/sqlitestore"
	"github.com/svc-dev/svc/supervisor"
)

func waitState(t *testing.T, rt *supervisor.Runtime, id string, want svc.RunState) svc.RunStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := rt.RunStatus(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == want {
			return st
		}
		if st.State.Terminal() || time.Now().After(deadline) {
			t.Fatalf("run %s is %s, want %s", id, st.State, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func collect(t *testing.T, ch <-chan svc.RunEvent) []svc.RunEvent {
	t.Helper()
	var out []svc.RunEvent
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("stream did not end; got %+v", out)
		}
	}
}

func TestSubmitAgent(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("echo", nil))
	id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "echo", Task: svc.TaskSpec{Input: json.RawMessage(`{"a":1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	st := waitState(t, rt, id, svc.RunCompleted)
	if st.Progress == nil || st.Progress.Completed != 1 {
		t.Errorf("progress = %+v", st.Progress)
	}
	raw, err := rt.RunResult(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var res svc.AgentResult
	if err := json.Unmarshal(raw, &res); err != nil || !res.Success || string(res.Output) != `{"a":1}` {
		t.Fatalf("result %s: %v", raw, err)
	}
	ch, err := rt.RunEvents(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, ch)
	if len(evs) != 2 || evs[0].Type != svc.RunAgentStarted || evs[1].Type != svc.RunAgentCompleted || evs[0].Seq != 1 || evs[1].Seq != 2 {
		t.Fatalf("events = %+v", evs)
	}
}

func TestSubmitRejectsBeforeStoring(t *testing.T) {
	a := echo("typed", nil)
	a.InputType = json.RawMessage(`{"type":"string"}`)
	rt := newRuntime(t, svc.Options{}, nil, nil, a, echo("both", nil))
	if err := rt.RegisterGroups(mustGroup(t, group.New("both").Node("x", "typed"))); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req  svc.SubmitRequest
		want error
	}{
		{svc.SubmitRequest{Target: "nope"}, svc.ErrRegistry},
		{svc.SubmitRequest{Target: "typed", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}}, svc.ErrSpecValidation},
		{svc.SubmitRequest{Target: "both", Task: svc.TaskSpec{Input: json.RawMessage(`"x"`)}}, svc.ErrSpecValidation}, // ambiguous
		{svc.SubmitRequest{Target: "typed", Kind: "group", Task: svc.TaskSpec{Input: json.RawMessage(`"x"`)}}, svc.ErrRegistry},
	} {
		if _, err := rt.Submit(context.Background(), tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.req, err, tc.want)
		}
	}
	id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "both", Kind: "group", Task: svc.TaskSpec{Input: json.RawMessage(`"x"`)}})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, rt, id, svc.RunCompleted)
	ch, _ := rt.RunEvents(context.Background(), id, 0)
	evs := collect(t, ch)
	if evs[len(evs)-1].Type != svc.RunGroupCompleted {
		t.Fatalf("group run's last event = %+v", evs[len(evs)-1])
	}
}

// Cancel stops the work: a run whose model sleeps ends promptly, the state
// stays cancelled and nothing follows run_cancelled.
func TestSubmitCancel(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("slow", map[string]any{"latency_ms": 30000}))
	id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, rt, id, svc.RunRunning)
	ch, _ := rt.RunEvents(context.Background(), id, 0)
	start := time.Now()
	if err := rt.CancelRun(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, ch)
	if time.Since(start) > 5*time.Second {
		t.Fatalf("cancel took %v", time.Since(start))
	}
	if last := evs[len(evs)-1]; last.Type != svc.RunRunCancelled {
		t.Fatalf("last event %+v, want run_cancelled", last)
	}
	if err := rt.CancelRun(context.Background(), id); err != nil {
		t.Fatalf("second cancel: %v", err)
	}
	if err := rt.CancelRun(context.Background(), "nope"); !errors.Is(err, svc.ErrRegistry) {
		t.Fatalf("unknown cancel: %v", err)
	}
	time.Sleep(50 * time.Millisecond) // let the cancelled work finish late
	if st, _ := rt.RunStatus(context.Background(), id); st.State != svc.RunCancelled {
		t.Fatalf("state %s after the work ended", st.State)
	}
	if _, err := rt.RunResult(context.Background(), id); !errors.Is(err, svc.ErrRunState) {
		t.Fatalf("result of a cancelled run: %v", err)
	}
	after, _ := rt.RunEvents(context.Background(), id, 0)
	if all := collect(t, after); all[len(all)-1].Type != svc.RunRunCancelled {
		t.Fatalf("an event followed run_cancelled: %+v", all)
	}
}

// Runs a dead process left pending or running become failed/interrupted
// when the next runtime opens the same store.
func TestSubmitInterruptedOnRestart(t *testing.T) {
	path := t.TempDir() + "/runs.db"
	st, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Create(context.Background(), svc.RunRecord{RunID: "r1", Target: "echo", Kind: "agent"}); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	st2, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	rt, err := supervisor.New(supervisor.Config{Store: st2})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	rec, err := st2.Get(context.Background(), "r1")
	if err != nil || rec.State != svc.RunFailed || rec.Reason != "interrupted" {
		t.Fatalf("after restart: %+v %v", rec, err)
	}
}

// A run cancelled while its agent runs reports nothing running, in its
// status and in the run list: the invocation the cancel stopped counts as
// failed, as for an interrupted run. (The soak kill loop found cancelled
// runs reporting running 1 for good: the store refuses the progress update
// the stopped invocation would have made, since the run is terminal.)
func TestSubmitCancelSettlesProgress(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("slow", map[string]any{"latency_ms": 30000}))
	id, err := rt.Submit(ctx, svc.SubmitRequest{Target: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the agent to be counted running", func() bool {
		st, err := rt.RunStatus(ctx, id)
		return err == nil && st.Progress != nil && st.Progress.Running == 1
	})
	if err := rt.CancelRun(ctx, id); err != nil {
		t.Fatal(err)
	}
	want := svc.RunProgress{Total: 1, Failed: 1}
	st, err := rt.RunStatus(ctx, id)
	if err != nil || st.State != svc.RunCancelled || st.Progress == nil || *st.Progress != want {
		t.Fatalf("status after cancel = %+v (progress %+v), %v; want cancelled with progress %+v", st, st.Progress, err, want)
	}
	page, err := rt.ListRuns(ctx, svc.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Runs {
		if r.RunID == id && (r.Progress == nil || *r.Progress != want) {
			t.Fatalf("run list shows progress %+v, want %+v", r.Progress, want)
		}
	}
}
