package hostapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors/msg"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
)

// hostRuntime starts a runtime in the host's actor system, and shuts it
// down (the runtime, not the system) when the test ends.
func hostRuntime(t *testing.T, host *actor.ActorSystem, cfg supervisor.Config, agents ...svc.Agent) *supervisor.Runtime {
	t.Helper()
	cfg.System = host
	rt, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, rt) })
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	return rt
}

func shutdown(t *testing.T, rt *supervisor.Runtime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func hostSystem(t *testing.T) *actor.ActorSystem {
	t.Helper()
	host := supervisor.NewActorSystem(nil)
	t.Cleanup(host.Shutdown)
	return host
}

// probe is a host actor that hands every user message it gets to a
// channel.
func probe(host *actor.ActorSystem) (*actor.PID, chan any) {
	ch := make(chan any, 100_000)
	pid := host.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
			return
		}
		ch <- c.Message()
	}))
	return pid, ch
}

// next waits for the next message of type T on ch, skipping others.
func next[T any](t *testing.T, ch chan any) T {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case m := <-ch:
			if v, ok := m.(T); ok {
				return v
			}
		case <-deadline:
			var zero T
			t.Fatalf("no %T within 20 s", zero)
			return zero
		}
	}
}

func request(t *testing.T, host *actor.ActorSystem, pid *actor.PID, m any) any {
	t.Helper()
	res, err := host.Root.RequestFuture(pid, m, 20*time.Second).Result()
	if err != nil {
		t.Fatalf("request %T: %v", m, err)
	}
	return res
}

func localIDs(system *actor.ActorSystem) []string {
	var ids []string
	for _, m := range system.ProcessRegistry.LocalPIDs.LocalPIDs {
		ids = append(ids, m.Keys()...)
	}
	return ids
}

// TestHostSystem: a runtime given the host's actor system spawns its
// actors there under its prefix, builds no system of its own, and its
// Shutdown stops its actors only: the host's actor still answers, and
// once the host stops its system no goroutine is left.
func TestHostSystem(t *testing.T) {
	before := goleak.IgnoreCurrent()
	host := supervisor.NewActorSystem(nil)
	hostActor := host.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if s, ok := c.Message().(string); ok {
			c.Respond("host: " + s)
		}
	}))
	rt, err := supervisor.New(supervisor.Config{System: host, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(echo("echo", nil), echo("slow", map[string]any{"latency_ms": 1000})); err != nil {
		t.Fatal(err)
	}
	if rt.System() != host {
		t.Fatal("the runtime built a system of its own")
	}
	res, ok := request(t, host, rt.PID(), &msg.RunAgent{Ref: "r1", Agent: "echo", Task: svc.TaskSpec{Input: json.RawMessage(`"hi"`)}}).(*msg.AgentResult)
	if !ok || res.Ref != "r1" || !res.Result.Success || string(res.Result.Output) != `"hi"` {
		t.Fatalf("reply = %#v", res)
	}
	// A run in flight while we look at the names: its actors are svc's.
	// The reply may come before the run's actors are gone: wait for them
	// first, so that the actors below are the next run's.
	testutil.Eventually(t, "the first run's actors gone", func() bool {
		for _, id := range localIDs(host) {
			if strings.HasPrefix(id, "svc/runs-") && strings.Count(id, "/") >= 2 {
				return false
			}
		}
		return true
	})
	pid, ch := probe(host)
	host.Root.RequestWithCustomSender(rt.PID(), &msg.RunAgent{Ref: "slow", Agent: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}}, pid)
	testutil.Eventually(t, "the slow run's actors spawned", func() bool {
		for _, id := range localIDs(host) {
			if strings.HasPrefix(id, "svc/runs-") && strings.Count(id, "/") >= 3 { // shard/run/invocation
				return true
			}
		}
		return false
	})
	var svcIDs int
	for _, id := range localIDs(host) {
		if strings.HasPrefix(id, "svc/") {
			svcIDs++
		} else if !strings.HasPrefix(id, "future") && id != hostActor.Id && id != pid.Id && id != "eventstream" && id != "deadletter" {
			t.Errorf("actor %q: not under the svc/ prefix", id)
		}
	}
	if svcIDs < 5 { // two shards, the API, a run and its invocation
		t.Errorf("%d svc/ actors, want at least 5: %v", svcIDs, localIDs(host))
	}
	if r := next[*msg.AgentResult](t, ch); !r.Result.Success {
		t.Fatalf("slow run: %+v", r)
	}
	shutdown(t, rt)
	for _, id := range localIDs(host) {
		if strings.HasPrefix(id, "svc/") {
			t.Errorf("actor %s still registered after Shutdown", id)
		}
	}
	got, err := host.Root.RequestFuture(hostActor, "ping", 5*time.Second).Result()
	if err != nil || got != "host: ping" {
		t.Fatalf("host actor after svc shut down: %v %v", got, err)
	}
	// The runtime's actor is gone: a request to it is a dead letter.
	if _, err := host.Root.RequestFuture(rt.PID(), &msg.RunAgent{Agent: "echo"}, 5*time.Second).Result(); !errors.Is(err, actor.ErrDeadLetter) {
		t.Fatalf("request to a shut-down runtime: %v, want a dead letter", err)
	}
	host.Shutdown()
	goleak.VerifyNone(t, before)
}

