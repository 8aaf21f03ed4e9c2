package hostapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors/msg"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/supervisor"
)

// replyKind is what a reply says, as a kind: the *msg.Error's Kind, a
// failed result's error type, or "ok".
func replyKind(reply any) string {
	switch r := reply.(type) {
	case *msg.Error:
		return string(r.Kind)
	case *msg.AgentResult:
		if !r.Result.Success && r.Result.Error != nil {
			return "result:" + r.Result.Error.Type
		}
		return "ok"
	case *msg.GatherResult:
		for _, x := range r.Results {
			if !x.Success && x.Error != nil {
				return "result:" + x.Error.Type
			}
		}
		return "ok"
	case *msg.GroupResult:
		return runResultKind(nil, r.Result)
	case *msg.Submitted:
		return "ok"
	}
	return fmt.Sprintf("%T", reply)
}

// runResultKind is the kind of a group run's answer: its error's, or
// its first failed result's.
func runResultKind(err error, r svc.RunResult) string {
	if r.Agent != nil {
		return goKind(err, *r.Agent)
	}
	if r.Group != nil {
		for _, x := range r.Group.Outputs {
			if k := goKind(nil, x); k != "ok" {
				return k
			}
		}
	}
	return goKind(err)
}

// goKind is the same for the Go API's answer.
func goKind(err error, results ...svc.AgentResult) string {
	if err != nil {
		return string(svc.KindOf(err))
	}
	for _, x := range results {
		if !x.Success && x.Error != nil {
			return "result:" + x.Error.Type
		}
	}
	return "ok"
}

