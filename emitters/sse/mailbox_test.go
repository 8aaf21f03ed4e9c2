package sse

import (
	"slices"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// recordingInvoker records what a mailbox hands it, in order.
type recordingInvoker struct {
	mu  sync.Mutex
	got []any
}

func (r *recordingInvoker) InvokeSystemMessage(m any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, m)
}

func (r *recordingInvoker) InvokeUserMessage(m any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, m)
}

func (r *recordingInvoker) EscalateFailure(reason, _ any) { panic(reason) }

// heldDispatcher keeps scheduled work until the test runs it, so that the
// test sees the mailbox while nothing drains it.
type heldDispatcher struct{ work []func() }

func (d *heldDispatcher) Schedule(fn func()) { d.work = append(d.work, fn) }
func (d *heldDispatcher) Throughput() int    { return 2 }
func (d *heldDispatcher) runAll() {
	for len(d.work) > 0 {
		fn := d.work[0]
		d.work = d.work[1:]
		fn()
	}
}

func TestDropMailbox(t *testing.T) {
	mb := newDropMailbox(3)
	inv := &recordingInvoker{}
	d := &heldDispatcher{}
	mb.RegisterHandlers(inv, d)
	mb.Start()

	for i := range 10 {
		queued := mb.offer(i)
		if queued != (i < 3) {
			t.Fatalf("offer(%d) = %v with a queue of 3", i, queued)
		}
	}
	if got := mb.Dropped(); got != 7 {
		t.Errorf("Dropped = %d, want 7", got)
	}
	if got := mb.UserMessageCount(); got != 3 {
		t.Errorf("UserMessageCount = %d, want 3", got)
	}
	// A full user queue never holds up system messages, and they go first.
	stop := &actor.Stop{}
	for range 100 {
		mb.PostSystemMessage(stop)
	}
	if len(d.work) != 1 {
		t.Fatalf("%d runs scheduled, want 1 while one is pending", len(d.work))
	}
	d.runAll()
	want := []any{}
	for range 100 {
		want = append(want, stop)
	}
	want = append(want, 0, 1, 2)
	if !slices.Equal(inv.got, want) {
		t.Fatalf("invoked %v, want 100 stops then 0 1 2", inv.got)
	}

	// Suspended (an actor restarting): user messages wait, system
	// messages do not.
	inv.got = nil
	mb.PostSystemMessage(&actor.SuspendMailbox{})
	mb.PostUserMessage("held")
	mb.PostSystemMessage(stop)
	d.runAll()
	if !slices.Equal(inv.got, []any{stop}) {
		t.Fatalf("while suspended invoked %v, want only the stop", inv.got)
	}
	mb.PostSystemMessage(&actor.ResumeMailbox{})
	d.runAll()
	if !slices.Equal(inv.got, []any{stop, "held"}) {
		t.Fatalf("after resume invoked %v, want the held message", inv.got)
	}
}
