package actors

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
	mu         sync.Mutex
	sys, user  inlineQueue
	status     atomic.Int32 // idle or running
	suspended  atomic.Bool
	userCount  atomic.Int32
	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
}

var _ actor.Mailbox = (*smallMailbox)(nil)

// Scheduler states of a smallMailbox.
const (
	mailboxIdle int32 = iota
	mailboxRunning
)

func newSmallMailbox() actor.Mailbox { return &smallMailbox{} }

// inlineQueue is a FIFO whose first two items live in the struct.
type inlineQueue struct {
	items []any
	buf   [2]any
}

func (q *inlineQueue) push(v any) {
	if q.items == nil {
		q.items = q.buf[:0]
	}
	q.items = append(q.items, v)
}

func (q *inlineQueue) pop() any {
	if len(q.items) == 0 {
		return nil
	}
	v := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	if len(q.items) == 0 {
		q.items = q.buf[:0] // start over at the inline slots
	}
	return v
}

// PostUserMessage queues a user message. Message batches are not
// unpacked: nothing sends an invocation one.
func (m *smallMailbox) PostUserMessage(msg any) {
	m.mu.Lock()
	m.user.push(msg)
	m.mu.Unlock()
	m.userCount.Add(1)
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
func (m *smallMailbox) UserMessageCount() int { return int(m.userCount.Load()) }

func (m *smallMailbox) schedule() {
	if m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
		m.dispatcher.Schedule(m.process)
	}
}

// pending reports whether there is something run would process.
func (m *smallMailbox) pending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sys.items) > 0 || (!m.suspended.Load() && len(m.user.items) > 0)
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
		return msg, true
	}
	if m.suspended.Load() {
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
			case *actor.SuspendMailbox:
				m.suspended.Store(true)
			case *actor.ResumeMailbox:
				m.suspended.Store(false)
			default:
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		m.userCount.Add(-1)
		m.invoker.InvokeUserMessage(msg)
	}
}
