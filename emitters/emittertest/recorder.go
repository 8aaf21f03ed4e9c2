package emittertest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// Recorder is an emitter that keeps every event it receives, for tests to
// inspect. It is safe for concurrent use; the zero value is ready. Events
// are kept as given (events are immutable once emitted).
type Recorder struct {
	mu     sync.Mutex
	events []svc.RuntimeEvent
	// changed is closed by the next Emit, waking every WaitFor; nil while
	// nobody waits, so that Emit costs no allocation then.
	changed chan struct{}
}

var _ svc.Emitter = (*Recorder)(nil)

// Emit records ev.
func (r *Recorder) Emit(ev svc.RuntimeEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// Events returns the recorded events in the order they were emitted.
func (r *Recorder) Events() []svc.RuntimeEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// OfType returns the recorded events of type t, in order.
func (r *Recorder) OfType(t svc.EventType) []svc.RuntimeEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ofTypeLocked(t)
}

func (r *Recorder) ofTypeLocked(t svc.EventType) []svc.RuntimeEvent {
	var out []svc.RuntimeEvent
	for _, ev := range r.events {
		if ev.EventType == t {
			out = append(out, ev)
		}
	}
	return out
}

// WaitFor waits until at least n events of type t have been recorded and
// returns all events of that type recorded by then. When timeout passes
// first it fails the test with tb.Fatalf, naming what was recorded, so call
// it from the goroutine running the test.
func (r *Recorder) WaitFor(tb testing.TB, t svc.EventType, n int, timeout time.Duration) []svc.RuntimeEvent {
	tb.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		r.mu.Lock()
		got := r.ofTypeLocked(t)
		if len(got) >= n {
			r.mu.Unlock()
			return got
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed := r.changed
		summary := r.summaryLocked()
		r.mu.Unlock()

		select {
		case <-changed:
		case <-timer.C:
			tb.Fatalf("emittertest: waited %v for %d %s events, got %d; recorded: %s", timeout, n, t, len(got), summary)
			return nil
		}
	}
}

// summaryLocked counts the recorded events by type, for failure messages.
func (r *Recorder) summaryLocked() string {
	if len(r.events) == 0 {
		return "nothing"
	}
	counts := map[svc.EventType]int{}
	for _, ev := range r.events {
		counts[ev.EventType]++
	}
	parts := make([]string, 0, len(counts))
	for t, c := range counts {
		parts = append(parts, fmt.Sprintf("%s×%d", t, c))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// Reset forgets every recorded event.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = nil
}