// TestHostPrefixes: two runtimes share one host system under two
// prefixes; the same prefix twice is refused.
func TestHostPrefixes(t *testing.T) {
	host := hostSystem(t)
	a := hostRuntime(t, host, supervisor.Config{Shards: 1}, echo("echo", nil))
	b := hostRuntime(t, host, supervisor.Config{Shards: 1, Prefix: "svc2"}, echo("echo", nil))
	if a.PID().Id != "svc/api" || b.PID().Id != "svc2/api" {
		t.Fatalf("PIDs %s, %s", a.PID().Id, b.PID().Id)
	}
	if _, err := supervisor.New(supervisor.Config{System: host, Shards: 1}); err == nil {
		t.Fatal("a second runtime under the same prefix started")
	}
}

// TestMessageAPIReplies: each request gets the Go API's answer as a
// message, errors with the Go API's kinds.
func TestMessageAPIReplies(t *testing.T) {
	host := hostSystem(t)
	rt := hostRuntime(t, host, supervisor.Config{Shards: 2}, echo("a", nil), echo("b", nil))
	if err := rt.RegisterGroups(svc.Group{Name: "ab", Nodes: []svc.GroupNode{{Name: "a", Agent: "a"}, {Name: "b", Agent: "b"},
		{Name: "c", Agent: "a"}},
		Edges: []svc.GroupEdge{{From: "a", To: "b"}, {From: "a", To: "c"}}}); err != nil {
		t.Fatal(err)
	}
	tasks := make([]svc.TaskSpec, 20)
	for i := range tasks {
		tasks[i] = svc.TaskSpec{Input: json.RawMessage(fmt.Sprint(i))}
	}
	g, ok := request(t, host, rt.PID(), &msg.Gather{Ref: "g", Agent: "a", Tasks: tasks, MaxConcurrency: 4}).(*msg.GatherResult)
	if !ok || g.Ref != "g" || len(g.Results) != len(tasks) {
		t.Fatalf("gather reply = %#v", g)
	}
	for i, r := range g.Results {
		if string(r.Output) != fmt.Sprint(i) {
			t.Fatalf("result %d = %s: not in task order", i, r.Output)
		}
	}
	gr, ok := request(t, host, rt.PID(), &msg.RunGroup{Ref: "grp", Group: "ab", Task: svc.TaskSpec{Input: json.RawMessage(`"x"`)}}).(*msg.GroupResult)
	if !ok || gr.Result.Group == nil || !gr.Result.Group.Success || string(gr.Result.Group.Outputs["b"].Output) != `"x"` {
		t.Fatalf("group reply = %#v", gr)
	}
	for _, c := range []struct {
		req  any
		kind svc.Kind
		is   error
	}{
		{&msg.RunAgent{Ref: "e1", Agent: "nope"}, svc.KindRegistry, svc.ErrRegistry},
		{&msg.Gather{Ref: "e2", Agent: "a", Tasks: tasks, MaxConcurrency: 0}, svc.KindSpecValidation, svc.ErrSpecValidation},
		{&msg.RunGroup{Ref: "e3", Group: "nope"}, svc.KindRegistry, svc.ErrRegistry},
		{&msg.Submit{Ref: "e4", Request: svc.SubmitRequest{Target: "nope"}}, svc.KindRegistry, svc.ErrRegistry},
		{&msg.Cancel{Ref: "e5", RunID: "nope"}, svc.KindRegistry, svc.ErrRegistry},
	} {
		e, ok := request(t, host, rt.PID(), c.req).(*msg.Error)
		if !ok || e.Kind != c.kind || !errors.Is(e, c.is) || e.Ref == "" {
			t.Errorf("%T: reply %#v, want an *msg.Error of kind %s", c.req, e, c.kind)
		}
	}
}

