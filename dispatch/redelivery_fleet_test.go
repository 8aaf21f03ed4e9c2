package dispatch_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/dispatch"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/testutil"
)

// TestRedeliveryCountedAndLogged: a worker takes two tasks and dies with
// them (it never settles them); after the ack wait the broker gives them
// to a live worker. The publisher counts both redeliveries
// (Redeliveries, GET /runtime/stats' redeliveries) and logs them once,
// naming the worker that went silent and the ack wait.
func TestRedeliveryCountedAndLogged(t *testing.T) {
	const ackWait = 300 * time.Millisecond
	b := membroker.New()
	t.Cleanup(func() { _ = b.Close() })
	echo := svc.Agent{Name: "echo", Model: "test:echo"}
	core, logs := observer.New(zap.WarnLevel)
	rt, p := publisherRuntime(t, dispatch.Config{Broker: b, Logger: zap.New(core), AckWait: ackWait}, echo)

	// The doomed worker announces itself as a worker does, then takes
	// tasks and never settles them.
	hb, err := json.Marshal(svc.RuntimeEvent{EventType: svc.EventWorkerHeartbeat, Timestamp: time.Now().UTC(),
		Payload: svc.Payload{"runtime_id": "doomed", "agent_subscriptions": []string{"echo"}, "in_flight": 0}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Broadcast(context.Background(), fleetwire.SubjectWorkers, hb); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the doomed worker known", func() bool { _, ok := workerOf(t, p, "doomed"); return ok })
	subject := fleetwire.TaskSubject("echo")
	var taken atomic.Int64
	dead, err := b.Subscribe(context.Background(), subject, svc.SubscribeOptions{Group: svc.DefaultGroup(subject),
		Prefetch: 2, AckWait: ackWait, MaxDeliver: -1}, func(context.Context, *svc.Delivery) { taken.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]svc.AgentResult, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			results[i], _ = rt.Run(ctx, "echo", svc.TaskSpec{Input: json.RawMessage(`"x"`)})
		}()
	}
	testutil.Eventually(t, "both tasks taken by the doomed worker", func() bool { return taken.Load() == 2 })
	_ = dead.Stop()
	if n := p.Redeliveries(); n != 0 {
		t.Fatalf("%d redeliveries before any", n)
	}
	fleetWorker(t, b, "survivor", echo)
	wg.Wait()
	for i, res := range results {
		if !res.Success {
			t.Fatalf("task %d: %+v", i, res)
		}
	}
	if n := p.Redeliveries(); n != 2 {
		t.Errorf("Redeliveries = %d, want 2", n)
	}
	lines := logs.FilterMessageSnippet("tasks redelivered").All()
	if len(lines) != 1 {
		t.Fatalf("%d redelivery log lines for one batch, want 1: %+v", len(lines), logs.All())
	}
	f := lines[0].ContextMap()
	lost, _ := f["lost_by"].([]any)
	if f["ran_on"] != "survivor" || len(lost) != 1 || !strings.HasPrefix(lost[0].(string), "doomed (no heartbeat for ") ||
		f["ack_wait"] != ackWait || f["delivery"] != int64(2) {
		t.Errorf("redelivery log %v", f)
	}
}