// TestMessageAPIKindsMatchGoAPI: the same refused or failed request
// through the message API and through the Go API gives the same kind.
func TestMessageAPIKindsMatchGoAPI(t *testing.T) {
	host := hostSystem(t)
	rt := hostRuntime(t, host, supervisor.Config{Shards: 1},
		echo("echo", nil), echo("bad", map[string]any{"fail_on": "bad"}))
	if err := rt.RegisterGroups(svc.Group{Name: "g", Nodes: []svc.GroupNode{{Name: "a", Agent: "bad"}}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := func(s string) svc.TaskSpec { return svc.TaskSpec{Input: json.RawMessage(s)} }
	budget := in(`"a long enough input to cost more than one token"`)
	budget.TokenBudget = 1
	negative := in(`1`)
	negative.TokenBudget = -1
	cases := []struct {
		name  string
		req   any
		goAPI func() string
	}{
		{"unknown agent", &msg.RunAgent{Agent: "nope", Task: in(`1`)}, func() string { _, err := rt.Run(ctx, "nope", in(`1`)); return goKind(err) }},
		{"negative budget", &msg.RunAgent{Agent: "echo", Task: negative}, func() string { _, err := rt.Run(ctx, "echo", negative); return goKind(err) }},
		{"run over its budget", &msg.RunAgent{Agent: "echo", Task: budget}, func() string { r, err := rt.Run(ctx, "echo", budget); return goKind(err, r) }},
		{"failing model", &msg.RunAgent{Agent: "bad", Task: in(`"bad"`)}, func() string { r, err := rt.Run(ctx, "bad", in(`"bad"`)); return goKind(err, r) }},
		{"gather concurrency 0", &msg.Gather{Agent: "echo", Tasks: []svc.TaskSpec{in(`1`)}}, func() string {
			r, err := rt.Gather(ctx, "echo", []svc.TaskSpec{in(`1`)}, 0)
			return goKind(err, r...)
		}},
		{"gather a failing task", &msg.Gather{Agent: "bad", Tasks: []svc.TaskSpec{in(`1`), in(`"bad"`)}, MaxConcurrency: 2}, func() string {
			r, err := rt.Gather(ctx, "bad", []svc.TaskSpec{in(`1`), in(`"bad"`)}, 2)
			return goKind(err, r...)
		}},
		{"unknown group", &msg.RunGroup{Group: "nope", Task: in(`1`)}, func() string { _, err := rt.RunGroup(ctx, "nope", in(`1`)); return goKind(err) }},
		{"failing group", &msg.RunGroup{Group: "g", Task: in(`"bad"`)}, func() string {
			r, err := rt.RunGroup(ctx, "g", in(`"bad"`))
			return runResultKind(err, r)
		}},
		{"submit unknown target", &msg.Submit{Request: svc.SubmitRequest{Target: "nope", Task: in(`1`)}}, func() string {
			_, err := rt.Submit(ctx, svc.SubmitRequest{Target: "nope", Task: in(`1`)})
			return goKind(err)
		}},
		{"cancel unknown run", &msg.Cancel{RunID: "nope"}, func() string { return goKind(rt.CancelRun(ctx, "nope")) }},
	}
	for _, c := range cases {
		got, want := replyKind(request(t, host, rt.PID(), c.req)), c.goAPI()
		t.Logf("%s: %s", c.name, got)
		if got != want {
			t.Errorf("%s: the message API says %s, the Go API %s", c.name, got, want)
		}
		if want == "ok" {
			t.Errorf("%s: the Go API accepted it; the case tests nothing", c.name)
		}
	}
}

// TestMessageAPICancelByRunID: Cancel with a submitted run's id (from any
// sender) cancels it, and again is still Cancelled (idempotent), as
// CancelRun.
func TestMessageAPICancelByRunID(t *testing.T) {
	host := hostSystem(t)
	rt := hostRuntime(t, host, supervisor.Config{Shards: 1}, echo("slow", map[string]any{"latency_ms": 60_000}))
	id, err := rt.Submit(context.Background(), svc.SubmitRequest{Target: "slow", Task: svc.TaskSpec{Input: json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "running", func() bool { st, _ := rt.RunStatus(context.Background(), id); return st.State == svc.RunRunning })
	for range 2 {
		c, ok := request(t, host, rt.PID(), &msg.Cancel{Ref: "c", RunID: id}).(*msg.Cancelled)
		if !ok || c.Ref != "c" || c.RunID != id {
			t.Fatalf("cancel reply %#v", c)
		}
	}
	testutil.Eventually(t, "cancelled", func() bool { st, _ := rt.RunStatus(context.Background(), id); return st.State == svc.RunCancelled })
}

// failures is a host supervisor strategy that restarts every failed
// child and records which children it decided for.
type failures struct{ children chan string }

func (f *failures) HandleFailure(system *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason any, message any) {
	f.children <- child.Id
	sup.RestartChildren(child)
}

// TestMessageAPIHostRestarts: a host supervisor that restarts its
// crashing child decides for that child only, never for one of svc's
// actors; the child's runs are neither restarted nor cancelled by its
// restarts (its PID lives on), and their replies reach it after them.
func TestMessageAPIHostRestarts(t *testing.T) {
	host := hostSystem(t)
	rt := hostRuntime(t, host, supervisor.Config{Shards: 2}, echo("brief", map[string]any{"latency_ms": 1500}))
	api := rt.PID()
	strategy := &failures{children: make(chan string, 100)}
	replies := make(chan *msg.AgentResult, 10)
	children := make(chan *actor.PID, 1)
	var starts atomic.Int64
	host.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actor.Started); ok {
			children <- c.Spawn(actor.PropsFromFunc(func(c actor.Context) {
				switch m := c.Message().(type) {
				case *actor.Started:
					if starts.Add(1) == 1 { // not again after a restart
						for i := range 3 {
							c.Request(api, &msg.RunAgent{Ref: fmt.Sprint(i), Agent: "brief", Task: svc.TaskSpec{ID: fmt.Sprint(i), Input: json.RawMessage(fmt.Sprint(i))}})
						}
					}
				case *msg.AgentResult:
					replies <- m
				case string:
					panic("host child: " + m)
				}
			}))
		}
	}, actor.WithSupervisor(strategy)))
	child := <-children
	testutil.Eventually(t, "three runs in flight", func() bool { return rt.InFlight() == 3 })
	for range 3 {
		host.Root.Send(child, "boom")
	}
	for range 3 {
		select {
		case id := <-strategy.children:
			if id != child.Id {
				t.Errorf("the host's supervisor decided for %s, not its child %s", id, child.Id)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the host's supervisor was not asked")
		}
	}
	seen := map[string]bool{}
	for range 3 {
		select {
		case r := <-replies:
			if !r.Result.Success || string(r.Result.Output) != r.Ref || r.Result.Metadata.Attempts != 1 {
				t.Errorf("reply after the restarts: %+v", r)
			}
			seen[r.Ref] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("replies %v: the restarted actor's runs did not all answer", seen)
		}
	}
	if starts.Load() != 4 {
		t.Errorf("the child started %d times, want 1 and 3 restarts", starts.Load())
	}
	select {
	case id := <-strategy.children:
		t.Errorf("the host's supervisor was asked about %s as well", id)
	default:
	}
}

// TestMessageAPISubscribeTarget: a subscription for another actor: the
// sender gets Subscribed, the Target the events; when the Target stops
// the subscription ends (the runtime holds nothing for it); a future as
// the target is refused.
func TestMessageAPISubscribeTarget(t *testing.T) {
	host := hostSystem(t)
	rt := hostRuntime(t, host, supervisor.Config{Shards: 1}, echo("echo", nil))
	sender, fromAPI := probe(host)
	target, events := probe(host)
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Subscribe{Ref: "s", Target: target,
		Filter: svc.EventFilter{EventTypes: []svc.EventType{svc.EventAgentCompleted}}}, sender)
	sub := next[*msg.Subscribed](t, fromAPI)
	if sub.Ref != "s" || sub.ID == "" {
		t.Fatalf("subscribed = %+v", sub)
	}
	if _, ok := request(t, host, rt.PID(), &msg.RunAgent{Agent: "echo", Task: svc.TaskSpec{ID: "t", Input: json.RawMessage(`1`)}}).(*msg.AgentResult); !ok {
		t.Fatal("run failed")
	}
	if ev := next[*msg.RuntimeEvent](t, events); ev.Subscription != sub.ID || ev.Event.TaskID != "t" {
		t.Fatalf("event at the target = %+v", ev)
	}
	select {
	case m := <-fromAPI:
		t.Fatalf("the sender got %T, want nothing more", m)
	default:
	}
	// The target stops: its subscription ends, and with it the SSE
	// subscriber actor that fed it.
	subscribers := func() int {
		n := 0
		for _, id := range localIDs(host) {
			if strings.HasPrefix(id, "svc/subscribers/") {
				n++
			}
		}
		return n
	}
	if subscribers() != 1 {
		t.Fatalf("%d SSE subscriber actors under svc/, want the subscription's one: %v", subscribers(), localIDs(host))
	}
	_ = host.Root.StopFuture(target).Wait()
	testutil.Eventually(t, "the stopped target's subscription ended", func() bool { return subscribers() == 0 })
	if e, ok := request(t, host, rt.PID(), &msg.Unsubscribe{Ref: "u", ID: sub.ID}).(*msg.Error); !ok || e.Kind != svc.KindRegistry {
		t.Fatalf("unsubscribe after the target stopped = %#v, want no such subscription", e)
	}
	if e, ok := request(t, host, rt.PID(), &msg.Subscribe{Ref: "f"}).(*msg.Error); !ok || e.Kind != svc.KindSpecValidation {
		t.Fatalf("subscribe from a future = %#v, want a SpecValidationError", e)
	}
}