// TestMessageAPIOwnerStops: the runs of a host actor that stops are
// cancelled, those it started Detached go on; and a host supervisor's
// decisions reach only the host's actors.
func TestMessageAPIOwnerStops(t *testing.T) {
	host := hostSystem(t)
	rt := hostRuntime(t, host, supervisor.Config{Shards: 2}, echo("slow", map[string]any{"latency_ms": 60_000}),
		echo("brief", map[string]any{"latency_ms": 300}))
	api := rt.PID()
	ids := make(chan string, 2)
	children := make(chan *actor.PID, 1)
	// The host's supervisor stops a child that panics.
	host.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actor.Started); ok {
			children <- c.Spawn(actor.PropsFromFunc(func(c actor.Context) {
				switch m := c.Message().(type) {
				case *actor.Started:
					c.Request(api, &msg.RunAgent{Ref: "run", Agent: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}})
					c.Request(api, &msg.Gather{Ref: "gather", Agent: "slow", Tasks: []svc.TaskSpec{{Input: json.RawMessage(`1`)}}, MaxConcurrency: 1})
					c.Request(api, &msg.Submit{Ref: "sub", Request: svc.SubmitRequest{Target: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}}})
					c.Request(api, &msg.Submit{Ref: "kept", Detached: true, Request: svc.SubmitRequest{Target: "brief", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}}})
				case *msg.Submitted:
					ids <- m.Ref + "=" + m.RunID
				case string:
					panic("host child: " + m)
				}
			}))
		}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(0, time.Second, func(any) actor.Directive { return actor.StopDirective }))))
	child := <-children
	runs := map[string]string{}
	for range 2 {
		ref, id, _ := strings.Cut(<-ids, "=")
		runs[ref] = id
	}
	testutil.Eventually(t, "four calls in flight", func() bool { return rt.InFlight() >= 4 })
	host.Root.Send(child, "boom") // the child panics; its supervisor stops it
	testutil.Eventually(t, "the stopped actor's runs cancelled, the detached one completed", func() bool {
		st, err := rt.RunStatus(context.Background(), runs["sub"])
		kept, err2 := rt.RunStatus(context.Background(), runs["kept"])
		return err == nil && err2 == nil && st.State == svc.RunCancelled && kept.State == svc.RunCompleted && rt.InFlight() == 0
	})
	// svc's actor answers as before: the host's supervisor did nothing to it.
	if _, ok := request(t, host, api, &msg.RunAgent{Agent: "brief", Task: svc.TaskSpec{Input: json.RawMessage(`2`)}}).(*msg.AgentResult); !ok {
		t.Fatal("the runtime stopped answering after the host's supervisor acted")
	}
}

