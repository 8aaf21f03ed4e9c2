package lean

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc/internal/testutil"
)

// recorder is a MessageInvoker that records what it is given.
type recorder struct {
	mu        sync.Mutex
	got       []string
	escalated []any
	onUser    func(msg any)
}

func (r *recorder) InvokeSystemMessage(msg any) { r.add(fmt.Sprint("sys:", msg)) }
func (r *recorder) InvokeUserMessage(msg any) {
	r.add(fmt.Sprint("user:", msg))
	if r.onUser != nil {
		r.onUser(msg)
	}
}
func (r *recorder) EscalateFailure(reason, msg any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.escalated = append(r.escalated, reason)
}
func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
}
func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// heldDispatcher queues what it is asked to schedule until run.
type heldDispatcher struct {
	mu  sync.Mutex
	fns []func()
}

func (d *heldDispatcher) Schedule(fn func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fns = append(d.fns, fn)
}
func (d *heldDispatcher) Throughput() int { return 2 }
func (d *heldDispatcher) run() {
	for {
		d.mu.Lock()
		if len(d.fns) == 0 {
			d.mu.Unlock()
			return
		}
		fn := d.fns[0]
		d.fns = d.fns[1:]
		d.mu.Unlock()
		fn()
	}
}

// The invocations' mailbox delivers system messages before user ones,
// each kind in order, past its inline slots too, and schedules itself
// once for what arrives while it is scheduled.
func TestSmallMailboxOrder(t *testing.T) {
	r, d := &recorder{}, &heldDispatcher{}
	m := NewMailbox()
	m.RegisterHandlers(r, d)
	m.Start()
	for i := range 5 {
		m.PostUserMessage(i)
	}
	m.PostSystemMessage("a")
	m.PostSystemMessage("b")
	m.PostSystemMessage("c")
	if n := m.UserMessageCount(); n != 5 {
		t.Errorf("UserMessageCount = %d; want 5", n)
	}
	if len(d.fns) != 1 {
		t.Errorf("scheduled %d times; want once", len(d.fns))
	}
	d.run()
	want := []string{"sys:a", "sys:b", "sys:c", "user:0", "user:1", "user:2", "user:3", "user:4"}
	if got := r.seen(); !slices.Equal(got, want) {
		t.Errorf("got %v; want %v", got, want)
	}
	if n := m.UserMessageCount(); n != 0 {
		t.Errorf("UserMessageCount = %d after delivery; want 0", n)
	}
	// Empty, it starts over in its inline slots and keeps working.
	m.PostUserMessage("again")
	d.run()
	if got := r.seen(); got[len(got)-1] != "user:again" {
		t.Errorf("after draining: got %v", got)
	}
}

// A suspended mailbox (its actor restarting) holds user messages, keeps
// delivering system ones, and delivers the held ones once resumed; a
// panic in a handler escalates and the next messages are still delivered.
func TestSmallMailboxSuspendAndFailure(t *testing.T) {
	r, d := &recorder{}, &heldDispatcher{}
	r.onUser = func(msg any) {
		if msg == "boom" {
			panic("boom")
		}
	}
	m := NewMailbox()
	m.RegisterHandlers(r, d)
	m.PostSystemMessage(&actor.SuspendMailbox{})
	m.PostUserMessage("held")
	m.PostSystemMessage("restart")
	d.run()
	if got := r.seen(); !slices.Equal(got, []string{"sys:restart"}) {
		t.Fatalf("while suspended: got %v; want only the system message", got)
	}
	m.PostSystemMessage(&actor.ResumeMailbox{})
	d.run()
	m.PostUserMessage("boom")
	m.PostUserMessage("after")
	d.run()
	want := []string{"sys:restart", "user:held", "user:boom", "user:after"}
	if got := r.seen(); !slices.Equal(got, want) {
		t.Errorf("got %v; want %v", got, want)
	}
	if len(r.escalated) != 1 || r.escalated[0] != "boom" {
		t.Errorf("escalated %v; want [boom]", r.escalated)
	}
}

// Many senders at once: every message is delivered exactly once, with a
// real dispatcher.
func TestSmallMailboxConcurrentPosts(t *testing.T) {
	const senders, each = 8, 200
	r := &recorder{}
	m := NewMailbox()
	m.RegisterHandlers(r, actor.NewDefaultDispatcher(5))
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if i%50 == 0 {
					m.PostSystemMessage(fmt.Sprint(s, "/", i))
				}
				m.PostUserMessage(fmt.Sprint(s, "/", i))
			}
		}()
	}
	wg.Wait()
	testutil.Eventually(t, "every message delivered", func() bool {
		return len(r.seen()) == senders*each+senders*each/50
	})
	seen := map[string]int{}
	for _, s := range r.seen() {
		seen[s]++
	}
	for s, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times", s, n)
		}
	}
}

// The queue keeps order across its inline slots and its overflow, with
// pushes and pops interleaved, and counts what it holds.
func TestInlineQueueOrder(t *testing.T) {
	var q inlineQueue
	next, want := 0, 0
	for round := range 50 {
		for range round%5 + 1 {
			q.push(next)
			next++
		}
		for range round%3 + 1 {
			if v := q.pop(); v != nil {
				if v != want {
					t.Fatalf("round %d: popped %v, want %d", round, v, want)
				}
				want++
			}
		}
		if n := q.len(); n != next-want {
			t.Fatalf("round %d: len() = %d, want %d", round, n, next-want)
		}
	}
	for v := q.pop(); v != nil; v = q.pop() {
		if v != want {
			t.Fatalf("popped %v, want %d", v, want)
		}
		want++
	}
	if want != next || q.more != nil {
		t.Fatalf("popped %d of %d; overflow left: %v", want, next, q.more != nil)
	}
}
