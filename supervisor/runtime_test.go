package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/testmodel"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newRuntime starts a runtime with opts (zero = defaults) and agents, and
// shuts it down when the test ends.
func newRuntime(t *testing.T, opts svc.Options, rec svc.Emitter, models *model.Registry, agents ...svc.Agent) *supervisor.Runtime {
	t.Helper()
	rt, err := supervisor.New(supervisor.Config{Options: opts, Emitter: rec, Models: models})
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
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	return rt
}

func opts(mod func(*svc.Options)) svc.Options {
	o := svc.DefaultOptions()
	mod(&o)
	return o
}

func echo(name string, settings map[string]any) svc.Agent {
	return svc.Agent{Name: name, Model: "test:echo", ModelSettings: settings}
}

func TestRunEcho(t *testing.T) {
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, svc.Options{}, rec, nil, echo("echo", nil))
	res, err := rt.Run(context.Background(), "echo", svc.TaskSpec{ID: "t1", Input: json.RawMessage(`{"text":"hello world"}`), RequestID: "req-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || string(res.Output) != `{"text":"hello world"}` || res.TaskID != "t1" || res.AgentName != "echo" {
		t.Fatalf("result = %+v", res)
	}
	md := res.Metadata
	if md.TraceID != "req-1" || md.Model != "test:echo" || md.Attempts != 1 || md.Backend != "local" || md.TokensUsed <= 0 {
		t.Fatalf("metadata = %+v", md)
	}
	evs := rec.Events()
	if len(evs) != 2 || evs[0].EventType != svc.EventAgentSpawned || evs[1].EventType != svc.EventAgentCompleted {
		t.Fatalf("events = %+v", evs)
	}
	for _, ev := range evs {
		emittertest.CheckPayload(t, ev)
		if ev.TraceID != "req-1" || ev.TaskID != "t1" || ev.AgentName != "echo" {
			t.Errorf("event ids = %+v", ev)
		}
	}
	if evs[1].Payload["model"] != "test:echo" || evs[1].Payload["tokens_used"] != md.TokensUsed {
		t.Errorf("agent_completed payload = %v", evs[1].Payload)
	}
}

func TestRunGeneratesIDs(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("echo", nil))
	res, err := rt.Run(context.Background(), "echo", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.TaskID == "" || res.Metadata.TraceID == "" {
		t.Fatalf("ids not generated: %+v", res)
	}
	res2, _ := rt.Run(svc.WithRequestID(context.Background(), "from-ctx"), "echo", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if res2.Metadata.TraceID != "from-ctx" {
		t.Fatalf("trace from ctx = %q", res2.Metadata.TraceID)
	}
}

func TestUnknownAgentAndBadInput(t *testing.T) {
	a := echo("typed", nil)
	a.InputType = json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)
	rt := newRuntime(t, svc.Options{}, nil, nil, a)
	if _, err := rt.Run(context.Background(), "nope", svc.TaskSpec{Input: json.RawMessage(`1`)}); !errors.Is(err, svc.ErrRegistry) {
		t.Fatalf("unknown agent: %v", err)
	}
	if _, err := rt.Run(context.Background(), "typed", svc.TaskSpec{Input: json.RawMessage(`{"text":3}`)}); !errors.Is(err, svc.ErrSpecValidation) {
		t.Fatalf("bad input: %v", err)
	}
	if _, err := rt.Gather(context.Background(), "typed", []svc.TaskSpec{{Input: json.RawMessage(`{"text":"a"}`)}, {Input: json.RawMessage(`{}`)}}, 2); !errors.Is(err, svc.ErrSpecValidation) || !strings.Contains(err.Error(), "tasks[1]") {
		t.Fatalf("bad gather input: %v", err)
	}
}