// TestMessageAPICancelByRef: a sender cancels its own run by Ref.
func TestMessageAPICancelByRef(t *testing.T) {
	host := hostSystem(t)
	rt := hostRuntime(t, host, supervisor.Config{Shards: 1}, echo("slow", map[string]any{"latency_ms": 60_000}))
	pid, ch := probe(host)
	host.Root.RequestWithCustomSender(rt.PID(), &msg.RunAgent{Ref: "s", Agent: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}}, pid)
	testutil.Eventually(t, "the run in flight", func() bool { return rt.InFlight() == 1 })
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Cancel{Ref: "s"}, pid)
	// Cancelled comes first, then the cancelled run's reply (the gateway
	// answers before it cancels anything).
	var got []any
	deadline := time.After(20 * time.Second)
	for len(got) < 2 {
		select {
		case m := <-ch:
			got = append(got, m)
		case <-deadline:
			t.Fatalf("within 20 s, only %#v", got)
		}
	}
	if c, ok := got[0].(*msg.Cancelled); !ok || c.Ref != "s" {
		t.Fatalf("first answer after Cancel = %#v, want Cancelled", got[0])
	}
	if e, ok := got[1].(*msg.Error); !ok || e.Ref != "s" || !errors.Is(e, svc.ErrCancelled) {
		t.Fatalf("the cancelled run's reply = %#v, want a CancelledError", got[1])
	}
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Cancel{Ref: "s"}, pid)
	if e := next[*msg.Error](t, ch); e.Kind != svc.KindRegistry {
		t.Fatalf("cancel of a finished run = %#v", e)
	}
}

// TestMessageAPISubmitWatch: Submit's reply names the run's actor; a
// host actor that watches it gets Terminated once the run has ended,
// and a Cancel sent to it cancels the run.
func TestMessageAPISubmitWatch(t *testing.T) {
	host := hostSystem(t)
	rt := hostRuntime(t, host, supervisor.Config{Shards: 1}, echo("slow", map[string]any{"latency_ms": 60_000}), echo("echo", nil))
	watcher, ch := probe(host)
	for _, c := range []struct{ agent, want string }{{"echo", "completed"}, {"slow", "cancelled"}} {
		s, ok := request(t, host, rt.PID(), &msg.Submit{Ref: c.agent, Request: svc.SubmitRequest{Target: c.agent, Task: svc.TaskSpec{Input: json.RawMessage(`1`)}}}).(*msg.Submitted)
		if !ok || s.RunID == "" || s.Run == nil {
			t.Fatalf("submit reply = %#v", s)
		}
		w := host.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			switch m := ctx.Message().(type) {
			case *actor.Started:
				ctx.Watch(s.Run)
			case *actor.Terminated:
				ctx.Send(watcher, m)
			}
		}))
		if c.agent == "slow" {
			testutil.Eventually(t, "running", func() bool {
				st, _ := rt.RunStatus(context.Background(), s.RunID)
				return st.State == svc.RunRunning
			})
			if _, ok := request(t, host, s.Run, &msg.Cancel{Ref: "c"}).(*msg.Cancelled); !ok {
				t.Fatal("cancel through the run's actor failed")
			}
		}
		term := next[*actor.Terminated](t, ch)
		if term.Who.Id != s.Run.Id {
			t.Fatalf("terminated %s, want %s", term.Who.Id, s.Run.Id)
		}
		st, err := rt.RunStatus(context.Background(), s.RunID)
		if err != nil || string(st.State) != c.want {
			t.Fatalf("%s: state %s %v when its actor stopped, want %s", c.agent, st.State, err, c.want)
		}
		host.Root.Stop(w)
	}
}

