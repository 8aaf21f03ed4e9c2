package emitters_test

import (
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/emittertest"
)

func TestAsyncContract(t *testing.T) {
	emittertest.Run(t, func(t *testing.T) svc.Emitter {
		a := emitters.NewAsync(&emittertest.Recorder{}, 0)
		t.Cleanup(a.Close)
		return a
	})
}

// A consumer that never returns must not stall emit: events beyond the
// queue are dropped and counted.
func TestAsyncNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	stuck := svc.EmitterFunc(func(svc.RuntimeEvent) { <-release })
	a := emitters.NewAsync(stuck, 8)
	defer func() { once.Do(func() { close(release) }); a.Close() }()
	done := make(chan struct{})
	go func() {
		for i := 0; i < 1000; i++ {
			a.Emit(emittertest.SampleEvent(svc.EventAgentCompleted))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Emit blocked behind a stuck consumer")
	}
	if d := a.Dropped(); d < 1000-8-1 {
		t.Fatalf("dropped %d of 1000 with a queue of 8", d)
	}
}

func TestAsyncDeliversInOrderAndDrainsOnClose(t *testing.T) {
	rec := &emittertest.Recorder{}
	a := emitters.NewAsync(rec, 100)
	for i := 0; i < 50; i++ {
		ev := emittertest.SampleEvent(svc.EventAgentCompleted)
		ev.TaskID = string(rune('A' + i%26))
		a.Emit(ev)
	}
	a.Close()
	evs := rec.Events()
	if len(evs) != 50 {
		t.Fatalf("delivered %d of 50", len(evs))
	}
	for i, ev := range evs {
		if ev.TaskID != string(rune('A'+i%26)) {
			t.Fatalf("event %d out of order", i)
		}
	}
	a.Emit(emittertest.SampleEvent(svc.EventAgentCompleted)) // after Close: dropped, no panic
	if a.Dropped() != 1 {
		t.Fatalf("dropped after close = %d", a.Dropped())
	}
}
