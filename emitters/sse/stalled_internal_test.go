package sse

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
)

// A subscriber that has stopped reading costs each later event a length
// check in the fan-out, not a trip through its mailbox and actor: with
// hundreds of stalled clients that trip was most of the process's CPU
// (issue 13). The events still count as dropped.
func TestStalledSubscriberSkipsTheActor(t *testing.T) {
	const queue, more = 8, 100
	e, err := New(nil, Config{QueueSize: queue})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	es, err := e.Subscribe(t.Context(), svc.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	s := es.(*subscription)
	ev := func(i int) svc.RuntimeEvent {
		return svc.RuntimeEvent{EventType: svc.EventToolCallStarted, AgentName: "a", TaskID: fmt.Sprint(i)}
	}
	for i := range queue {
		e.Emit(ev(i))
	}
	testutil.Eventually(t, "the subscriber's channel full", func() bool { return len(s.out) == queue })
	// One at a time, so that the fan-out queue never drops one.
	for i := range more {
		e.Emit(ev(queue + i))
		testutil.Eventually(t, "the event counted as dropped", func() bool { return s.Dropped() == uint64(i+1) })
	}
	if n := e.fanDropped.Load(); n != 0 {
		t.Fatalf("the fan-out queue dropped %d events", n)
	}
	if n := s.dropped.Load() + s.mb.Dropped(); n != 0 {
		t.Errorf("%d of the %d events went through the stalled subscriber's mailbox or actor, want none", n, more)
	}
}

// A subscriber whose queue stays full for StallTimeout while events keep
// coming reports itself stalled; one that keeps reading never does.
func TestStalledReported(t *testing.T) {
	const stall = 100 * time.Millisecond
	e, err := New(nil, Config{QueueSize: 4, StallTimeout: stall})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	stuck, err := e.Subscribe(t.Context(), svc.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := e.Subscribe(t.Context(), svc.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range reader.Events() {
		}
	}()
	stalled := func(s svc.EventSubscription) bool {
		select {
		case <-s.(*subscription).Stalled():
			return true
		default:
			return false
		}
	}
	ev := svc.RuntimeEvent{EventType: svc.EventToolCallStarted, AgentName: "a"}
	start := time.Now()
	testutil.Eventually(t, "the stuck subscriber reported stalled", func() bool {
		e.Emit(ev)
		time.Sleep(5 * time.Millisecond)
		return stalled(stuck)
	})
	if d := time.Since(start); d < stall {
		t.Errorf("stalled after %v, before StallTimeout %v", d, stall)
	}
	if stalled(reader) {
		t.Error("the reading subscriber was reported stalled")
	}
}

// A SubscribeEncoded subscriber that stops reading is reported stalled
// as a Subscribe one is, and its events skip its actor.
func TestStalledEncodedReported(t *testing.T) {
	const queue = 4
	e, err := New(nil, Config{QueueSize: queue, StallTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	es, err := e.SubscribeEncoded(t.Context(), svc.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	s := es.(encodedSubscription).s
	// AfterStall's callback runs once the subscription stalls, and not
	// before; one stopped in time never runs.
	var called, cancelled atomic.Int32
	ran := make(chan struct{})
	es.(encodedSubscription).AfterStall(func() { called.Add(1); close(ran) })
	if stop := es.(encodedSubscription).AfterStall(func() { cancelled.Add(1) }); !stop() {
		t.Fatal("stop of a callback not yet run reported false")
	}
	ev := svc.RuntimeEvent{EventType: svc.EventToolCallStarted, AgentName: "a"}
	for range queue {
		e.Emit(ev)
	}
	testutil.Eventually(t, "the subscriber's channel full", func() bool { return int(s.enc.count.Load()) == queue })
	if called.Load() != 0 {
		t.Fatal("AfterStall's callback ran before the subscription stalled")
	}
	testutil.Eventually(t, "stalled", func() bool {
		e.Emit(ev)
		select {
		case <-es.(encodedSubscription).Stalled():
			return true
		default:
			return false
		}
	})
	<-ran
	if called.Load() != 1 || cancelled.Load() != 0 {
		t.Errorf("AfterStall callbacks: %d run (want 1), %d stopped ones run (want 0)", called.Load(), cancelled.Load())
	}
	if n := s.dropped.Load() + s.mb.Dropped(); n != 0 {
		t.Errorf("%d events went through the stalled subscriber's mailbox or actor, want none", n)
	}
	if !es.(encodedSubscription).DisconnectSlow() || e.SlowDisconnects() != 1 {
		t.Errorf("DisconnectSlow not counted: %d", e.SlowDisconnects())
	}
}

// A subscriber's queue is bounded in bytes as well as in events: with
// large events, one that stops reading holds no more than QueueBytes of
// them, the rest counted as dropped, and is reported stalled as one
// whose queue is full of events is; once it reads again, events flow
// again. Before the bound, 1,024 events of any size waited for each
// stalled subscriber (issue 25).
func TestQueueBoundedInBytes(t *testing.T) {
	const budget, big = 64 << 10, 10 << 10 // each event's JSON is a little over big
	e, err := New(nil, Config{QueueSize: 1024, QueueBytes: budget, StallTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	es, err := e.SubscribeEncoded(t.Context(), svc.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	s := es.(encodedSubscription).s
	ev := func(i int) svc.RuntimeEvent {
		return svc.RuntimeEvent{EventType: svc.EventToolCallStarted, AgentName: "a", TaskID: fmt.Sprint(i),
			Payload: svc.Payload{"blob": strings.Repeat("x", big)}}
	}
	const sent = 40
	for i := range sent {
		e.Emit(ev(i)) // one at a time, so that the fan-out queue drops none
		testutil.Eventually(t, "the event queued or dropped", func() bool { return int(s.enc.count.Load())+int(s.Dropped()) == i+1 })
	}
	held := int(s.enc.count.Load())
	if held == 0 || held > budget/big {
		t.Fatalf("%d events of %d KiB wait for the subscriber, want 1 to %d (QueueBytes %d KiB)", held, big>>10, budget/big, budget>>10)
	}
	if d := s.Dropped(); int(d) != sent-held {
		t.Errorf("Dropped = %d, want %d", d, sent-held)
	}
	testutil.Eventually(t, "stalled", func() bool {
		e.Emit(ev(0))
		select {
		case <-es.(encodedSubscription).Stalled():
			return true
		default:
			return false
		}
	})
	// Reading again makes room: the next event is queued (after, maybe,
	// the last of those the stall took, which was still on its way).
	if n := int(s.enc.count.Load()); n != held {
		t.Fatalf("%d events wait after the stall, %d before", n, held)
	}
	r := NewEncodedReader(es)
	for range held {
		if _, ok := r.Next(10 * time.Second); !ok {
			t.Fatal("a queued event did not come")
		}
	}
	e.Emit(ev(sent))
	for {
		got, ok := r.Next(10 * time.Second)
		if !ok {
			t.Fatalf("the event emitted after reading did not come; dropped %d", s.Dropped())
		}
		if got.Event.TaskID == fmt.Sprint(sent) {
			return
		}
	}
}

// The mailbox's queue takes memory only as events wait in it, and lets
// it go once drained: each of 2,000 subscribers kept a 1,024-slot channel
// made up front (32 MiB in all, issue 25).
func TestMailboxGrowsAndShrinks(t *testing.T) {
	mb := newDropMailbox(1024)
	d := &heldDispatcher{}
	mb.RegisterHandlers(&recordingInvoker{}, d)
	if len(mb.user) != 0 {
		t.Fatalf("a new mailbox holds a queue of %d", len(mb.user))
	}
	for i := range 100 {
		mb.offer(i)
	}
	if n := len(mb.user); n < 100 || n > 256 {
		t.Errorf("100 waiting in a queue of %d", n)
	}
	d.runAll()
	if mb.userCount() != 0 || len(mb.user) != 0 {
		t.Errorf("drained: %d waiting in a queue of %d, want none kept", mb.userCount(), len(mb.user))
	}
}