// TestMessageAPISubscribe: runtime events and a submitted run's events
// reach the host's actor; Unsubscribe ends the subscription.
func TestMessageAPISubscribe(t *testing.T) {
	host := hostSystem(t)
	rt := hostRuntime(t, host, supervisor.Config{Shards: 1}, echo("echo", nil))
	pid, ch := probe(host)
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Subscribe{Ref: "all", Filter: svc.EventFilter{EventTypes: []svc.EventType{svc.EventAgentCompleted}}}, pid)
	sub := next[*msg.Subscribed](t, ch)
	if _, ok := request(t, host, rt.PID(), &msg.RunAgent{Agent: "echo", Task: svc.TaskSpec{ID: "t1", Input: json.RawMessage(`1`)}}).(*msg.AgentResult); !ok {
		t.Fatal("run failed")
	}
	ev := next[*msg.RuntimeEvent](t, ch)
	if ev.Subscription != sub.ID || ev.Event.EventType != svc.EventAgentCompleted || ev.Event.TaskID != "t1" || ev.Dropped != 0 {
		t.Fatalf("event = %+v", ev)
	}
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Unsubscribe{Ref: "u", ID: sub.ID}, pid)
	// Unsubscribed comes first, then SubscriptionEnded (the API's actor
	// answers before it ends the subscription).
	var got []any
	for len(got) < 2 {
		if m := next[any](t, ch); m != nil {
			if _, ev := m.(*msg.RuntimeEvent); !ev {
				got = append(got, m)
			}
		}
	}
	if u, ok := got[0].(*msg.Unsubscribed); !ok || u.ID != sub.ID {
		t.Fatalf("first answer after Unsubscribe = %#v, want Unsubscribed", got[0])
	}
	if e, ok := got[1].(*msg.SubscriptionEnded); !ok || e.ID != sub.ID {
		t.Fatalf("then %#v, want SubscriptionEnded", got[1])
	}

	s := request(t, host, rt.PID(), &msg.Submit{Request: svc.SubmitRequest{Target: "echo", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}}}).(*msg.Submitted)
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Subscribe{Ref: "run", RunID: s.RunID}, pid)
	sub = next[*msg.Subscribed](t, ch)
	var types []svc.RunEventType
	for {
		select {
		case m := <-ch:
			switch m := m.(type) {
			case *msg.RunEvent:
				if m.Subscription != sub.ID || m.Event.RunID != s.RunID {
					t.Fatalf("run event %+v, want subscription %s of run %s", m, sub.ID, s.RunID)
				}
				types = append(types, m.Event.Type)
				continue
			case *msg.SubscriptionEnded:
				if len(types) != 2 || types[0] != svc.RunAgentStarted || types[1] != svc.RunAgentCompleted {
					t.Fatalf("run events %v", types)
				}
				return
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("run events %v, and no end", types)
		}
	}
}

// TestMessageAPISubscribeDrops: a burst larger than the queue: every
// event either reaches the host's actor or is counted as dropped.
func TestMessageAPISubscribeDrops(t *testing.T) {
	host := hostSystem(t)
	live, err := sse.New(host, sse.Config{QueueSize: 4, Prefix: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	rt := hostRuntime(t, host, supervisor.Config{Shards: 1, Events: live, Emitter: live})
	pid, ch := probe(host)
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Subscribe{}, pid)
	sub := next[*msg.Subscribed](t, ch)
	const n = 20_000
	for i := range n {
		live.Emit(svc.RuntimeEvent{EventType: svc.EventAgentSpawned, TaskID: fmt.Sprint(i)})
	}
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Unsubscribe{ID: sub.ID}, pid)
	got := 0
	var last uint64
	for {
		switch m := (<-ch).(type) {
		case *msg.RuntimeEvent:
			got++
			if m.Dropped < last {
				t.Fatalf("Dropped went down: %d after %d", m.Dropped, last)
			}
			last = m.Dropped
		case *msg.SubscriptionEnded:
			if got == 0 || m.Dropped == 0 || uint64(got)+m.Dropped > n {
				t.Fatalf("%d delivered, %d dropped, of %d", got, m.Dropped, n)
			}
			// Events still queued when Unsubscribe arrived are neither.
			return
		}
	}
}

