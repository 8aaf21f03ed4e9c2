package sse_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/emitters/sse"
	"github.com/svc-dev/svc/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait for something asynchronous; it catches a
// hang, not slowness.
const waitLimit = 10 * time.Second

func newEmitter(t *testing.T, cfg sse.Config) *sse.Emitter {
	t.Helper()
	e, err := sse.New(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func subscribe(t *testing.T, e *sse.Emitter, ctx context.Context, f svc.EventFilter) svc.EventSubscription {
	t.Helper()
	sub, err := e.Subscribe(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// receive reads n events from sub, failing the test if they do not come.
func receive(t *testing.T, sub svc.EventSubscription, n int) []svc.RuntimeEvent {
	t.Helper()
	var got []svc.RuntimeEvent
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	for len(got) < n {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				t.Fatalf("Events closed after %d of %d events", len(got), n)
			}
			got = append(got, ev)
		case <-timer.C:
			t.Fatalf("got %d of %d events within %v", len(got), n, waitLimit)
		}
	}
	return got
}

// waitClosed drains sub until Events is closed.
func waitClosed(t *testing.T, sub svc.EventSubscription) {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-sub.Events():
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("Events not closed within %v", waitLimit)
		}
	}
}

func numbered(typ svc.EventType, i int) svc.RuntimeEvent {
	ev := emittertest.SampleEvent(typ)
	ev.TaskID = fmt.Sprintf("task-%05d", i)
	return ev
}

func TestContract(t *testing.T) {
	emittertest.Run(t, func(t *testing.T) svc.Emitter { return newEmitter(t, sse.Config{}) })
}

