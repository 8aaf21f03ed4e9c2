package sqliteevents_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/sqliteevents"
)

// serveMix returns n events as `svc serve` stores them under
// POST /agents/echo/run load: per request one agent_spawned and one
// agent_completed of a new trace (UUIDv7 ids, random span ids), with the
// payloads the invocation actor emits.
func serveMix(n int, start time.Time) []svc.RuntimeEvent {
	evs := make([]svc.RuntimeEvent, 0, n)
	for i := 0; len(evs) < n; i++ {
		trace, task := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
		span := trace[len(trace)-16:]
		at := start.Add(time.Duration(i) * 100 * time.Microsecond)
		env := svc.RuntimeEvent{AgentName: "echo", TaskID: task, TraceID: trace, SpanID: span}
		spawned, completed := env, env
		spawned.EventType, spawned.Timestamp = svc.EventAgentSpawned, at
		spawned.Payload = svc.Payload{"backend": "local", "trust_level": "medium"}
		completed.EventType, completed.Timestamp = svc.EventAgentCompleted, at.Add(50*time.Microsecond)
		completed.Payload = svc.Payload{"duration_ms": 0.042 + float64(i%7)/1000, "tokens_used": int64(i % 5),
			"backend": "local", "model": "test:echo"}
		evs = append(evs, spawned, completed)
	}
	return evs[:n]
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSQLiteWriteServeMix measures the SQLite store's write path at
// the event mix of `svc serve` under POST /agents/echo/run load (see
// serveMix), in batches of the store emitter's default size, with the
// default retention's row cap: events per second and the process's CPU
// time per stored event (getrusage, all threads: it depends less on the
// machine's load than the rate does). Each batch is new events (new
// traces), as under load, so the totals tables grow as they do there.
//
//	go test -run '^$' -bench SQLiteWriteServeMix -benchtime 400x ./eventstore/
func BenchmarkSQLiteWriteServeMix(b *testing.B) {
	s, err := sqliteevents.Open(filepath.Join(b.TempDir(), "events.db"), eventstore.Retention{MaxRows: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	start := time.Now()
	batches := make([][]svc.RuntimeEvent, b.N)
	for i := range batches {
		batches[i] = serveMix(eventstore.DefaultBatch, start.Add(time.Duration(i)*time.Second))
	}
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := 0; i < b.N; i++ {
		if err := s.Write(ctx, batches[i]); err != nil {
			b.Fatal(err)
		}
	}
	cpu := cpuTime(b) - cpu0
	b.StopTimer()
	events := float64(b.N * eventstore.DefaultBatch)
	b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Microseconds())/events, "cpu-µs/event")
	b.ReportMetric(0, "ns/op")
}
