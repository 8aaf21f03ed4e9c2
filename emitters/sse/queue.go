package sse

import (
	"sync"
	"sync/atomic"

	"github.com/svc-dev/svc"
)

// eventQueue holds the events waiting for the reader of a SubscribeEncoded
// subscription, bounded in events and in the bytes of their JSON. It
// replaces a channel of the bound: that was made whole up front (8 KiB a
// subscriber at the default bound) and, for the byte bound, needed a list
// of the sizes of the events in it beside; 2,000 stalled subscribers held
// 30 MB of both (issue 25). The ring grows as events wait and is let go
// once drained, and the reader takes an event's size off the total as it
// takes the event.
type eventQueue struct {
	max, maxBytes int

	mu     sync.Mutex
	ring   []*svc.EncodedEvent // len is its capacity; nil until an event waits
	head   int
	n      int
	bytes  int // of the JSON of the events waiting
	ended  bool
	notify func()

	// count is n, and over is set when an event found no room for its
	// bytes until the reader takes one: read without the lock by the
	// fan-out's full check.
	count atomic.Int32
	over  atomic.Bool
}

func newEventQueue(max, maxBytes int) *eventQueue {
	return &eventQueue{max: max, maxBytes: maxBytes}
}

// full reports whether push would refuse an event now, as far as a look
// without the lock tells: racy, which the fan-out allows (see fanOut).
func (q *eventQueue) full() bool {
	return int(q.count.Load()) >= q.max || q.over.Load()
}

// push queues ev, whose JSON is size bytes, and wakes the reader if
// nothing waited; false when it does not fit (or the queue has ended).
// One event larger than the byte bound still fits an empty queue.
func (q *eventQueue) push(ev *svc.EncodedEvent, size int) bool {
	q.mu.Lock()
	if q.ended || q.n == q.max {
		q.mu.Unlock()
		return false
	}
	if q.bytes > 0 && q.bytes+size > q.maxBytes {
		q.over.Store(true)
		q.mu.Unlock()
		return false
	}
	if q.n == len(q.ring) {
		grown := make([]*svc.EncodedEvent, min(max(2*len(q.ring), minRing), q.max))
		for i := range q.n {
			grown[i] = q.ring[(q.head+i)%len(q.ring)]
		}
		q.ring, q.head = grown, 0
	}
	q.ring[(q.head+q.n)%len(q.ring)] = ev
	q.n++
	q.bytes += size
	q.count.Store(int32(q.n))
	wake := q.n == 1
	f := q.notify
	q.mu.Unlock()
	if wake && f != nil {
		f()
	}
	return true
}

// next takes the oldest event; nil when none waits, with ended true once
// the queue has ended.
func (q *eventQueue) next() (*svc.EncodedEvent, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return nil, q.ended
	}
	ev := q.ring[q.head]
	q.ring[q.head] = nil
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	// The encoding is made (once) before an event is pushed: this is
	// the size push added.
	data, _ := ev.JSON()
	q.bytes -= len(data)
	if q.n == 0 {
		q.head, q.bytes = 0, 0
		if len(q.ring) > minRing {
			q.ring = nil // a burst does not pin its array
		}
	}
	q.count.Store(int32(q.n))
	q.over.Store(false)
	return ev, false
}

// end ends the queue: later pushes are refused, and the reader, woken,
// takes what waits and then sees it ended.
func (q *eventQueue) end() {
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		return
	}
	q.ended = true
	f := q.notify
	q.mu.Unlock()
	if f != nil {
		f()
	}
}

// setNotify sets the reader's wake-up, and calls it at once when events
// wait or the queue has ended.
func (q *eventQueue) setNotify(f func()) {
	q.mu.Lock()
	q.notify = f
	pending := q.n > 0 || q.ended
	q.mu.Unlock()
	if pending && f != nil {
		f()
	}
}
