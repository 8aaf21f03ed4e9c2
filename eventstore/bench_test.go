package eventstore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/eventstore"
)

// BenchmarkSQLiteWrite measures events per second into the SQLite store in
// batches of the emitter's default size, as the store emitter writes them.
func BenchmarkSQLiteWrite(b *testing.B) {
	s, err := eventstore.OpenSQLite(filepath.Join(b.TempDir(), "events.db"), eventstore.Retention{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	batch := make([]svc.RuntimeEvent, eventstore.DefaultBatch)
	for i := range batch {
		batch[i] = emittertest.SampleEvent(svc.EventTypes[i%len(svc.EventTypes)])
		batch[i].Timestamp = time.Now()
	}
	ctx := context.Background()
	events := 0
	for b.Loop() {
		if err := s.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
		events += len(batch)
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkEmitterEmit measures the cost Emit adds to the runtime.
func BenchmarkEmitterEmit(b *testing.B) {
	s := eventstore.NewMemory(eventstore.Retention{MaxRows: 10_000})
	defer s.Close()
	e := eventstore.NewEmitter(s, 0, 0)
	ev := emittertest.SampleEvent(svc.EventAgentCompleted)
	for b.Loop() {
		e.Emit(ev)
	}
	b.StopTimer()
	_ = e.Close()
}