// TestMessageAPIFutureEnds: a run asked for by a future is cancelled
// when the future times out (nobody waits for its reply any more),
// unless Detached; and what ties it to its future is gone afterwards.
func TestMessageAPIFutureEnds(t *testing.T) {
	host := hostSystem(t)
	rec := &emittertest.Recorder{}
	rt := hostRuntime(t, host, supervisor.Config{Shards: 1, Emitter: rec}, echo("slow", map[string]any{"latency_ms": 60_000}),
		echo("brief", map[string]any{"latency_ms": 1500}))
	_, err := host.Root.RequestFuture(rt.PID(), &msg.RunAgent{Agent: "slow", Task: svc.TaskSpec{ID: "gone", Input: json.RawMessage(`1`)}}, 200*time.Millisecond).Result()
	if !errors.Is(err, actor.ErrTimeout) {
		t.Fatalf("future: %v, want a timeout", err)
	}
	testutil.Eventually(t, "the timed-out future's run cancelled", func() bool { return rt.InFlight() == 0 })
	if n := len(rec.OfType(svc.EventAgentCompleted)); n != 0 {
		t.Fatalf("%d runs completed, want the slow one cancelled", n)
	}
	_, err = host.Root.RequestFuture(rt.PID(), &msg.RunAgent{Detached: true, Agent: "brief", Task: svc.TaskSpec{ID: "kept", Input: json.RawMessage(`1`)}}, 100*time.Millisecond).Result()
	if !errors.Is(err, actor.ErrTimeout) {
		t.Fatalf("detached future: %v, want a timeout", err)
	}
	done := rec.WaitFor(t, svc.EventAgentCompleted, 1, 20*time.Second)
	if done[0].TaskID != "kept" {
		t.Fatalf("completed %q, want the detached run", done[0].TaskID)
	}
	// A future answered in time: its run completes, and nothing of the
	// future is left registered.
	if r, ok := request(t, host, rt.PID(), &msg.RunAgent{Agent: "brief", Task: svc.TaskSpec{ID: "answered", Input: json.RawMessage(`2`)}}).(*msg.AgentResult); !ok || !r.Result.Success {
		t.Fatalf("reply %#v", r)
	}
	testutil.Eventually(t, "no future watch left", func() bool {
		for _, id := range localIDs(host) {
			if strings.Contains(id, "future") {
				return false
			}
		}
		return true
	})
}

// TestMessageAPICancelByRefOnly: a sender's calls share a context per
// Ref: Cancel by Ref cancels that Ref's calls only, a later call with
// the same Ref is not born cancelled, and the sender's end cancels the
// rest.
func TestMessageAPICancelByRefOnly(t *testing.T) {
	host := hostSystem(t)
	rt := hostRuntime(t, host, supervisor.Config{Shards: 2}, echo("slow", map[string]any{"latency_ms": 60_000}),
		echo("brief", map[string]any{"latency_ms": 50}))
	pid, ch := probe(host)
	send := func(m any) { host.Root.RequestWithCustomSender(rt.PID(), m, pid) }
	slow := func(ref string) *msg.RunAgent {
		return &msg.RunAgent{Ref: ref, Agent: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}}
	}
	send(slow("a"))
	send(slow("a"))
	send(slow("b"))
	send(slow(""))
	testutil.Eventually(t, "four runs in flight", func() bool { return rt.InFlight() == 4 })
	// A call with the Ref right behind the Cancel, while the cancelled
	// calls are still ending: it gets a new context.
	send(&msg.Cancel{Ref: "a"})
	send(&msg.RunAgent{Ref: "a", Agent: "brief", Task: svc.TaskSpec{Input: json.RawMessage(`"again"`)}})
	var cancelled, failed, succeeded int
	for cancelled+failed+succeeded < 4 {
		select {
		case m := <-ch:
			switch m := m.(type) {
			case *msg.Cancelled:
				cancelled++
			case *msg.Error:
				if m.Ref != "a" || !errors.Is(m, svc.ErrCancelled) {
					t.Fatalf("reply = %#v, want run a cancelled", m)
				}
				failed++
			case *msg.AgentResult:
				if m.Ref != "a" || !m.Result.Success {
					t.Fatalf("the run after the Cancel: %+v", m)
				}
				succeeded++
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%d cancelled, %d failed, %d succeeded", cancelled, failed, succeeded)
		}
	}
	if cancelled != 1 || failed != 2 || succeeded != 1 {
		t.Fatalf("%d Cancelled, %d runs cancelled, %d succeeded; want 1, 2, 1", cancelled, failed, succeeded)
	}
	if rt.InFlight() != 2 {
		t.Fatalf("%d in flight, want b and the run without a Ref", rt.InFlight())
	}
	host.Root.Stop(pid)
	testutil.Eventually(t, "the stopped sender's runs cancelled", func() bool { return rt.InFlight() == 0 })
}
