package lean

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// smallMailbox is the mailbox of invocation actors: an actor.Mailbox with
// the semantics of protoactor's default one (system messages first,
// suspended while the actor restarts, a panic escalated to the
// supervisor) in one allocation. An invocation receives a handful of
// messages in its life (started, its state, the attempt's outcome, stop),
// so each queue keeps its first two messages inline and a mutex guards
// both. protoactor's unbounded mailboxes allocate a queue per kind and a
// node per message (lock-free) or a ten-slot ring (the default): about ten
// allocations, or 400 bytes, per invocation, which a million parked runs
// and a gather's throughput both pay for.
type smallMailbox struct {
	mu        sync.Mutex
	sys, user inlineQueue
	status    atomic.Int32 // idle or running
	// suspended (the actor restarts) is guarded by mu, like the queues.
	suspended  bool
	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
}

// The struct is 128 bytes, a size class of its own: a million parked runs
// hold a million mailboxes. It was 168 (176 with its size class) with a
// slice header per queue, an atomic flag and a counter of user messages.

var _ actor.Mailbox = (*smallMailbox)(nil)

// Scheduler states of a smallMailbox.
const (
	mailboxIdle int32 = iota
	mailboxRunning
)

func NewMailbox() actor.Mailbox { return &smallMailbox{} }

// inlineQueue is a FIFO whose first two items live in the struct: buf[0]
// is the oldest, and more (allocated only past two) holds the rest, in
// order, after buf's.
type inlineQueue struct {
	buf  [2]any
	more *[]any
}

// len is the number of items queued.
func (q *inlineQueue) len() int {
	n := 0
	if q.buf[0] != nil {
		n++
		if q.buf[1] != nil {
			n++
		}
	}
	if q.more != nil {
		n += len(*q.more)
	}
	return n
}

// push queues v, which must not be nil (nil marks an empty slot).
func (q *inlineQueue) push(v any) {
	switch {
	case q.buf[0] == nil:
		q.buf[0] = v
	case q.buf[1] == nil && (q.more == nil || len(*q.more) == 0):
		q.buf[1] = v
	default:
		if q.more == nil {
			q.more = new([]any)
		}
		*q.more = append(*q.more, v)
	}
}

// pop takes the oldest item; nil when there is none.
func (q *inlineQueue) pop() any {
	v := q.buf[0]
	if v == nil {
		return nil
	}
	q.buf[0], q.buf[1] = q.buf[1], nil
	if q.more != nil && len(*q.more) > 0 {
		// buf keeps the two oldest: the next one moves in from more.
		m := *q.more
		next := m[0]
		m[0] = nil
		*q.more = m[1:]
		if len(*q.more) == 0 {
			q.more = nil
		}
		if q.buf[0] == nil {
			q.buf[0] = next
		} else {
			q.buf[1] = next
		}
	}
	return v
}

// PostUserMessage queues a user message. Message batches are not
// unpacked: nothing sends an invocation one.
func (m *smallMailbox) PostUserMessage(msg any) {
	m.mu.Lock()
	m.user.push(msg)
	m.mu.Unlock()
	m.schedule()
}

// PostSystemMessage queues a system message.
func (m *smallMailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.sys.push(msg)
	m.mu.Unlock()
	m.schedule()
}

// RegisterHandlers is called by the actor system before Start.
func (m *smallMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker = invoker
	m.dispatcher = dispatcher
}

// Start has nothing to start: processing is scheduled by the posts.
func (m *smallMailbox) Start() {}

// UserMessageCount is the number of user messages waiting.
func (m *smallMailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.user.len()
}

func (m *smallMailbox) schedule() {
	if m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
		m.dispatcher.Schedule(m.process)
	}
}

// pending reports whether there is something run would process.
func (m *smallMailbox) pending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sys.buf[0] != nil || (!m.suspended && m.user.buf[0] != nil)
}

// process runs the queued messages, then goes idle. A message posted
// between the end of run and the idle store finds the mailbox running and
// does not schedule it, so process looks again after going idle.
func (m *smallMailbox) process() {
	for {
		m.run()
		m.status.Store(mailboxIdle)
		if !m.pending() || !m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
			return
		}
	}
}

// next pops the next message to process: a system message if any, else a
// user message unless the mailbox is suspended.
func (m *smallMailbox) next() (msg any, system bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if msg = m.sys.pop(); msg != nil {
		switch msg.(type) {
		case *actor.SuspendMailbox:
			m.suspended = true
		case *actor.ResumeMailbox:
			m.suspended = false
		}
		return msg, true
	}
	if m.suspended {
		return nil, false
	}
	return m.user.pop(), false
}

// run invokes system messages first, then user messages, until both
// queues are empty or the mailbox is suspended (the actor is restarting).
// A panic escalates to the actor's supervisor, as protoactor's mailbox
// does.
func (m *smallMailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	throughput := m.dispatcher.Throughput()
	for i := 1; ; i++ {
		if throughput > 0 && i > throughput {
			i = 1
			runtime.Gosched()
		}
		var system bool
		if msg, system = m.next(); msg == nil {
			return
		}
		if system {
			switch msg.(type) {
			case *actor.SuspendMailbox, *actor.ResumeMailbox: // next did it
			default:
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		m.invoker.InvokeUserMessage(msg)
	}
}
