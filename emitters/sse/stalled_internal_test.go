package sse

import (
	"fmt"
	"testing"

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
