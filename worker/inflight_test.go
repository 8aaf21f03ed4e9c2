package worker_test

import (
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/worker"
)

// TestHeartbeatFollowsInFlight: with its periodic heartbeat an hour away,
// a worker still sends a worker_heartbeat when a task starts (in_flight
// 1) and when it ends (in_flight 0), so a fleet view's in-flight counts
// move during a gather instead of waiting for the next period.
func TestHeartbeatFollowsInFlight(t *testing.T) {
	b := newBroker(t)
	rec := &recorder{}
	startWorker(t, worker.Config{Broker: b, Runner: newRuntime(t), Heartbeat: 3600e9, Emitter: rec})
	in := newInbox(t, b, "pub")
	inFlight := func(n int) func() bool {
		return func() bool {
			for _, ev := range rec.of(svc.EventWorkerHeartbeat) {
				if ev.Payload["in_flight"] == n {
					return true
				}
			}
			return false
		}
	}
	publishTask(t, b, fleetwire.Envelope{TaskID: "t", RunID: "r", TraceID: "x", Agent: "nap", ReplyTo: in.subject})
	testutil.Eventually(t, "a heartbeat with the task in flight", inFlight(1))
	if r := in.next(t).Result; !r.Success {
		t.Fatalf("result %+v", r)
	}
	testutil.Eventually(t, "a heartbeat with nothing in flight", inFlight(0))
}