func TestFallbackModel(t *testing.T) {
	a := svc.Agent{Name: "fb", Model: "test:fail", FallbackModels: []string{"test:echo"}}
	rt := newRuntime(t, svc.Options{}, nil, nil, a)
	res, err := rt.Run(context.Background(), "fb", svc.TaskSpec{Input: json.RawMessage(`"hi"`)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || res.Metadata.Model != "test:echo" || string(res.Output) != `"hi"` {
		t.Fatalf("result = %+v", res)
	}
}

func TestFailureIsAResult(t *testing.T) {
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, svc.Options{}, rec, nil, svc.Agent{Name: "bad", Model: "test:fail"})
	res, err := rt.Run(context.Background(), "bad", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Success || res.Error == nil || res.Error.Type != "ModelError" || string(res.Output) != "" {
		t.Fatalf("result = %+v", res)
	}
	failed := rec.OfType(svc.EventAgentFailed)
	if len(failed) != 1 {
		t.Fatalf("agent_failed events = %d", len(failed))
	}
	emittertest.CheckPayload(t, failed[0])
	if failed[0].Payload["reason"] != "ModelError" || failed[0].Payload["model"] != "test:fail" {
		t.Errorf("reason = %v", failed[0].Payload["reason"])
	}
}

func TestRetryBySupervision(t *testing.T) {
	for _, tc := range []struct {
		attempts int
		success  bool
	}{{3, true}, {2, false}} {
		t.Run(fmt.Sprint(tc.attempts), func(t *testing.T) {
			rec := &emittertest.Recorder{}
			o := opts(func(o *svc.Options) { o.RetryMaxAttempts = tc.attempts; o.RetryBackoffFactor = 1 })
			rt := newRuntime(t, o, rec, nil, echo("flaky", map[string]any{"fail_times": 2}))
			start := time.Now()
			res, err := rt.Run(context.Background(), "flaky", svc.TaskSpec{Input: json.RawMessage(`"x"`)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Success != tc.success || res.Metadata.Attempts != tc.attempts {
				t.Fatalf("result = %+v", res)
			}
			// Backoff: the pauses before attempts 2..n are RetryBackoffBase each.
			if min := time.Duration(tc.attempts-1) * svc.RetryBackoffBase; time.Since(start) < min {
				t.Errorf("took %v, backoff needs at least %v", time.Since(start), min)
			}
			if n := len(rec.OfType(svc.EventAgentSpawned)); n != 1 {
				t.Errorf("agent_spawned = %d, want 1 per invocation", n)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	o := opts(func(o *svc.Options) { o.TimeoutSeconds = 0.2 })
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, o, rec, nil, echo("slow", map[string]any{"latency_ms": 10000}), echo("fast", nil))
	start := time.Now()
	_, err := rt.Run(context.Background(), "slow", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if !errors.Is(err, svc.ErrTimeout) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("timeout took %v", time.Since(start))
	}
	f := rec.OfType(svc.EventAgentFailed)
	if len(f) != 1 || f[0].Payload["reason"] != "TimeoutError" {
		t.Fatalf("agent_failed = %+v", f)
	}
	// Inside a gather a timeout is that task's failed result.
	rtg := newRuntime(t, o, nil, nil, echo("slow", map[string]any{"latency_ms": 10000}))
	res, err := rtg.Gather(context.Background(), "slow", []svc.TaskSpec{{Input: json.RawMessage(`1`)}}, 1)
	if err != nil || res[0].Success || res[0].Error.Type != "TimeoutError" {
		t.Fatalf("gather timeout: %v %+v", err, res)
	}
}

func TestCancelReachesModelCall(t *testing.T) {
	rt := newRuntime(t, svc.Options{}, nil, nil, echo("slow", map[string]any{"latency_ms": 30000}))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := rt.Run(ctx, "slow", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if !errors.Is(err, svc.ErrCancelled) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("cancel took %v", time.Since(start))
	}
}

// The run whose charge overdraws the runtime's budget keeps its result,
// and its budget_exceeded says by how much; the next run is refused, its
// budget_exceeded emitted before the error is returned.
func TestBudget(t *testing.T) {
	o := opts(func(o *svc.Options) { o.TokenBudget = 5 })
	rec := &emittertest.Recorder{}
	var seen atomic.Int32
	em := svc.EmitterFunc(func(ev svc.RuntimeEvent) {
		rec.Emit(ev)
		if ev.EventType == svc.EventBudgetExceeded {
			seen.Add(1)
		}
	})
	rt := newRuntime(t, o, em, nil, echo("spender", map[string]any{"tokens": 10}))
	res, err := rt.Run(context.Background(), "spender", svc.TaskSpec{Input: json.RawMessage(`1`), RequestID: "b1"})
	if err != nil || !res.Success || string(res.Output) != "1" {
		t.Fatalf("the run overdrawing the budget: %+v, %v", res, err)
	}
	_, err = rt.Run(context.Background(), "spender", svc.TaskSpec{Input: json.RawMessage(`1`), RequestID: "b2"})
	if !errors.Is(err, svc.ErrBudgetExceeded) {
		t.Fatalf("err = %v", err)
	}
	if seen.Load() != 2 {
		t.Fatalf("%d budget_exceeded emitted before the error was returned, want 2", seen.Load())
	}
	evs := rec.OfType(svc.EventBudgetExceeded)
	for _, ev := range evs {
		emittertest.CheckPayload(t, ev)
	}
	if ev := evs[0]; ev.Payload["limit"] != int64(5) || ev.Payload["used"] != int64(10) || ev.Payload["overshoot"] != int64(5) || ev.TraceID != "b1" {
		t.Fatalf("budget event = %+v", ev)
	}
	if ev := evs[1]; ev.Payload["used"] != int64(10) || ev.Payload["overshoot"] != nil || ev.TraceID != "b2" {
		t.Fatalf("refusal event = %+v", ev)
	}
}

// TestDepthLimit nests runs through a tool that calls the runtime again, the
// way spawn_agents will: each level is one deeper than the invocation that
// started it.
func TestDepthLimit(t *testing.T) {
	o := opts(func(o *svc.Options) { o.MaxSpawnDepth = 2 })
	rec := &emittertest.Recorder{}
	var rt *supervisor.Runtime
	type in struct {
		Note string `json:"note,omitempty"`
	}
	var deepest atomic.Int64
	nest, err := tools.Func("nest", "run myself again", svc.AccessRead, func(ctx context.Context, _ in) (map[string]any, error) {
		deepest.Store(int64(svc.DepthFrom(ctx)))
		res, err := rt.Run(ctx, "nester", svc.TaskSpec{Input: json.RawMessage(`{}`)})
		if err != nil {
			return nil, err
		}
		return map[string]any{"child": res.Success}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	a := svc.Agent{Name: "nester", Model: "test:echo", Tools: []svc.Tool{nest}, TrustLevel: svc.TrustLow,
		ModelSettings: map[string]any{"call_tools": "all"}}
	rt = newRuntime(t, o, rec, nil, a)
	res, err := rt.Run(context.Background(), "nester", svc.TaskSpec{Input: json.RawMessage(`{}`)})
	if err != nil || !res.Success {
		t.Fatalf("top run: %v %+v", err, res)
	}
	if deepest.Load() != 2 {
		t.Errorf("deepest tool ran at depth %d, want 2", deepest.Load())
	}
	d := rec.OfType(svc.EventDepthLimitExceeded)
	if len(d) != 1 {
		t.Fatalf("depth_limit_exceeded events = %d", len(d))
	}
	emittertest.CheckPayload(t, d[0])
	if d[0].Payload["limit"] != 2 || d[0].Payload["depth"] != 3 {
		t.Fatalf("payload = %v", d[0].Payload)
	}
	// The refused run surfaced to the deepest tool as a failed call.
	failed := rec.OfType(svc.EventToolCallFailed)
	if len(failed) != 1 || !strings.Contains(fmt.Sprint(failed[0].Payload["error"]), "max_spawn_depth") {
		t.Fatalf("tool_call_failed = %+v", failed)
	}
}

func TestGather(t *testing.T) {
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, svc.Options{}, rec, nil, echo("echo", map[string]any{"fail_on": "bad"}))
	tasks := make([]svc.TaskSpec, 500)
	for i := range tasks {
		in := fmt.Sprintf(`{"n":%d}`, i)
		if i%7 == 0 {
			in = fmt.Sprintf(`{"n":%d,"s":"bad"}`, i)
		}
		tasks[i] = svc.TaskSpec{ID: fmt.Sprint(i), Input: json.RawMessage(in)}
	}
	res, err := rt.Gather(svc.WithRequestID(context.Background(), "batch-1"), "echo", tasks, 13)
	if err != nil {
		t.Fatal(err)
	}
	fails := 0
	for i, r := range res {
		if r.TaskID != fmt.Sprint(i) {
			t.Fatalf("result %d has task %s: order lost", i, r.TaskID)
		}
		if i%7 == 0 {
			fails++
			if r.Success {
				t.Fatalf("task %d should have failed", i)
			}
			continue
		}
		if !r.Success || string(r.Output) != string(tasks[i].Input) || r.Metadata.TraceID != "batch-1" {
			t.Fatalf("task %d: %+v", i, r)
		}
	}
	bs, bc := rec.OfType(svc.EventBatchStarted), rec.OfType(svc.EventBatchCompleted)
	if len(bs) != 1 || len(bc) != 1 {
		t.Fatalf("batch events %d/%d", len(bs), len(bc))
	}
	emittertest.CheckPayload(t, bs[0])
	emittertest.CheckPayload(t, bc[0])
	if bs[0].Payload["task_count"] != 500 || bs[0].Payload["max_concurrency"] != 13 || bs[0].TraceID != "batch-1" || bs[0].TaskID != "" {
		t.Errorf("batch_started = %+v", bs[0])
	}
	if bc[0].Payload["success_count"] != 500-fails || bc[0].Payload["failure_count"] != fails {
		t.Errorf("batch_completed = %+v", bc[0].Payload)
	}
}

func TestGatherConcurrencyBound(t *testing.T) {
	var cur, peak atomic.Int64
	reg := model.NewRegistry()
	reg.Register("probe", func(string) (svc.Model, error) {
		return svc.ModelFunc(func(ctx context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			n := cur.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
			cur.Add(-1)
			return svc.ModelResponse{Output: req.Messages[0].Content}, nil
		}), nil
	})
	rt := newRuntime(t, svc.Options{}, nil, reg, svc.Agent{Name: "p", Model: "probe:x"})
	tasks := make([]svc.TaskSpec, 200)
	for i := range tasks {
		tasks[i].Input = json.RawMessage(`1`)
	}
	if _, err := rt.Gather(context.Background(), "p", tasks, 7); err != nil {
		t.Fatal(err)
	}
	if peak.Load() > 7 || peak.Load() < 2 {
		t.Fatalf("peak concurrency %d, bound 7", peak.Load())
	}
	for _, n := range []int{0, -1, 10001} {
		if _, err := rt.Gather(context.Background(), "p", tasks, n); !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("max_concurrency %d: %v", n, err)
		}
	}
}

func TestRegisteredAgentIsImmutable(t *testing.T) {
	settings := map[string]any{"output": map[string]any{"v": 1}}
	a := svc.Agent{Name: "fixed", Model: "test:echo", ModelSettings: settings, FallbackModels: []string{"test:echo"}}
	rt := newRuntime(t, svc.Options{}, nil, nil, a)
	settings["output"].(map[string]any)["v"] = 2
	a.FallbackModels[0] = "test:fail"
	res, err := rt.Run(context.Background(), "fixed", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil || string(res.Output) != `{"v":1}` {
		t.Fatalf("registered agent changed through the caller's value: %v %s", err, res.Output)
	}
	got, _ := rt.Agent("fixed")
	got.ModelSettings["output"] = "changed"
	again, _ := rt.Agent("fixed")
	if again.FallbackModels[0] != "test:echo" || fmt.Sprint(again.ModelSettings["output"]) != "map[v:1]" {
		t.Fatalf("registered agent changed through a copy: %+v", again)
	}
	if err := rt.Register(a); !errors.Is(err, svc.ErrSpecValidation) {
		t.Fatalf("duplicate register: %v", err)
	}
}

func TestToolPanicIsContained(t *testing.T) {
	type in struct{}
	boom, _ := tools.Func("boom", "panics", svc.AccessRead, func(context.Context, in) (string, error) { panic("kaboom") })
	a := svc.Agent{Name: "p", Model: "test:echo", Tools: []svc.Tool{boom}, ModelSettings: map[string]any{"call_tools": "all"}}
	rec := &emittertest.Recorder{}
	rt := newRuntime(t, svc.Options{}, rec, nil, a)
	res, err := rt.Run(context.Background(), "p", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	// The panic is the tool's failure, which the model sees; the run and the
	// process go on.
	f := rec.OfType(svc.EventToolCallFailed)
	if len(f) != 1 || !strings.Contains(fmt.Sprint(f[0].Payload["error"]), "kaboom") {
		t.Fatalf("tool_call_failed = %+v", f)
	}
	if !res.Success || !strings.Contains(string(res.Output), "kaboom") {
		t.Fatalf("result = %+v, want the model to have seen the failed call", res)
	}
}

func TestShutdown(t *testing.T) {
	before := goleak.IgnoreCurrent()
	rt, err := supervisor.New(supervisor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(echo("slow", map[string]any{"latency_ms": 60000}), echo("echo", nil)); err != nil {
		t.Fatal(err)
	}
	waiting := testmodel.Waiting()
	done := make(chan error, 1)
	go func() {
		_, err := rt.Run(context.Background(), "slow", svc.TaskSpec{Input: json.RawMessage(`1`)})
		done <- err
	}()
	// In flight means in its model call; on a loaded machine that can take
	// longer than any fixed sleep.
	testutil.Eventually(t, "the slow run in its model call", func() bool { return testmodel.Waiting() > waiting })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := rt.Shutdown(ctx); err == nil {
		t.Error("Shutdown with a run still in flight at the deadline should report it")
	}
	if err := <-done; !errors.Is(err, svc.ErrShuttingDown) {
		t.Fatalf("in-flight run cut short by shutdown: %v, want ShuttingDownError", err)
	}
	if _, err := rt.Run(context.Background(), "echo", svc.TaskSpec{Input: json.RawMessage(`1`)}); !errors.Is(err, svc.ErrShuttingDown) {
		t.Fatalf("run after shutdown: %v", err)
	}
	if err := rt.Ready(context.Background()); !errors.Is(err, svc.ErrShuttingDown) {
		t.Fatalf("ready after shutdown: %v", err)
	}
	if err := rt.Shutdown(context.Background()); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	goleak.VerifyNone(t, before)
}

var _ = testmodel.New
