package bridge_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/membroker"
	"github.com/svc-dev/svc/emitters/bridge"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/svc-dev/svc/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newBridge(t *testing.T, b svc.Broker, cfg bridge.Config) *bridge.Bridge {
	t.Helper()
	br := bridge.New(b, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = br.Close(ctx)
	})
	return br
}

func memBroker(t *testing.T) svc.Broker {
	t.Helper()
	b := membroker.New()
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestContractUnbound: with nothing bound the bridge ignores every event.
func TestContractUnbound(t *testing.T) {
	emittertest.Run(t, func(t *testing.T) svc.Emitter { return newBridge(t, memBroker(t), bridge.Config{}) })
}

// spanned gives every event the parent span a task bound, so the contract
// suite drives the bridge's publishing path: queue, batches, broadcasts.
type spanned struct{ b *bridge.Bridge }

func (s spanned) Emit(ev svc.RuntimeEvent) {
	ev.ParentSpanID = "task-span"
	s.b.Emit(ev)
}

func TestContractBound(t *testing.T) {
	emittertest.Run(t, func(t *testing.T) svc.Emitter {
		br := newBridge(t, memBroker(t), bridge.Config{QueueSize: 64})
		t.Cleanup(br.Bind("task-span", fleetwire.EventSubject("pub-1")))
		return spanned{br}
	})
}

// listen collects what is broadcast on subject.
type listen struct {
	mu  sync.Mutex
	evs []svc.RuntimeEvent
}

func (l *listen) events() []svc.RuntimeEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]svc.RuntimeEvent(nil), l.evs...)
}

func subscribe(t *testing.T, b svc.Broker, subject string) *listen {
	t.Helper()
	l := &listen{}
	sub, err := b.SubscribeBroadcast(context.Background(), subject, func(_ context.Context, _ string, data []byte) {
		evs, err := bridge.Decode(data)
		if err != nil {
			t.Errorf("decode: %v", err)
			return
		}
		l.mu.Lock()
		l.evs = append(l.evs, evs...)
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop() })
	return l
}

func ev(t svc.EventType, span, parent, agent string) svc.RuntimeEvent {
	e := emittertest.SampleEvent(t)
	e.SpanID, e.ParentSpanID, e.AgentName = span, parent, agent
	return e
}

// TestRelaysATaskAndWhatItStarts: the task's own events, those of a child
// under its span and a grandchild under the child's go to the bound
// publisher in emit order; another task's events and run-less events do
// not; after unbind nothing does and no span stays bound.
func TestRelaysATaskAndWhatItStarts(t *testing.T) {
	b := memBroker(t)
	pubA, pubB := subscribe(t, b, fleetwire.EventSubject("A")), subscribe(t, b, fleetwire.EventSubject("B"))
	br := newBridge(t, b, bridge.Config{})
	unbindA := br.Bind("dispatch-a", fleetwire.EventSubject("A"))
	unbindB := br.Bind("dispatch-b", fleetwire.EventSubject("B"))

	want := []svc.RuntimeEvent{
		ev(svc.EventAgentSpawned, "inv-a", "dispatch-a", "triage"),
		ev(svc.EventToolCallStarted, "inv-a", "dispatch-a", "triage"),
		ev(svc.EventAgentSpawned, "child", "inv-a", "helper"),      // spawned by the task
		ev(svc.EventAgentSpawned, "grandchild", "child", "deeper"), // spawned by the child
		ev(svc.EventAgentCompleted, "grandchild", "child", "deeper"),
		ev(svc.EventAgentCompleted, "child", "inv-a", "helper"),
		ev(svc.EventAgentCompleted, "inv-a", "dispatch-a", "triage"),
	}
	for i, e := range want {
		br.Emit(e)
		if i == 1 {
			br.Emit(ev(svc.EventAgentSpawned, "inv-b", "dispatch-b", "other")) // B's task
			br.Emit(ev(svc.EventAgentSpawned, "x", "unbound", "stranger"))     // nobody's
			br.Emit(emittertest.SampleEvent(svc.EventWorkerHeartbeat))         // run-less
		}
	}
	testutil.Eventually(t, "A gets its 7 events", func() bool { return len(pubA.events()) == len(want) })
	for i, got := range pubA.events() {
		if got.EventType != want[i].EventType || got.AgentName != want[i].AgentName || got.SpanID != want[i].SpanID {
			t.Errorf("A event %d = %s %s %s, want %s %s %s", i, got.EventType, got.AgentName, got.SpanID,
				want[i].EventType, want[i].AgentName, want[i].SpanID)
		}
	}
	testutil.Eventually(t, "B gets its event", func() bool { return len(pubB.events()) == 1 })
	if got := pubB.events()[0].AgentName; got != "other" {
		t.Errorf("B got %q", got)
	}

	unbindA()
	unbindA() // idempotent
	br.Emit(ev(svc.EventAgentSpawned, "late", "inv-a", "late"))
	br.Emit(ev(svc.EventAgentCompleted, "inv-b", "dispatch-b", "other"))
	testutil.Eventually(t, "B gets its second event", func() bool { return len(pubB.events()) == 2 })
	if n := len(pubA.events()); n != len(want) {
		t.Errorf("A got %d events after unbind, want %d", n, len(want))
	}
	unbindB()
	if n := br.Bound(); n != 0 {
		t.Errorf("%d spans still bound after every task unbound", n)
	}
	if br.Published() != int64(len(want)+2) || br.Dropped() != 0 {
		t.Errorf("published %d, dropped %d; want %d, 0", br.Published(), br.Dropped(), len(want)+2)
	}
}

