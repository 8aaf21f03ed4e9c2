package supervisor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/group"
	"github.com/svc-dev/svc/internal/faultstore"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/supervisor"
)

// batchingRuntime is a runtime that records steps over a faultstore that
// writes batches (on memstore), with a three-node pipeline of count
// agents.
func batchingRuntime(t *testing.T) (*supervisor.Runtime, *faultstore.Batching, *observer.ObservedLogs) {
	t.Helper()
	fs := faultstore.NewBatching(memstore.New())
	t.Cleanup(func() { _ = fs.Close() })
	core, logs := observer.New(zapcore.WarnLevel)
	rt, err := supervisor.New(supervisor.Config{Store: fs, Logger: zap.New(core), Models: countModels(newCalls())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	if !rt.Resumes() {
		t.Fatal("the runtime does not record steps over a faultstore.Batching")
	}
	if err := rt.Register(countAgent("a"), countAgent("b"), countAgent("c")); err != nil {
		t.Fatal(err)
	}
	g := mustGroup(t, group.New("pipe").Node("a", "a").Node("b", "b").Node("c", "c").Edge("a", "b").Edge("b", "c"))
	if err := rt.RegisterGroups(g); err != nil {
		t.Fatal(err)
	}
	return rt, fs, logs
}

// A submitted run's writer hands the store each flush (progress, events
// and steps) as one AppendBatch: no event, step or progress is written
// alone, and the history and the step log are complete and in order.
func TestSubmitWritesFlushesAsBatches(t *testing.T) {
	rt, fs, _ := batchingRuntime(t)
	id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "pipe", Task: svc.TaskSpec{Input: json.RawMessage(`"in"`)}})
	if err != nil {
		t.Fatal(err)
	}
	rec, evs := waitEnd(t, rt, fs, id)
	if rec.State != svc.RunCompleted {
		t.Fatalf("run %s (%s), want completed", rec.State, rec.Reason)
	}
	for _, m := range []faultstore.Method{faultstore.Append, faultstore.AppendSteps, faultstore.SetProgress} {
		if n := fs.Calls(m); n != 0 {
			t.Errorf("%s called %d times, want 0: every write of the run's writer goes in a batch", m, n)
		}
	}
	if n := fs.Calls(faultstore.AppendBatch); n == 0 {
		t.Error("AppendBatch never called")
	} else {
		t.Logf("%d events, 6 steps and the progress in %d batches", len(evs), n)
	}
	var order []string
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Errorf("event %d has Seq %d", i, ev.Seq)
		}
		if ev.Type == svc.RunAgentStarted || ev.Type == svc.RunAgentCompleted {
			order = append(order, string(ev.Type)+" "+ev.Agent)
		}
	}
	want := []string{"agent_started a", "agent_completed a", "agent_started b", "agent_completed b", "agent_started c", "agent_completed c"}
	if len(order) != len(want) {
		t.Fatalf("agent events %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("agent events %v, want %v", order, want)
		}
	}
	steps, err := fs.Steps(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[svc.StepKind]int{}
	for i, st := range steps {
		if st.Seq != int64(i+1) {
			t.Errorf("step %d has Seq %d", i, st.Seq)
		}
		kinds[st.Kind]++
	}
	if kinds[svc.StepModelCall] != 3 {
		t.Errorf("step log %+v, want the three model calls", steps)
	}
	if st, _ := rt.RunStatus(context.Background(), id); st.Progress.Completed == 0 {
		t.Errorf("status %+v: the progress written in the batches is missing", st)
	}
}

// A batch the store keeps failing (every retry) fails the run with reason
// store_error, as a failed event append did: a run whose history has a
// hole must not pass for complete.
func TestSubmitFailsRunWhenBatchCannotBeStored(t *testing.T) {
	rt, fs, logs := batchingRuntime(t)
	fs.Fail(faultstore.AppendBatch, -1, nil)
	id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "pipe", Task: svc.TaskSpec{Input: json.RawMessage(`"in"`)}})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := waitEnd(t, rt, fs, id)
	if rec.State != svc.RunFailed || rec.Reason != "store_error" {
		t.Fatalf("run %s (%s), want failed (store_error)", rec.State, rec.Reason)
	}
	if !logged(logs, zapcore.ErrorLevel, id) {
		t.Errorf("no error logged with run_id %s: %v", id, logs.All())
	}
}

// Transient batch failures are retried and the run completes with its
// whole history.
func TestSubmitRetriesBatches(t *testing.T) {
	rt, fs, _ := batchingRuntime(t)
	fs.Fail(faultstore.AppendBatch, 2, nil)
	id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "pipe", Task: svc.TaskSpec{Input: json.RawMessage(`"in"`)}})
	if err != nil {
		t.Fatal(err)
	}
	rec, evs := waitEnd(t, rt, fs, id)
	if rec.State != svc.RunCompleted {
		t.Fatalf("run %s (%s), want completed", rec.State, rec.Reason)
	}
	if fs.Failed(faultstore.AppendBatch) != 2 {
		t.Errorf("faults used %d, want 2", fs.Failed(faultstore.AppendBatch))
	}
	n := 0
	for _, ev := range evs {
		if ev.Type == svc.RunAgentCompleted {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d agent_completed events, want 3: %+v", n, evs)
	}
}
