package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools"
)

// stuckTool is a tool whose calls ignore their context and block until the
// test releases them: what a tool stuck in a system call looks like to the
// runtime. Release is idempotent and registered as a cleanup, so the
// goroutines end before goleak looks.
type stuckTool struct {
	svc.Tool
	entered chan struct{}
	release func()
}

func newStuckTool(t *testing.T) *stuckTool {
	st := &stuckTool{entered: make(chan struct{}, 16)}
	gate := make(chan struct{})
	var once sync.Once
	st.release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(st.release)
	st.Tool = tools.MustFunc("block", "Blocks until released, whatever its context says.", svc.AccessRead,
		func(context.Context, struct{}) (struct{}, error) {
			st.entered <- struct{}{}
			<-gate
			return struct{}{}, nil
		})
	return st
}

func stuckAgent(tool svc.Tool) svc.Agent {
	return svc.Agent{Name: "stuck", Model: "test:echo", TrustLevel: svc.TrustHigh,
		Tools: []svc.Tool{tool}, ModelSettings: map[string]any{"call_tools": "all"}}
}

// waitStuck waits until the runtime counts n abandoned calls.
func waitStuck(t *testing.T, rt *supervisor.Runtime, n int) svc.StuckStats {
	t.Helper()
	var st svc.StuckStats
	testutil.Eventually(t, "the stuck count to reach "+string(rune('0'+n)), func() bool {
		st = rt.Stuck()
		return st.Count == n && len(st.Calls) == n
	})
	return st
}

// A tool that never returns must not hang its run: at timeout_seconds the
// run fails with TimeoutError, the tool's goroutine is counted stuck, and
// uncounted once it returns.
func TestStuckToolTimesOut(t *testing.T) {
	tool := newStuckTool(t)
	rt := newRuntime(t, opts(func(o *svc.Options) { o.TimeoutSeconds = 0.5 }), nil, nil, stuckAgent(tool))
	t.Cleanup(tool.release) // before the runtime's shutdown, should the test fail

	done := make(chan error, 1)
	go func() {
		_, err := rt.Run(context.Background(), "stuck", svc.TaskSpec{ID: "t1", Input: json.RawMessage(`"x"`)})
		done <- err
	}()
	var err error
	testutil.Eventually(t, "the run to answer past its timeout", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, svc.ErrTimeout) || !strings.Contains(err.Error(), "tool block did not return") {
		t.Fatalf("run: err %v; want a TimeoutError naming the tool", err)
	}
	st := waitStuck(t, rt, 1)
	c := st.Calls[0]
	if c.Kind != "tool" || c.Name != "block" || c.Agent != "stuck" || c.TaskID != "t1" || c.Reason != "timeout" || c.AbandonedAt.IsZero() {
		t.Errorf("stuck call = %+v", c)
	}
	tool.release()
	waitStuck(t, rt, 0)
}

// Cancelling the caller's context answers at once with CancelledError,
// whatever the tool does.
func TestStuckToolCancelled(t *testing.T) {
	tool := newStuckTool(t)
	rt := newRuntime(t, svc.Options{}, nil, nil, stuckAgent(tool))
	t.Cleanup(tool.release) // before the runtime's shutdown, should the test fail
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := rt.Run(ctx, "stuck", svc.TaskSpec{Input: json.RawMessage(`"x"`)})
		done <- err
	}()
	<-tool.entered
	cancel()
	var err error
	testutil.Eventually(t, "the cancelled run to answer", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, svc.ErrCancelled) {
		t.Fatalf("run: err %v; want a CancelledError", err)
	}
	if st := waitStuck(t, rt, 1); st.Calls[0].Reason != "cancelled" {
		t.Errorf("stuck call = %+v", st.Calls[0])
	}
	tool.release()
	waitStuck(t, rt, 0)
}

