package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
)

// batch_started.max_concurrency is the bound in force: the requested value,
// capped at the task count (no more tasks than that can be in flight); an
// explicit 0 is refused like any value outside 1..10000.
func TestGatherBatchStartedConcurrency(t *testing.T) {
	for _, tc := range []struct{ requested, tasks, want int }{
		{2, 3, 2},
		{10, 3, 3},
		{svc.DefaultGatherConcurrency, 5, 5},
		{svc.DefaultGatherConcurrency, 150, svc.DefaultGatherConcurrency},
	} {
		rec := &emittertest.Recorder{}
		rt := newRuntime(t, svc.Options{}, rec, nil, echo("echo", nil))
		tasks := make([]svc.TaskSpec, tc.tasks)
		for i := range tasks {
			tasks[i].Input = json.RawMessage(`1`)
		}
		if _, err := rt.Gather(context.Background(), "echo", tasks, tc.requested); err != nil {
			t.Fatal(err)
		}
		bs := rec.OfType(svc.EventBatchStarted)
		if len(bs) != 1 || bs[0].Payload["max_concurrency"] != tc.want || bs[0].Payload["task_count"] != tc.tasks {
			t.Errorf("max_concurrency %d, %d tasks: batch_started %+v, want max_concurrency %d", tc.requested, tc.tasks, bs, tc.want)
		}
	}
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("echo", nil))
	_, err := rt.Gather(context.Background(), "echo", []svc.TaskSpec{{Input: json.RawMessage(`1`)}}, 0)
	if !errors.Is(err, svc.ErrSpecValidation) {
		t.Errorf("Gather with max_concurrency 0: %v, want a SpecValidationError", err)
	}
}