// TestBindTwice: a span bound twice stays bound until both unbind.
func TestBindTwice(t *testing.T) {
	b := memBroker(t)
	l := subscribe(t, b, fleetwire.EventSubject("A"))
	br := newBridge(t, b, bridge.Config{})
	u1 := br.Bind("s", fleetwire.EventSubject("A"))
	u2 := br.Bind("s", fleetwire.EventSubject("A"))
	u1()
	br.Emit(ev(svc.EventAgentSpawned, "i", "s", "a"))
	testutil.Eventually(t, "the event is relayed", func() bool { return len(l.events()) == 1 })
	u2()
	if br.Bound() != 0 {
		t.Errorf("bound = %d", br.Bound())
	}
	if u := br.Bind("", "x"); u == nil {
		t.Error("Bind of an empty span returned nil")
	}
}

// stuckBroker never finishes a broadcast until released.
type stuckBroker struct {
	svc.Broker
	release chan struct{}
}

func (s *stuckBroker) Broadcast(ctx context.Context, _ string, _ []byte) error {
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestSlowBrokerDropsAndCounts: a broker that does not take the events
// costs dropped events, counted, never a blocked Emit.
func TestSlowBrokerDropsAndCounts(t *testing.T) {
	sb := &stuckBroker{Broker: memBroker(t), release: make(chan struct{})}
	br := bridge.New(sb, bridge.Config{QueueSize: 10, Batch: 1})
	unbind := br.Bind("s", fleetwire.EventSubject("A"))
	const n = 100
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range n {
			br.Emit(ev(svc.EventToolCallStarted, "i", "s", "a"))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		close(sb.release)
		t.Fatal("Emit blocked on a stuck broker")
	}
	if d := br.Dropped(); d < n-11 {
		t.Errorf("dropped %d of %d with a queue of 10 and a stuck broker", d, n)
	}
	close(sb.release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := br.Close(ctx); err != nil {
		t.Fatal(err)
	}
	unbind()
	if got := br.Published() + br.Dropped(); got != n {
		t.Errorf("published %d + dropped %d = %d, want every one of %d accounted for", br.Published(), br.Dropped(), got, n)
	}
}

func TestDecodeRefusesWhatIsNotEvents(t *testing.T) {
	for _, bad := range []string{`{}`, `[]`, `[{"payload":{}}]`, `nope`} {
		if _, err := bridge.Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%s) = nil error", bad)
		}
	}
}