// A submitted run cancelled with CancelRun ends cancelled and its caller's
// wait ends too, though its tool is stuck.
func TestStuckToolSubmittedCancel(t *testing.T) {
	tool := newStuckTool(t)
	rt := newRuntime(t, svc.Options{}, nil, nil, stuckAgent(tool))
	t.Cleanup(tool.release) // before the runtime's shutdown, should the test fail
	ctx := context.Background()
	id, err := rt.Submit(ctx, svc.SubmitRequest{Target: "stuck", Task: svc.TaskSpec{Input: json.RawMessage(`"x"`)}})
	if err != nil {
		t.Fatal(err)
	}
	<-tool.entered
	if err := rt.CancelRun(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitStuck(t, rt, 1)
	testutil.Eventually(t, "the submitted run to leave the runtime", func() bool { return rt.InFlight() == 0 })
	tool.release()
	waitStuck(t, rt, 0)
}

// Shutdown returns within its context however stuck a tool is, with an
// error naming it.
func TestShutdownWithStuckTool(t *testing.T) {
	tool := newStuckTool(t)
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(stuckAgent(tool)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := rt.Run(context.Background(), "stuck", svc.TaskSpec{ID: "t9", Input: json.RawMessage(`"x"`)})
		done <- err
	}()
	<-tool.entered
	if rt.InFlight() != 1 {
		t.Errorf("InFlight = %d; want 1", rt.InFlight())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- rt.Shutdown(ctx) }()
	var serr error
	testutil.Eventually(t, "Shutdown to return", func() bool {
		select {
		case serr = <-stopped:
			return true
		default:
			return false
		}
	})
	var se *supervisor.StuckError
	if !errors.As(serr, &se) || len(se.Calls) != 1 || !strings.Contains(serr.Error(), "1 call still running") ||
		!strings.Contains(serr.Error(), "tool block (agent stuck, task t9") {
		t.Errorf("Shutdown: %v; want a StuckError naming tool block", serr)
	}
	if err := <-done; !errors.Is(err, svc.ErrShuttingDown) {
		t.Errorf("run: %v; want ShuttingDownError", err)
	}
	tool.release()
	waitStuck(t, rt, 0)
}

// A model call that ignores its context is abandoned like a tool call: in
// a gather, the stuck task fails with TimeoutError naming the model, and
// the others are unaffected.
func TestStuckModelInGather(t *testing.T) {
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	reg := model.NewRegistry()
	reg.Register("deaf", func(string) (svc.Model, error) {
		return svc.ModelFunc(func(_ context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			if string(req.Messages[0].Content) == `"hang"` {
				<-gate
			}
			return svc.ModelResponse{Output: req.Messages[0].Content}, nil
		}), nil
	})
	rt := newRuntime(t, opts(func(o *svc.Options) { o.TimeoutSeconds = 0.5 }), nil, reg, svc.Agent{Name: "deaf", Model: "deaf:m"})
	t.Cleanup(release) // before the runtime's shutdown, should the test fail

	done := make(chan []svc.AgentResult, 1)
	go func() {
		res, err := rt.Gather(context.Background(), "deaf", []svc.TaskSpec{
			{ID: "ok", Input: json.RawMessage(`"fine"`)}, {ID: "hang", Input: json.RawMessage(`"hang"`)}}, 2)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var res []svc.AgentResult
	testutil.Eventually(t, "the gather to answer", func() bool {
		select {
		case res = <-done:
			return true
		default:
			return false
		}
	})
	if len(res) != 2 || !res[0].Success || res[1].Success || res[1].Error == nil || res[1].Error.Type != "TimeoutError" ||
		!strings.Contains(res[1].Error.Message, "model deaf:m did not return") {
		t.Fatalf("results = %+v", res)
	}
	if st := waitStuck(t, rt, 1); st.Calls[0].Kind != "model" || st.Calls[0].TaskID != "hang" {
		t.Errorf("stuck call = %+v", st.Calls[0])
	}
	release()
	waitStuck(t, rt, 0)
}
