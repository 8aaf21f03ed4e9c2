// Package followers hands the deltas of submitted runs to the clients
// following them (GET /runs/{id}/stream) while the runs execute here.
//
// Deltas are live only: the run store keeps a run's events for replay, but
// not its streamed text, which would multiply the writes of every run by
// the tokens of its answers. So the run's event stream is the store's
// (history, then live) merged with this package's live feed of the run's
// deltas, which exists only on the node that executes the run, only while
// it does. A follower that cannot keep up loses deltas (counted by
// Dropped), never the run's stored events.
package followers

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
)

// Queue is how many deltas wait for a follower before the next are
// dropped.
const Queue = 256

// Hub is the live deltas of the submitted runs executing here. The zero
// Hub is ready to use.
type Hub struct {
	mu      sync.Mutex
	runs    map[string]*run
	dropped atomic.Int64
}

type run struct {
	h    *Hub
	id   string
	subs map[*sub]struct{}
	// listening is len(subs), read without the lock.
	listening atomic.Int32
}

type sub struct {
	ch     chan svc.RunEvent
	closed bool
}

// Open marks run id as executing here and returns the DeltaSink its
// invocations report to. It always listens: a follower usually comes just
// after the run started, when its first model call has already decided
// whether to stream, so a submitted run streams from the start (unless its
// agents say stream: false). Deltas nobody follows cost one atomic load
// here. Close ends it.
func (h *Hub) Open(id string) svc.DeltaSink {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.runs == nil {
		h.runs = make(map[string]*run)
	}
	r := &run{h: h, id: id, subs: make(map[*sub]struct{})}
	h.runs[id] = r
	return r
}

// Listening is true (see Open).
func (r *run) Listening() bool { return true }

// Delta hands d to the run's followers, dropping it for those whose queue
// is full.
func (r *run) Delta(d svc.Delta) {
	if r.listening.Load() == 0 {
		return
	}
	ev := svc.RunEvent{Type: svc.RunDelta, RunID: r.id, Agent: d.Agent, TaskID: d.TaskID, Text: d.Text, Timestamp: time.Now().UTC()}
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	for s := range r.subs {
		select {
		case s.ch <- ev:
		default:
			r.h.dropped.Add(1)
		}
	}
}

// Close ends run id's feed: its followers' channels close.
func (h *Hub) Close(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.runs[id]
	if !ok {
		return
	}
	delete(h.runs, id)
	for s := range r.subs {
		s.closed = true
		close(s.ch)
	}
	r.listening.Store(0)
}

// Follow returns the live deltas of run id and a func that stops them, or
// false when the run is not executing here.
func (h *Hub) Follow(id string) (<-chan svc.RunEvent, func(), bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.runs[id]
	if !ok {
		return nil, nil, false
	}
	s := &sub{ch: make(chan svc.RunEvent, Queue)}
	r.subs[s] = struct{}{}
	r.listening.Add(1)
	return s.ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !s.closed {
			s.closed = true
			delete(r.subs, s)
			r.listening.Add(-1)
			close(s.ch)
		}
	}, true
}

// Dropped counts the deltas followers lost for not keeping up.
func (h *Hub) Dropped() int64 { return h.dropped.Load() }
