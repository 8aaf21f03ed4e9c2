package hostapi_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors/msg"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/supervisor"
)

// TestMessageAPISubscribeStalledTarget: a target actor that stops reading
// is handed at most its window of events (the rest wait in the
// subscription's bounded queue, as for a stalled SSE client), the rest
// are dropped and counted, and runs are not held up by it. Once it reads
// again (acknowledging with AckEvents), events flow again.
func TestMessageAPISubscribeStalledTarget(t *testing.T) {
	host := hostSystem(t)
	const queue = 8
	live, err := sse.New(host, sse.Config{QueueSize: queue, Prefix: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	rt := hostRuntime(t, host, supervisor.Config{Shards: 1, Events: live, Emitter: live}, echo("echo", nil))
	gate := make(chan struct{})
	var got atomic.Int64
	ended := make(chan *msg.SubscriptionEnded, 1)
	target := host.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *msg.RuntimeEvent:
			<-gate // stalled until the test lets it go
			got.Add(1)
		case *msg.SubscriptionEnded:
			ended <- m
		}
	}, actor.WithReceiverMiddleware(msg.AckEvents)))
	pid, ch := probe(host)
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Subscribe{Target: target, Window: queue}, pid)
	sub := next[*msg.Subscribed](t, ch)
	// Paced: a few events at a time, as a busy runtime emits them, not
	// one burst that overflows the emitter by itself.
	const n = 2_000
	for i := range n {
		live.Emit(svc.RuntimeEvent{EventType: svc.EventAgentSpawned, TaskID: fmt.Sprint(i)})
		if i%(queue/2) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	// Runs go on while the target is stalled.
	for i := range 20 {
		if _, ok := request(t, host, rt.PID(), &msg.RunAgent{Agent: "echo", Task: svc.TaskSpec{Input: json.RawMessage(fmt.Sprint(i))}}).(*msg.AgentResult); !ok {
			t.Fatalf("run %d while the target is stalled failed", i)
		}
	}
	time.Sleep(500 * time.Millisecond) // let the forwarder do what it would
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Unsubscribe{ID: sub.ID}, pid)
	next[*msg.Unsubscribed](t, ch)
	close(gate)
	var end *msg.SubscriptionEnded
	select {
	case end = <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("no SubscriptionEnded")
	}
	delivered := got.Load()
	t.Logf("%d delivered, %d dropped, of %d emitted (+ the runs' events)", delivered, end.Dropped, n)
	// The stalled target's share: its window, and when the subscription
	// ended, what its queue and the emitter's held (one more queue each).
	if limit := int64(4*queue + 1); delivered > limit {
		t.Errorf("a stalled target was handed %d events, want at most %d: the subscription is not bounded", delivered, limit)
	}
	if end.Dropped == 0 {
		t.Errorf("nothing counted dropped")
	}
}

// TestMessageAPISubscribeWindow: a target that acknowledges (AckEvents)
// gets every event however many more than its window; one that never
// acknowledges gets its window's worth and no more while the
// subscription lasts.
func TestMessageAPISubscribeWindow(t *testing.T) {
	host := hostSystem(t)
	live, err := sse.New(host, sse.Config{QueueSize: 64, Prefix: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	rt := hostRuntime(t, host, supervisor.Config{Shards: 1, Events: live, Emitter: live})
	const window, n = 4, 200
	var acking, silent atomic.Int64
	spawn := func(count *atomic.Int64, opts ...actor.PropsOption) *actor.PID {
		return host.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
			if _, ok := c.Message().(*msg.RuntimeEvent); ok {
				count.Add(1)
			}
		}, opts...))
	}
	a := spawn(&acking, actor.WithReceiverMiddleware(msg.AckEvents))
	s := spawn(&silent)
	pid, ch := probe(host)
	for _, target := range []*actor.PID{a, s} {
		host.Root.RequestWithCustomSender(rt.PID(), &msg.Subscribe{Target: target, Window: window}, pid)
		next[*msg.Subscribed](t, ch)
	}
	for i := range n {
		live.Emit(svc.RuntimeEvent{EventType: svc.EventAgentSpawned, TaskID: fmt.Sprint(i)})
		if i%8 == 0 {
			time.Sleep(time.Millisecond) // paced: the queues never overflow
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for acking.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := acking.Load(); got != n {
		t.Errorf("the acknowledging target got %d of %d events through a window of %d", got, n, window)
	}
	if got := silent.Load(); got != window {
		t.Errorf("the target that never acknowledges got %d events, want its window, %d", got, window)
	}
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Subscribe{Window: -1}, pid)
	if e := next[*msg.Error](t, ch); e.Kind != svc.KindSpecValidation {
		t.Errorf("Subscribe with Window -1 = %#v, want a SpecValidationError", e)
	}
}
