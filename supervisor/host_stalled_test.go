package supervisor_test

import (
	"encoding/json"
	"fmt"
	"os"
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
// holds at most a bounded number of events (the subscription's queue, as
// for a stalled SSE client), the rest are dropped and counted, and runs
// are not held up by it.
//
// It fails today: the subscription's goroutine drains the bounded SSE
// queue into the target's mailbox with Send, and a protoactor mailbox has
// no bound, so a stalled target is handed every event and none is
// dropped (issue 18 part 2). Set SVC_AUDIT_GAPS=1 to run it.
func TestMessageAPISubscribeStalledTarget(t *testing.T) {
	if os.Getenv("SVC_AUDIT_GAPS") != "1" {
		t.Skip("known gap (issue 18 part 2): a stalled subscriber actor's mailbox is unbounded; SVC_AUDIT_GAPS=1 runs it")
	}
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
	}))
	pid, ch := probe(host)
	host.Root.RequestWithCustomSender(rt.PID(), &msg.Subscribe{Target: target}, pid)
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
	// The stalled target's share: its subscription queue, what is in
	// transit in the emitter (one more queue), and one in its hand.
	if limit := int64(4*queue + 1); delivered > limit {
		t.Errorf("a stalled target was handed %d events, want at most %d: the subscription is not bounded", delivered, limit)
	}
	if end.Dropped == 0 {
		t.Errorf("nothing counted dropped")
	}
}
