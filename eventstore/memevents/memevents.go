// Package memevents is the event store in process memory: an
// eventstore.Store for tests and single-process deployments that need
// rollups but no history across restarts.
package memevents

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/internal/evcodec"
	"github.com/svc-dev/svc/eventstore/internal/rollup"
)

// Store is an eventstore.Store in process memory.
//
// Events are kept sorted by timestamp, so a query walks back from the
// newest and stops at its limit, and retention trims from the oldest end.
// Retention is applied on every Write and read: the row cap bounds memory
// at once, and the age limit needs no goroutine of its own.
type Store struct {
	r   eventstore.Retention
	now func() time.Time

	mu     sync.Mutex
	evs    []memEvent // ascending by (timestamp, seq)
	seq    uint64
	closed bool
}

type memEvent struct {
	ev  svc.RuntimeEvent
	us  int64        // ev.Timestamp in Unix microseconds, for cheap comparisons
	seq uint64       // write order, breaks timestamp ties
	f   rollup.Facts // what the rollups read, extracted once
}

var _ eventstore.Store = (*Store)(nil)

// New returns an empty store with retention r.
func New(r eventstore.Retention) *Store {
	return &Store{r: r, now: time.Now}
}

// Write stores evs; see eventstore.Store.
func (m *Store) Write(ctx context.Context, evs []svc.RuntimeEvent) error {
	if err := ctx.Err(); err != nil {
		return svc.Wrap(svc.KindOf(err), err, "eventstore: memory write")
	}
	// Normalising (a JSON round trip) is the expensive part; do it before
	// taking the lock.
	batch := make([]memEvent, len(evs))
	for i, ev := range evs {
		ev = evcodec.Normalize(ev)
		batch[i] = memEvent{ev: ev, us: ev.Timestamp.UnixMicro(), f: rollup.FactsOf(&ev)}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return rollup.ErrClosed("memory")
	}
	for _, e := range batch {
		m.seq++
		e.seq = m.seq
		// Events mostly arrive in time order: appending is the common case,
		// an out-of-order event is inserted in place.
		if n := len(m.evs); n == 0 || m.evs[n-1].us <= e.us {
			m.evs = append(m.evs, e)
			continue
		}
		i, _ := slices.BinarySearchFunc(m.evs, e.us, func(x memEvent, us int64) int {
			if x.us <= us {
				return -1 // insert after every event with the same timestamp
			}
			return 1
		})
		m.evs = slices.Insert(m.evs, i, e)
	}
	m.pruneLocked()
	return nil
}

// pruneLocked applies the retention.
func (m *Store) pruneLocked() {
	drop := 0
	if m.r.MaxRows > 0 && len(m.evs) > m.r.MaxRows {
		drop = len(m.evs) - m.r.MaxRows
	}
	if m.r.MaxAge > 0 {
		cutoff := m.now().Add(-m.r.MaxAge).UnixMicro()
		old, _ := slices.BinarySearchFunc(m.evs, cutoff, func(x memEvent, us int64) int {
			if x.us < us {
				return -1
			}
			return 1
		})
		drop = max(drop, old)
	}
	if drop > 0 {
		// Copy rather than reslice so the dropped events' memory is freed.
		m.evs = append(m.evs[:0:0], m.evs[drop:]...)
	}
}

// Query returns matching events, newest first; see eventstore.Store.
func (m *Store) Query(ctx context.Context, q svc.EventQuery) ([]svc.RuntimeEvent, error) {
	return m.Events(ctx, q)
}

// Events returns matching events, newest first; see svc.EventReader.
func (m *Store) Events(ctx context.Context, q svc.EventQuery) ([]svc.RuntimeEvent, error) {
	q, err := rollup.CheckQuery(q)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, svc.Wrap(svc.KindOf(err), err, "eventstore: memory query")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, rollup.ErrClosed("memory")
	}
	m.pruneLocked()
	end := len(m.evs)
	if !q.Until.IsZero() {
		until := q.Until.UnixMicro()
		end, _ = slices.BinarySearchFunc(m.evs, until, func(x memEvent, us int64) int {
			if x.us < us {
				return -1
			}
			return 1
		})
	}
	since := int64(0)
	if !q.Since.IsZero() {
		since = q.Since.UnixMicro()
	}
	out := []svc.RuntimeEvent{}
	for i := end - 1; i >= 0 && len(out) < q.Limit; i-- {
		e := m.evs[i]
		if !q.Since.IsZero() && e.us < since {
			break
		}
		if (q.TraceID != "" && e.ev.TraceID != q.TraceID) || (q.EventType != "" && e.ev.EventType != q.EventType) {
			continue
		}
		out = append(out, e.ev)
	}
	return out, nil
}

// Len returns the number of events held.
func (m *Store) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.evs)
}

// Close drops every event; later calls fail.
func (m *Store) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.evs = nil
	return nil
}
