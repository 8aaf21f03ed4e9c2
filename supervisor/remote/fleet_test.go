package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/group"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/worker"
)

// fleet is a publisher runtime and n workers in one process, on one
// in-memory broker: the distributed mode without processes.
type fleet struct {
	pub     *supervisor.Runtime
	rec     *emittertest.Recorder // the publisher's events
	workers []*worker.Worker
	wrec    *emittertest.Recorder // the workers' runtimes' events
	p       *dispatch.Publisher
}

func newFleet(t *testing.T, o svc.Options, n int, agents ...svc.Agent) *fleet {
	t.Helper()
	b := membroker.New()
	f := &fleet{rec: &emittertest.Recorder{}, wrec: &emittertest.Recorder{}}
	p, err := dispatch.New(context.Background(), dispatch.Config{Broker: b, Emitter: f.rec})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	pub, err := supervisor.New(supervisor.Config{Options: o, Emitter: f.rec, Dispatcher: p})
	if err != nil {
		t.Fatal(err)
	}
	f.pub = pub
	if err := pub.Register(agents...); err != nil {
		t.Fatal(err)
	}
	var rts []*supervisor.Runtime
	for range n {
		rt, err := supervisor.New(supervisor.Config{Emitter: f.wrec, Backend: p.Backend()})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Register(agents...); err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(context.Background(), worker.Config{Broker: b, Runner: rt, Heartbeat: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		rts = append(rts, rt)
		f.workers = append(f.workers, w)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := pub.Shutdown(ctx); err != nil {
			t.Errorf("publisher shutdown: %v", err)
		}
		for i, w := range f.workers {
			_ = w.Shutdown(ctx)
			_ = rts[i].Shutdown(ctx)
		}
		_ = p.Close()
		_ = b.Close()
	})
	return f
}

func (f *fleet) inFlight() int {
	n := 0
	for _, w := range f.workers {
		n += w.InFlight()
	}
	return n
}

func TestRemoteRunAndGather(t *testing.T) {
	f := newFleet(t, svc.Options{}, 2, echo("echo", nil))
	ctx := context.Background()
	res, err := f.pub.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`{"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || string(res.Output) != `{"x":1}` || res.Metadata.Backend != "broker:memory" || res.Metadata.Model != "test:echo" {
		t.Fatalf("result = %+v", res)
	}
	tasks := make([]svc.TaskSpec, 50)
	for i := range tasks {
		tasks[i] = svc.TaskSpec{Input: json.RawMessage(`[` + string(rune('0'+i%10)) + `]`)}
	}
	out, err := f.pub.Gather(ctx, "echo", tasks, 10)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out {
		if !r.Success || string(r.Output) != string(tasks[i].Input) {
			t.Fatalf("gather result %d = %+v", i, r)
		}
	}
	// The spec's rule 4: the publisher emits batch events and
	// agent_dispatched, never the per-agent events, which the workers emit.
	if n := len(f.rec.OfType(svc.EventAgentDispatched)); n != 51 {
		t.Errorf("agent_dispatched on the publisher: %d, want 51", n)
	}
	for _, typ := range []svc.EventType{svc.EventAgentSpawned, svc.EventAgentCompleted} {
		if n := len(f.rec.OfType(typ)); n != 0 {
			t.Errorf("%s on the publisher: %d, want 0", typ, n)
		}
		if n := len(f.wrec.OfType(typ)); n != 51 {
			t.Errorf("%s on the workers: %d, want 51", typ, n)
		}
	}
	if len(f.rec.OfType(svc.EventBatchStarted)) != 1 || len(f.rec.OfType(svc.EventBatchCompleted)) != 1 {
		t.Error("batch events missing on the publisher")
	}
	for _, ev := range f.rec.OfType(svc.EventAgentDispatched) {
		emittertest.CheckPayload(t, ev)
		if ev.Payload["backend"] != "broker:memory" || ev.Payload["broker"] != "memory" {
			t.Fatalf("agent_dispatched payload = %v", ev.Payload)
		}
	}
	for _, ev := range f.wrec.OfType(svc.EventAgentCompleted) {
		if ev.Payload["backend"] != "broker:memory" {
			t.Fatalf("worker agent_completed backend = %v", ev.Payload["backend"])
		}
	}
}

func TestRemoteFailureIsAResult(t *testing.T) {
	f := newFleet(t, svc.Options{}, 1, svc.Agent{Name: "broken", Model: "test:fail"})
	res, err := f.pub.Run(context.Background(), "broken", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Success || res.Error == nil || res.Error.Type != string(svc.KindModel) {
		t.Fatalf("result = %+v", res)
	}
	if !errors.Is(res.Failure(), svc.ErrModel) {
		t.Fatalf("typed failure = %v", res.Failure())
	}
	// agent_failed fired once, on the worker.
	if n, m := len(f.rec.OfType(svc.EventAgentFailed)), len(f.wrec.OfType(svc.EventAgentFailed)); n != 0 || m != 1 {
		t.Fatalf("agent_failed: publisher %d, workers %d", n, m)
	}
}

// The budget is the publisher's: a pre-check before dispatch and a charge
// from the tokens the worker reports. The task whose charge crosses it
// keeps its result; the next is refused before dispatch.
func TestRemoteBudget(t *testing.T) {
	o := opts(func(o *svc.Options) { o.TokenBudget = 5 })
	f := newFleet(t, o, 1, echo("big", map[string]any{"tokens": 4}))
	ctx := context.Background()
	tasks := []svc.TaskSpec{{Input: json.RawMessage(`1`)}, {Input: json.RawMessage(`2`)}, {Input: json.RawMessage(`3`)}}
	out, err := f.pub.Gather(ctx, "big", tasks, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !out[0].Success || !out[1].Success || out[2].Success || string(out[1].Output) != "2" {
		t.Fatalf("results: %+v %+v %+v", out[0], out[1], out[2])
	}
	if out[2].Error.Type != string(svc.KindBudgetExceeded) {
		t.Fatalf("over budget: %+v", out[2].Error)
	}
	// The second task's charge (8 of 5) crossed it, on the publisher.
	evs := f.rec.OfType(svc.EventBudgetExceeded)
	if len(evs) == 0 || evs[0].Payload["overshoot"] != int64(3) || evs[0].Payload["used"] != int64(8) {
		t.Fatalf("budget_exceeded on the publisher: %+v", evs)
	}
	// The third was refused before dispatch: two tasks went out.
	if n := len(f.rec.OfType(svc.EventAgentDispatched)); n != 2 {
		t.Fatalf("dispatched %d tasks, want 2", n)
	}
}

func TestRemoteGroup(t *testing.T) {
	g, err := group.New("pipe").Node("a", "echo").Node("b", "echo").Edge("a", "b").Build()
	if err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, svc.Options{}, 2, echo("echo", nil))
	if err := f.pub.RegisterGroups(g); err != nil {
		t.Fatal(err)
	}
	res, err := f.pub.RunGroup(context.Background(), "pipe", svc.TaskSpec{Input: json.RawMessage(`"hi"`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Agent == nil || !res.Agent.Success || string(res.Agent.Output) != `"hi"` {
		t.Fatalf("group result = %+v", res)
	}
	if len(f.rec.OfType(svc.EventGroupStarted)) != 1 || len(f.rec.OfType(svc.EventGroupCompleted)) != 1 {
		t.Fatal("group events missing on the publisher")
	}
	if n := len(f.rec.OfType(svc.EventAgentDispatched)); n != 2 {
		t.Fatalf("dispatched %d nodes, want 2", n)
	}
}

// Cancelling a submitted run stops its task on the worker, and the run
// ends cancelled with run_cancelled last, as in one process.
func TestRemoteCancelSubmitted(t *testing.T) {
	f := newFleet(t, svc.Options{}, 1, echo("slow", map[string]any{"latency_ms": 60_000}))
	ctx := context.Background()
	id, err := f.pub.Submit(ctx, svc.SubmitRequest{Target: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the task runs on the worker", func() bool { return f.inFlight() == 1 })
	if err := f.pub.CancelRun(ctx, id); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the worker stops the task", func() bool { return f.inFlight() == 0 })
	st, err := f.pub.RunStatus(ctx, id)
	if err != nil || st.State != svc.RunCancelled {
		t.Fatalf("status = %+v, %v", st, err)
	}
	ch, err := f.pub.RunEvents(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, ch)
	if len(evs) == 0 || evs[len(evs)-1].Type != svc.RunRunCancelled {
		t.Fatalf("events = %+v", evs)
	}
}

// A timeout on the publisher ends the run with TimeoutError and stops the
// task on the worker.
func TestRemoteTimeout(t *testing.T) {
	o := opts(func(o *svc.Options) { o.TimeoutSeconds = 0.3 })
	f := newFleet(t, o, 1, echo("slow", map[string]any{"latency_ms": 60_000}))
	_, err := f.pub.Run(context.Background(), "slow", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if !errors.Is(err, svc.ErrTimeout) {
		t.Fatalf("err = %v, want TimeoutError", err)
	}
	testutil.Eventually(t, "the worker stops the task", func() bool { return f.inFlight() == 0 })
}

// An agent no worker serves fails with a clear error at the timeout
// instead of hanging.
func TestRemoteNoWorker(t *testing.T) {
	o := opts(func(o *svc.Options) { o.TimeoutSeconds = 0.3 })
	f := newFleet(t, o, 0, echo("orphan", nil))
	_, err := f.pub.Run(context.Background(), "orphan", svc.TaskSpec{Input: json.RawMessage(`1`)})
	var e *svc.Error
	if !errors.As(err, &e) || e.Kind != svc.KindTimeout {
		t.Fatalf("err = %v, want TimeoutError", err)
	}
	if !strings.Contains(e.Error(), "no worker") {
		t.Fatalf("message %q does not say no worker serves the agent", e.Error())
	}
}

// A team's coordinator (compiled here with the delegate tool) runs on the
// publisher; its delegate calls are dispatched to the fleet.
func TestRemoteTeam(t *testing.T) {
	lead := svc.Agent{Name: "lead", Model: "test:echo", ModelSettings: map[string]any{"call_tools": "all"}}
	f := newFleet(t, svc.Options{}, 1, lead, echo("helper", nil))
	if err := f.pub.RegisterGroups(group.Team("crew", "lead", []string{"helper"}, 2)); err != nil {
		t.Fatal(err)
	}
	res, err := f.pub.RunGroup(context.Background(), "crew", svc.TaskSpec{Input: json.RawMessage(`"plan"`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Agent == nil || !res.Agent.Success {
		t.Fatalf("team result = %+v", res)
	}
	var out struct {
		Tools map[string]json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(res.Agent.Output, &out); err != nil || out.Tools["delegate"] == nil {
		t.Fatalf("the coordinator did not call delegate: %s (%v)", res.Agent.Output, err)
	}
	// The delegate ran on a worker.
	dispatched := f.rec.OfType(svc.EventAgentDispatched)
	if len(dispatched) != 1 || dispatched[0].AgentName != "helper" {
		t.Fatalf("dispatched = %+v, want the one delegate call", dispatched)
	}
	if n := len(f.wrec.OfType(svc.EventAgentCompleted)); n != 1 {
		t.Fatalf("agent_completed on the workers: %d, want 1", n)
	}
}

func echo(name string, settings map[string]any) svc.Agent {
	return svc.Agent{Name: name, Model: "test:echo", ModelSettings: settings}
}

func opts(mod func(*svc.Options)) svc.Options {
	o := svc.DefaultOptions()
	mod(&o)
	return o
}

// collect reads a run's event stream to its end.
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
