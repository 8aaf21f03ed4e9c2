package supervisor_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
)

// TestRunsInFlight: a submitted run counts once in RunsInFlight (InFlight
// counts it twice, as the submission and as its run), a gather of three
// tasks once, and both stop counting when they end.
func TestRunsInFlight(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("slow", map[string]any{"latency_ms": 60000}))
	if n := rt.RunsInFlight(); n != 0 {
		t.Fatalf("RunsInFlight = %d before any run", n)
	}
	id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`"x"`)}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the submitted run to run", func() bool { return rt.RunsInFlight() == 1 && rt.InFlight() == 2 })

	ctx, cancel := context.WithCancel(context.Background())
	gathered := make(chan error, 1)
	go func() {
		tasks := []svc.TaskSpec{{Input: json.RawMessage(`1`)}, {Input: json.RawMessage(`2`)}, {Input: json.RawMessage(`3`)}}
		_, err := rt.Gather(ctx, "slow", tasks, 3)
		gathered <- err
	}()
	testutil.Eventually(t, "the gather to run", func() bool { return rt.RunsInFlight() == 2 })
	cancel()
	<-gathered
	if err := rt.CancelRun(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "both to end", func() bool { return rt.RunsInFlight() == 0 && rt.InFlight() == 0 })
}
