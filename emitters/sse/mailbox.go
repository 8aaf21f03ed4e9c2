package sse

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// Scheduler states of a dropMailbox.
const (
	idle int32 = iota
	running
)

// defaultThroughput is how many messages a mailbox processes before it
// yields the processor, when the dispatcher does not say.
const defaultThroughput = 300

// dropMailbox is an actor.Mailbox whose user queue is bounded: a user
// message that finds the queue full is dropped and counted, so the poster
// never waits. System messages (stop, watch, suspend, resume) are never
// dropped: losing a Stop would leak the actor. protoactor's own
// BoundedDropping mailbox cannot be used: once it drops, its ring buffer's
// Put spins forever.
//
// The user queue is a ring that grows as messages wait, up to its bound,
// and is let go once it has drained: a channel of the bound, made up
// front, cost every subscriber 16 KiB whether events waited for it or not
// (32 MiB of the live heap with 2,000 subscribers, issue 25).
type dropMailbox struct {
	size   int // the bound of the user queue
	userMu sync.Mutex
	user   []any // the ring; len is its capacity, 0 until a message waits
	head   int   // the index of the oldest message in user
	n      int   // the messages waiting

	sysMu sync.Mutex
	sys   []any

	status     atomic.Int32
	suspended  atomic.Bool
	dropped    atomic.Uint64
	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
}

var _ actor.Mailbox = (*dropMailbox)(nil)

// minRing is the smallest ring a user queue allocates, and the largest it
// keeps once drained.
const minRing = 16

func newDropMailbox(size int) *dropMailbox {
	return &dropMailbox{size: size}
}

// PostUserMessage queues msg, or drops it when the queue is full.
func (m *dropMailbox) PostUserMessage(msg any) { m.offer(msg) }

// offer queues msg and reports whether it was queued.
func (m *dropMailbox) offer(msg any) bool {
	m.userMu.Lock()
	if m.n == m.size {
		m.userMu.Unlock()
		m.dropped.Add(1)
		return false
	}
	if m.n == len(m.user) {
		// Full ring, below the bound: grow it, oldest first.
		grown := make([]any, min(max(2*len(m.user), minRing), m.size))
		for i := range m.n {
			grown[i] = m.user[(m.head+i)%len(m.user)]
		}
		m.user, m.head = grown, 0
	}
	m.user[(m.head+m.n)%len(m.user)] = msg
	m.n++
	m.userMu.Unlock()
	m.schedule()
	return true
}

// popUser takes the oldest user message; false when none waits. A ring
// that drains lets go of its array if it had grown past minRing, so that a
// burst does not pin it.
func (m *dropMailbox) popUser() (any, bool) {
	m.userMu.Lock()
	defer m.userMu.Unlock()
	if m.n == 0 {
		return nil, false
	}
	msg := m.user[m.head]
	m.user[m.head] = nil
	m.head = (m.head + 1) % len(m.user)
	m.n--
	if m.n == 0 {
		m.head = 0
		if len(m.user) > minRing {
			m.user = nil
		}
	}
	return msg, true
}

// userCount is the number of user messages waiting.
func (m *dropMailbox) userCount() int {
	m.userMu.Lock()
	defer m.userMu.Unlock()
	return m.n
}

// PostSystemMessage queues msg; system messages are never dropped.
func (m *dropMailbox) PostSystemMessage(msg any) {
	m.sysMu.Lock()
	m.sys = append(m.sys, msg)
	m.sysMu.Unlock()
	m.schedule()
}

// RegisterHandlers is called by the actor system before Start.
func (m *dropMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker = invoker
	m.dispatcher = dispatcher
}

// Start has nothing to start: processing is scheduled by the posts.
func (m *dropMailbox) Start() {}

// UserMessageCount is the number of user messages waiting.
func (m *dropMailbox) UserMessageCount() int { return m.userCount() }

// Dropped is the number of user messages dropped because the queue was
// full.
func (m *dropMailbox) Dropped() uint64 { return m.dropped.Load() }

func (m *dropMailbox) schedule() {
	if m.status.CompareAndSwap(idle, running) {
		m.dispatcher.Schedule(m.process)
	}
}

func (m *dropMailbox) popSystem() any {
	m.sysMu.Lock()
	defer m.sysMu.Unlock()
	if len(m.sys) == 0 {
		return nil
	}
	msg := m.sys[0]
	m.sys[0] = nil
	m.sys = m.sys[1:]
	return msg
}

func (m *dropMailbox) hasSystem() bool {
	m.sysMu.Lock()
	defer m.sysMu.Unlock()
	return len(m.sys) > 0
}

// process runs the queued messages, then goes idle. A message posted
// between the end of run and the idle store finds the mailbox running and
// does not schedule it, so process looks again after going idle.
func (m *dropMailbox) process() {
	for {
		m.run()
		m.status.Store(idle)
		more := m.hasSystem() || (!m.suspended.Load() && m.userCount() > 0)
		if !more || !m.status.CompareAndSwap(idle, running) {
			return
		}
	}
}

// run invokes system messages first, then user messages, until both
// queues are empty or the mailbox is suspended (the actor is restarting).
// A panic escalates to the actor's supervisor, as protoactor's mailbox
// does.
func (m *dropMailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	throughput := m.dispatcher.Throughput()
	if throughput <= 0 {
		throughput = defaultThroughput
	}
	for i := 1; ; i++ {
		if i > throughput {
			i = 1
			runtime.Gosched()
		}
		if msg = m.popSystem(); msg != nil {
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
		if m.suspended.Load() {
			return
		}
		var ok bool
		if msg, ok = m.popUser(); !ok {
			return
		}
		m.invoker.InvokeUserMessage(msg)
	}
}
