package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/bridge"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/testutil"
)

func delta(span, parent string, i int) svc.RuntimeEvent {
	e := ev(svc.EventAgentDelta, span, parent, "writer")
	e.Payload = svc.Payload{"text": "x", "index": i}
	return e
}

// TestRelayDeltas: a task's delta relay sends each delta to the
// publisher that listens, tagged with the dispatch and placed in the run
// tree, whether or not that task's events are relayed; while it is open
// the task's agent_delta events do not also go out through Emit (the
// publisher would get them twice), its other events do; once done, Emit
// relays the task's deltas again (an agent with stream: true whose
// publisher asked only for events).
func TestRelayDeltas(t *testing.T) {
	b := memBroker(t)
	events, listener := subscribe(t, b, fleetwire.EventSubject("E")), subscribe(t, b, fleetwire.EventSubject("P"))
	br := newBridge(t, b, bridge.Config{})
	unbind := br.Bind("d", fleetwire.EventSubject("E"))
	defer unbind()
	sink, sent, done := br.RelayDeltas("d", fleetwire.EventSubject("P"), "d/3")
	if !sink.Listening() {
		t.Error("a relay does not listen: the task's model calls would not stream")
	}
	br.Emit(ev(svc.EventAgentSpawned, "inv", "d", "writer"))
	br.Emit(delta("inv", "d", 0))
	br.Emit(ev(svc.EventAgentSpawned, "child", "inv", "helper"))
	br.Emit(delta("child", "inv", 0))
	sink.Delta(svc.Delta{Agent: "writer", TaskID: "t", TraceID: "tr", SpanID: "inv", ParentTraceID: "ptr", ParentSpanID: "d", Index: 0, Text: "hello "})
	sink.Delta(svc.Delta{Agent: "writer", TaskID: "t", TraceID: "tr", SpanID: "inv", ParentSpanID: "d", Index: 1, Text: "world"})
	testutil.Eventually(t, "the listener's 2 deltas", func() bool { return len(listener.events()) == 2 })
	for i, got := range listener.events() {
		if got.EventType != svc.EventAgentDelta || got.Payload[bridge.DeltaDispatch] != "d/3" || got.Payload["index"] != float64(i) ||
			got.TaskID != "t" || got.SpanID != "inv" || got.ParentSpanID != "d" || got.AgentName != "writer" {
			t.Errorf("relayed delta %d = %+v", i, got)
		}
	}
	if got := listener.events()[0]; got.Payload["text"] != "hello " || got.ParentTraceID != "ptr" || got.TraceID != "tr" {
		t.Errorf("relayed delta 0 = %+v", got)
	}
	if n := sent(); n != 2 {
		t.Errorf("sent = %d, want 2", n)
	}
	testutil.Eventually(t, "the task's 2 spawns on its events subject", func() bool { return len(events.events()) == 2 })
	done()
	done() // idempotent
	br.Emit(delta("inv", "d", 1))
	testutil.Eventually(t, "a delta through Emit once the relay is done", func() bool { return len(events.events()) == 3 })
	for _, got := range events.events()[:2] {
		if got.EventType == svc.EventAgentDelta {
			t.Errorf("a delta went out through Emit while the relay was open: %+v", got)
		}
	}
	if br.DeltasDropped() != 0 || br.Dropped() != 0 {
		t.Errorf("dropped %d deltas, %d in all", br.DeltasDropped(), br.Dropped())
	}
}

// TestRelayDeltasShedFirst: with the broker stuck, deltas stop being
// queued once the queue is half full, so they never take the room of the
// events behind them; each one dropped is counted, and Delta never blocks.
func TestRelayDeltasShedFirst(t *testing.T) {
	sb := &stuckBroker{Broker: memBroker(t), release: make(chan struct{})}
	br := bridge.New(sb, bridge.Config{QueueSize: 10, Batch: 1})
	sink, sent, done := br.RelayDeltas("d", fleetwire.EventSubject("P"), "d/1")
	const n = 100
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := range n {
			sink.Delta(svc.Delta{Agent: "writer", SpanID: "inv", ParentSpanID: "d", Index: i, Text: "x"})
		}
	}()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		close(sb.release)
		t.Fatal("Delta blocked on a stuck broker")
	}
	// One batch may be in the stuck broadcast, the rest wait: at most half
	// the queue.
	if s := sent(); s > 6 || s+br.DeltasDropped() != n {
		t.Errorf("sent %d, dropped %d of %d deltas with a queue of 10: want at most 6 queued, the rest counted", s, br.DeltasDropped(), n)
	}
	unbind := br.Bind("d", fleetwire.EventSubject("E"))
	br.Emit(ev(svc.EventAgentCompleted, "inv", "d", "writer"))
	close(sb.release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := br.Close(ctx); err != nil {
		t.Fatal(err)
	}
	unbind()
	done()
	if br.Published() != sent()+1 || br.Dropped() != br.DeltasDropped() {
		t.Errorf("published %d, dropped %d (%d deltas); want the %d deltas queued and the event published, only deltas dropped",
			br.Published(), br.Dropped(), br.DeltasDropped(), sent())
	}
}