// The contract again with subscribers attached: one reading everything,
// one that never reads (its queues fill and then drop), one filtered.
func TestContractWithSubscribers(t *testing.T) {
	emittertest.Run(t, func(t *testing.T) svc.Emitter {
		e := newEmitter(t, sse.Config{QueueSize: 16})
		subscribe(t, e, t.Context(), svc.EventFilter{})
		subscribe(t, e, t.Context(), svc.EventFilter{EventTypes: []svc.EventType{svc.EventAgentFailed}, Agent: "triage"})
		reader := subscribe(t, e, t.Context(), svc.EventFilter{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range reader.Events() {
			}
		}()
		t.Cleanup(func() { _ = reader.Close(); wg.Wait() })
		return e
	})
}

func TestDeliversMatchingEventsInOrder(t *testing.T) {
	e := newEmitter(t, sse.Config{})
	all := subscribe(t, e, t.Context(), svc.EventFilter{})
	failures := subscribe(t, e, t.Context(), svc.EventFilter{EventTypes: []svc.EventType{svc.EventAgentFailed, svc.EventToolCallFailed}})
	billing := subscribe(t, e, t.Context(), svc.EventFilter{Agent: "billing"})

	var emitted []svc.RuntimeEvent
	for i := range 300 {
		ev := numbered(svc.EventTypes[i%len(svc.EventTypes)], i)
		if i%3 == 0 {
			ev.AgentName = "billing"
		}
		emitted = append(emitted, ev)
		e.Emit(ev)
	}
	check := func(name string, sub svc.EventSubscription, f svc.EventFilter) {
		t.Helper()
		var want []string
		for _, ev := range emitted {
			if f.Match(&ev) {
				want = append(want, ev.TaskID)
			}
		}
		got := receive(t, sub, len(want))
		for i, ev := range got {
			if ev.TaskID != want[i] || !f.Match(&ev) {
				t.Fatalf("%s: event %d is %s %s, want %s", name, i, ev.EventType, ev.TaskID, want[i])
			}
		}
		if d := sub.Dropped(); d != 0 {
			t.Errorf("%s: Dropped = %d with room in the queue", name, d)
		}
	}
	check("all", all, svc.EventFilter{})
	check("failures", failures, svc.EventFilter{EventTypes: []svc.EventType{svc.EventAgentFailed, svc.EventToolCallFailed}})
	check("billing", billing, svc.EventFilter{Agent: "billing"})
	// A non-matching event is skipped, not queued.
	skipped := numbered(svc.EventAgentSpawned, 1000)
	e.Emit(skipped)
	e.Emit(numbered(svc.EventToolCallFailed, 1001))
	if ev := receive(t, failures, 1)[0]; ev.TaskID != "task-01001" {
		t.Errorf("failures subscriber got %s %s after a non-matching event, want the tool_call_failed", ev.EventType, ev.TaskID)
	}
}

// A subscriber that never reads: emitting stays prompt, the subscriber
// keeps the oldest QueueSize events, and every other one is counted as
// dropped.
func TestSlowSubscriberDropsAndCounts(t *testing.T) {
	const queue, total = 8, 5_000
	e := newEmitter(t, sse.Config{QueueSize: queue})
	stuck := subscribe(t, e, t.Context(), svc.EventFilter{})
	reader := subscribe(t, e, t.Context(), svc.EventFilter{})

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range total {
			e.Emit(numbered(svc.EventToolCallStarted, i))
		}
	}()
	// The reading subscriber keeps getting events while the other is
	// stuck: one slow client does not hold up another.
	got := 0
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
loop:
	for {
		select {
		case <-reader.Events():
			got++
		case <-done:
			break loop
		case <-timer.C:
			t.Fatalf("%d Emit calls did not return within %v with a subscriber that never reads", total, waitLimit)
		}
	}
	if got == 0 {
		// Emit may finish all its calls before the reader's actor has
		// delivered one (Emit only queues): what matters is that the
		// reader gets its events with the other subscriber still stuck.
		receive(t, reader, 1)
	}

	// Once the actor has handled its mailbox, every event is either
	// waiting in the channel or counted as dropped.
	testutil.Eventually(t, "stuck subscriber accounted for every event", func() bool {
		return uint64(len(stuck.Events()))+stuck.Dropped() == total
	})
	if n := len(stuck.Events()); n != queue {
		t.Fatalf("%d events waiting, want the queue full (%d)", n, queue)
	}
	for i, ev := range receive(t, stuck, queue) {
		if want := fmt.Sprintf("task-%05d", i); ev.TaskID != want {
			t.Errorf("kept event %d is %s, want %s: the oldest are kept, the newest dropped", i, ev.TaskID, want)
		}
	}
	// Once it reads again it gets new events.
	e.Emit(numbered(svc.EventAgentCompleted, total))
	if ev := receive(t, stuck, 1)[0]; ev.TaskID != fmt.Sprintf("task-%05d", total) {
		t.Errorf("after catching up got %s", ev.TaskID)
	}
}

func TestCloseStopsTheActor(t *testing.T) {
	e := newEmitter(t, sse.Config{})
	sub, err := e.Subscribe(t.Context(), svc.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.Subscribers(); n != 1 {
		t.Fatalf("Subscribers = %d after Subscribe, want 1", n)
	}
	e.Emit(numbered(svc.EventAgentSpawned, 1))
	receive(t, sub, 1)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "subscriber actor stopped", func() bool { return e.Subscribers() == 0 })
	waitClosed(t, sub)
	if err := sub.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// Emitting to nobody is fine.
	e.Emit(numbered(svc.EventAgentSpawned, 2))
}

