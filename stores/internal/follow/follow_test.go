package follow

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// log is a run in memory: events and a terminal flag, and a broadcast
// channel replaced at every change.
type log struct {
	mu      sync.Mutex
	evs     []svc.RunEvent
	done    bool
	changed chan struct{}
	page    int
	fails   int
}

func newLog() *log { return &log{changed: make(chan struct{}), page: 1000} }

func (l *log) add(n int, end bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		l.evs = append(l.evs, svc.RunEvent{Seq: int64(len(l.evs) + 1)})
	}
	l.done = l.done || end
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *log) source() Source {
	return Source{
		Arm: func() <-chan struct{} { l.mu.Lock(); defer l.mu.Unlock(); return l.changed },
		Read: func(_ context.Context, after int64) ([]svc.RunEvent, bool, bool, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.fails > 0 {
				l.fails--
				return nil, false, false, errors.New("transient")
			}
			evs := l.evs[min(int(after), len(l.evs)):]
			more := len(evs) > l.page
			if more {
				evs = evs[:l.page]
			}
			return append([]svc.RunEvent(nil), evs...), l.done && !more, more, nil
		},
	}
}

func start(ctx context.Context, stop chan struct{}, after int64, src Source) (chan svc.RunEvent, chan struct{}) {
	out, ended := make(chan svc.RunEvent), make(chan struct{})
	go func() { defer close(ended); Run(ctx, stop, after, src, out) }()
	return out, ended
}

func recv(t *testing.T, out chan svc.RunEvent, n int) []svc.RunEvent {
	t.Helper()
	var got []svc.RunEvent
	for len(got) < n {
		select {
		case ev := <-out:
			got = append(got, ev)
		case <-time.After(5 * time.Second):
			t.Fatalf("stalled after %d of %d events", len(got), n)
		}
	}
	return got
}

func ended(t *testing.T, ch chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not end")
	}
}

func TestSnapshotThenLiveThenEnd(t *testing.T) {
	l := newLog()
	l.page = 3
	l.add(7, false)
	out, done := start(t.Context(), nil, 2, l.source())
	got := recv(t, out, 5)
	for i, ev := range got {
		if ev.Seq != int64(i+3) {
			t.Fatalf("event %d = seq %d", i, ev.Seq)
		}
	}
	l.add(2, false)
	if got := recv(t, out, 2); got[1].Seq != 9 {
		t.Fatalf("live events %+v", got)
	}
	l.add(1, true)
	if got := recv(t, out, 1); got[0].Seq != 10 {
		t.Fatalf("last event %+v", got)
	}
	ended(t, done)
}

func TestEndsOnContextAndStop(t *testing.T) {
	l := newLog()
	ctx, cancel := context.WithCancel(t.Context())
	_, done := start(ctx, nil, 0, l.source())
	cancel()
	ended(t, done)
	stop := make(chan struct{})
	l.add(3, false)
	_, done = start(t.Context(), stop, 0, l.source()) // blocked sending
	close(stop)
	ended(t, done)
}

func TestRetryAndPoll(t *testing.T) {
	l := newLog()
	l.fails = 2
	l.add(1, false)
	src := l.source()
	src.Retry = func(error) bool { return true }
	out, _ := start(t.Context(), nil, 0, src)
	recv(t, out, 1)

	// Without a retry an error ends the stream.
	l.fails = 1
	_, done := start(t.Context(), nil, 0, l.source())
	ended(t, done)

	// Poll alone finds changes nobody signals.
	src = l.source()
	src.Arm, src.Poll = nil, 10*time.Millisecond
	out, done = start(t.Context(), nil, 1, src)
	l.add(1, true)
	recv(t, out, 1)
	ended(t, done)
}
