package eventstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/memevents"
	"github.com/svc-dev/svc/eventstore/sqliteevents"
	"github.com/svc-dev/svc/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ev builds an event at a fixed time plus sec seconds.
func ev(name string, sec int, trace string, typ svc.EventType) svc.RuntimeEvent {
	return svc.RuntimeEvent{
		EventType: typ, Timestamp: time.Date(2026, 11, 21, 12, 0, sec, 0, time.UTC),
		AgentName: name, TraceID: trace, Payload: svc.Payload{"n": sec},
	}
}

// countingStore wraps a memory store and records the size of every Write.
// When block is set, Writes wait for it to close; when err is set, they
// fail with it.
type countingStore struct {
	*memevents.Store
	block chan struct{}
	err   error

	mu     sync.Mutex
	writes []int
}

func newCounting() *countingStore {
	return &countingStore{Store: memevents.New(eventstore.Retention{})}
}

func (c *countingStore) Write(ctx context.Context, evs []svc.RuntimeEvent) error {
	if c.block != nil {
		<-c.block
	}
	c.mu.Lock()
	c.writes = append(c.writes, len(evs))
	c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return c.Store.Write(ctx, evs)
}

func (c *countingStore) sizes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.writes...)
}

func emitN(e *eventstore.Emitter, n int) {
	for i := range n {
		e.Emit(ev("x", i, "t", svc.EventAgentSpawned))
	}
}

func TestEmitterContract(t *testing.T) {
	emittertest.Run(t, func(t *testing.T) svc.Emitter {
		s := memevents.New(eventstore.Retention{MaxRows: 1000})
		e := eventstore.NewEmitter(s, 0, 0)
		t.Cleanup(func() {
			_ = e.Close()
			_ = s.Close()
		})
		return e
	})
}

func TestEmitterBatches(t *testing.T) {
	s := newCounting()
	// A flush interval no test waits for: only full batches are written
	// until Close.
	e := eventstore.NewEmitter(s, 10, time.Hour)
	emitN(e, 25)
	testutil.Eventually(t, "two full batches", func() bool { return len(s.sizes()) == 2 })
	if got := s.sizes(); !reflect.DeepEqual(got, []int{10, 10}) {
		t.Fatalf("writes before Close: %v, want [10 10]", got)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.sizes(); !reflect.DeepEqual(got, []int{10, 10, 5}) {
		t.Fatalf("writes after Close: %v, want [10 10 5]", got)
	}
	if n := s.Len(); n != 25 || e.Dropped() != 0 {
		t.Fatalf("stored %d, dropped %d; want 25, 0", n, e.Dropped())
	}
}

// A partial batch is written once its first event has waited the flush
// interval, not before; synctest's clock makes that exact.
func TestEmitterFlushesPartialBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newCounting()
		e := eventstore.NewEmitter(s, 100, time.Second)
		defer e.Close()
		emitN(e, 3)
		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		if got := s.sizes(); len(got) != 0 {
			t.Fatalf("writes before the flush interval: %v", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := s.sizes(); !reflect.DeepEqual(got, []int{3}) {
			t.Fatalf("writes: %v, want [3]", got)
		}
	})
}

func TestEmitterCloseFlushesEverything(t *testing.T) {
	s := newCounting()
	e := eventstore.NewEmitter(s, 64, time.Hour)
	emitN(e, 1000)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != 1000 {
		t.Fatalf("stored %d events after Close, want 1000", n)
	}
	for _, n := range s.sizes() {
		if n > 64 {
			t.Fatalf("a write of %d events, batch is 64", n)
		}
	}
	e.Emit(ev("late", 0, "t", svc.EventAgentSpawned))
	if e.Dropped() != 1 || s.Len() != 1000 {
		t.Fatalf("emit after Close: dropped %d, stored %d; want 1, 1000", e.Dropped(), s.Len())
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestEmitterDropsWhenFull(t *testing.T) {
	const (
		queue = 16
		batch = 4
		n     = 100
	)
	s := newCounting()
	s.block = make(chan struct{})
	e := eventstore.NewEmitterQueue(s, batch, time.Hour, queue)
	// Emit returns at once although the store is stuck: at most the queue
	// and the batch being written are held, the rest is dropped.
	emitN(e, n)
	if min := int64(n - queue - batch); e.Dropped() < min {
		t.Fatalf("dropped %d with a stuck store, want at least %d", e.Dropped(), min)
	}
	close(s.block)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if stored := int64(s.Len()); stored+e.Dropped() != n {
		t.Fatalf("stored %d + dropped %d != %d emitted", stored, e.Dropped(), n)
	}
}

func TestEmitterWriteErrors(t *testing.T) {
	s := newCounting()
	s.err = errors.New("disk full")
	e := eventstore.NewEmitter(s, 4, time.Hour)
	emitN(e, 10)
	err := e.Close()
	if !errors.Is(err, s.err) {
		t.Fatalf("Close = %v, want the final flush's error", err)
	}
	if e.Dropped() != 10 {
		t.Fatalf("dropped %d, want the 10 events of the failed writes", e.Dropped())
	}
}

func TestEmitterIntoSQLite(t *testing.T) {
	s, err := sqliteevents.Open(filepath.Join(t.TempDir(), "events.db"), eventstore.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := eventstore.NewEmitter(s, 100, 10*time.Millisecond)
	for _, typ := range svc.EventTypes {
		e.Emit(emittertest.SampleEvent(typ))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events(context.Background(), eventstore.Query{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(svc.EventTypes) {
		t.Fatalf("stored %d events, want %d", len(got), len(svc.EventTypes))
	}
	for _, ev := range got {
		emittertest.CheckPayload(t, ev)
	}
}

// BenchmarkEmitterEmit measures the cost Emit adds to the runtime.
func BenchmarkEmitterEmit(b *testing.B) {
	s := memevents.New(eventstore.Retention{MaxRows: 10_000})
	defer s.Close()
	e := eventstore.NewEmitter(s, 0, 0)
	ev := emittertest.SampleEvent(svc.EventAgentCompleted)
	for b.Loop() {
		e.Emit(ev)
	}
	b.StopTimer()
	_ = e.Close()
}