func TestContextEndsTheSubscription(t *testing.T) {
	e := newEmitter(t, sse.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	sub, err := e.Subscribe(ctx, svc.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	other := subscribe(t, e, t.Context(), svc.EventFilter{})
	cancel()
	testutil.Eventually(t, "the cancelled subscriber's actor stopped", func() bool { return e.Subscribers() == 1 })
	waitClosed(t, sub)
	// The other subscription is untouched.
	e.Emit(numbered(svc.EventAgentSpawned, 1))
	receive(t, other, 1)
	_ = sub.Close() // still fine after the context ended it
}

func TestSubscribeWithEndedContext(t *testing.T) {
	e := newEmitter(t, sse.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := e.Subscribe(ctx, svc.EventFilter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe with an ended context: %v, want context.Canceled", err)
	}
	if n := e.Subscribers(); n != 0 {
		t.Errorf("Subscribers = %d", n)
	}
}

func TestUnknownEventTypeRefused(t *testing.T) {
	e := newEmitter(t, sse.Config{})
	_, err := e.Subscribe(t.Context(), svc.EventFilter{EventTypes: []svc.EventType{svc.EventAgentSpawned, "agent_exploded"}})
	var se *svc.Error
	if !errors.As(err, &se) || se.Kind != svc.KindSpecValidation {
		t.Fatalf("Subscribe(agent_exploded) = %v, want a SpecValidationError", err)
	}
	if n := e.Subscribers(); n != 0 {
		t.Errorf("Subscribers = %d after a refused Subscribe", n)
	}
}

func TestEmitterCloseEndsEverySubscription(t *testing.T) {
	e, err := sse.New(nil, sse.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var subs []svc.EventSubscription
	for range 5 {
		sub, err := e.Subscribe(t.Context(), svc.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	e.Emit(numbered(svc.EventAgentSpawned, 1))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if n := e.Subscribers(); n != 0 {
		t.Errorf("Subscribers = %d after Close, want 0", n)
	}
	for _, sub := range subs {
		waitClosed(t, sub)
	}
	_, err = e.Subscribe(t.Context(), svc.EventFilter{})
	var se *svc.Error
	if !errors.As(err, &se) || se.Kind != svc.KindShuttingDown {
		t.Errorf("Subscribe after Close = %v, want ShuttingDownError", err)
	}
	e.Emit(numbered(svc.EventAgentSpawned, 2)) // dropped, no panic
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// Subscribers come and go while events flow: nothing races, nothing is
// left running.
func TestChurn(t *testing.T) {
	e := newEmitter(t, sse.Config{QueueSize: 4})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				e.Emit(numbered(svc.EventTypes[i%len(svc.EventTypes)], i))
			}
		}
	}()
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				ctx, cancel := context.WithCancel(t.Context())
				sub, err := e.Subscribe(ctx, svc.EventFilter{Agent: "triage"})
				if err != nil {
					t.Error(err)
					cancel()
					return
				}
				if (g+i)%2 == 0 {
					cancel()
					_ = sub.Close()
				} else {
					_ = sub.Close()
					cancel()
				}
			}
		}()
	}
	time.Sleep(10 * time.Millisecond) // let the emitter run with no subscriber at all too
	close(stop)
	wg.Wait()
	testutil.Eventually(t, "every subscriber actor stopped", func() bool { return e.Subscribers() == 0 })
}

// With a caller's actor system, the subscribers live there and Close
// leaves the system running.
func TestCallersActorSystem(t *testing.T) {
	system := actor.NewActorSystem()
	e, err := sse.New(system, sse.Config{HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.HeartbeatInterval(); got != time.Second {
		t.Errorf("HeartbeatInterval = %v", got)
	}
	sub := subscribe(t, e, t.Context(), svc.EventFilter{})
	e.Emit(numbered(svc.EventAgentSpawned, 1))
	receive(t, sub, 1)
	_ = e.Close()
	waitClosed(t, sub)
	if system.IsStopped() {
		t.Error("Close shut down the caller's actor system")
	}
	system.Shutdown()
}

func TestConfig(t *testing.T) {
	e := newEmitter(t, sse.Config{})
	if got := e.HeartbeatInterval(); got != sse.DefaultHeartbeatInterval {
		t.Errorf("default HeartbeatInterval = %v, want %v", got, sse.DefaultHeartbeatInterval)
	}
	// The default queue holds 1024 events for a subscriber that does not
	// read.
	sub := subscribe(t, e, t.Context(), svc.EventFilter{})
	for i := range 3000 {
		e.Emit(numbered(svc.EventAgentSpawned, i))
	}
	testutil.Eventually(t, "every event accounted for", func() bool { return uint64(len(sub.Events()))+sub.Dropped() == 3000 })
	if n := len(sub.Events()); n != sse.DefaultQueueSize {
		t.Errorf("%d events queued, want %d", n, sse.DefaultQueueSize)
	}
	for _, cfg := range []sse.Config{{HeartbeatInterval: -time.Second}, {QueueSize: -1}, {StallTimeout: -time.Second}} {
		if _, err := sse.New(nil, cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// DisconnectSlow ends the subscription (Events closes, the actor stops)
// and counts it once, however often the handler calls it.
func TestDisconnectSlowEndsAndCountsOnce(t *testing.T) {
	e := newEmitter(t, sse.Config{})
	keep := subscribe(t, e, t.Context(), svc.EventFilter{})
	sub := subscribe(t, e, t.Context(), svc.EventFilter{})
	sd, ok := sub.(interface{ DisconnectSlow() bool })
	if !ok {
		t.Fatalf("%T has no DisconnectSlow", sub)
	}
	if !sd.DisconnectSlow() || sd.DisconnectSlow() {
		t.Fatal("DisconnectSlow counted other than once")
	}
	waitClosed(t, sub)
	if got := e.SlowDisconnects(); got != 1 {
		t.Fatalf("SlowDisconnects = %d, want 1", got)
	}
	if got := e.Subscribers(); got != 1 {
		t.Fatalf("Subscribers = %d, want 1 (the other subscription stays)", got)
	}
	e.Emit(numbered(svc.EventAgentCompleted, 1))
	receive(t, keep, 1)
}

// Subscriptions of SubscribeEncoded get each event as one shared
// EncodedEvent, whose JSON is the event's own; a Subscribe subscription
// beside them gets the same events as values.
func TestSubscribeEncodedShares(t *testing.T) {
	e := newEmitter(t, sse.Config{})
	var encs []*sse.EncodedReader
	for range 3 {
		s, err := e.SubscribeEncoded(t.Context(), svc.EventFilter{Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		encs = append(encs, sse.NewEncodedReader(s))
	}
	plain := subscribe(t, e, t.Context(), svc.EventFilter{Agent: "a"})
	evs := []svc.RuntimeEvent{
		{EventType: svc.EventAgentSpawned, AgentName: "a", TaskID: "1"},
		{EventType: svc.EventAgentSpawned, AgentName: "b", TaskID: "2"}, // filtered out
		{EventType: svc.EventAgentCompleted, AgentName: "a", TaskID: "3"},
	}
	for _, ev := range evs {
		e.Emit(ev)
	}
	for _, want := range []svc.RuntimeEvent{evs[0], evs[2]} {
		wantJSON, err := want.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var first *svc.EncodedEvent
		for i, s := range encs {
			got, ok := s.Next(waitLimit)
			if !ok {
				t.Fatalf("subscription %d: no event", i)
			}
			if first == nil {
				first = got
			} else if got != first {
				t.Errorf("subscription %d got its own copy of %s; want the shared one", i, want.TaskID)
			}
			b, err := got.JSON()
			if err != nil || string(b) != string(wantJSON) {
				t.Errorf("subscription %d: JSON %s, %v; want %s", i, b, err, wantJSON)
			}
		}
		if got := receive(t, plain, 1)[0]; got.TaskID != want.TaskID {
			t.Errorf("plain subscription got task %s, want %s", got.TaskID, want.TaskID)
		}
	}
	// Close ends the encoded stream too.
	_ = encs[0].S.Close()
	if ev, ended := encs[0].S.Next(); ev != nil || !ended {
		t.Errorf("Next after Close: %v, ended %v; want nil, ended", ev, ended)
	}
}
