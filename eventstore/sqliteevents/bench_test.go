package sqliteevents_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters/emittertest"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/sqliteevents"
)

// BenchmarkSQLiteWrite measures events per second into the SQLite store in
// batches of the emitter's default size, as the store emitter writes them,
// beside the baseline of SQLite alone: the same rows (envelope and JSON
// payload) inserted into a table with no index, no facts and no totals.
func BenchmarkSQLiteWrite(b *testing.B) {
	batch := make([]svc.RuntimeEvent, eventstore.DefaultBatch)
	for i := range batch {
		batch[i] = emittertest.SampleEvent(svc.EventTypes[i%len(svc.EventTypes)])
		batch[i].Timestamp = time.Now()
	}
	ctx := context.Background()
	b.Run("store", func(b *testing.B) {
		s, err := sqliteevents.Open(filepath.Join(b.TempDir(), "events.db"), eventstore.Retention{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		events := 0
		for b.Loop() {
			if err := s.Write(ctx, batch); err != nil {
				b.Fatal(err)
			}
			events += len(batch)
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("baseline-bare-insert", func(b *testing.B) {
		db, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "bare.db")+
			"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		if _, err := db.Exec(`CREATE TABLE events (ts INTEGER, event_type TEXT, agent TEXT, task_id TEXT,
			trace_id TEXT, parent_trace_id TEXT, payload TEXT)`); err != nil {
			b.Fatal(err)
		}
		events := 0
		for b.Loop() {
			tx, err := db.Begin()
			if err != nil {
				b.Fatal(err)
			}
			stmt, err := tx.Prepare(`INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)`)
			if err != nil {
				b.Fatal(err)
			}
			for _, ev := range batch {
				p, err := json.Marshal(ev.Payload)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := stmt.Exec(ev.Timestamp.UnixMicro(), string(ev.EventType), ev.AgentName, ev.TaskID,
					ev.TraceID, ev.ParentTraceID, p); err != nil {
					b.Fatal(err)
				}
			}
			stmt.Close()
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
			events += len(batch)
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	})
}

// benchEvents is the size of the store the rollup benchmarks read.
const benchEvents = 1_000_000

var (
	benchOnce sync.Once
	benchPath string
	benchErr  error
	benchDir  string // removed by TestMain
)

// benchDB builds, once per run, a SQLite file of benchEvents events shaped
// like group runs (or reuses the file EVENTSTORE_BENCH_DB names, building
// it there the first time: handy when iterating, but remove it when the
// schema changes): per trace a group_started, three invocations of
// (agent_spawned, two tool calls started and ended, agent_completed or
// agent_failed) and a group_completed; 20 events, so 50,000 traces,
// 150,000 invocations and 300,000 tool calls; 12 agents, 8 tools, 4 models
// (and some completions naming none), 5 % failures.
func benchDB(b *testing.B) string {
	b.Helper()
	benchOnce.Do(func() {
		start := time.Now()
		if benchPath = os.Getenv("EVENTSTORE_BENCH_DB"); benchPath != "" {
			if _, err := os.Stat(benchPath); err == nil {
				return // kept from an earlier run
			}
		} else {
			if benchDir, benchErr = os.MkdirTemp("", "eventstore-bench-"); benchErr != nil {
				return
			}
			benchPath = filepath.Join(benchDir, "events.db")
		}
		var s *sqliteevents.Store
		if s, benchErr = sqliteevents.Open(benchPath, eventstore.Retention{}); benchErr != nil {
			return
		}
		defer s.Close()
		rng := rand.New(rand.NewPCG(1, 2))
		at := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
		batch := make([]svc.RuntimeEvent, 0, 20_000)
		emit := func(t svc.EventType, agent, task, trace string, p svc.Payload) {
			at = at.Add(time.Millisecond)
			batch = append(batch, svc.RuntimeEvent{EventType: t, Timestamp: at, AgentName: agent,
				TaskID: task, TraceID: trace, Payload: p})
		}
		models := []string{"openai:gpt-4o-mini", "anthropic:claude-haiku-4-5", "test:echo", "openai:gpt-4o", ""}
		for n := 0; n < benchEvents/20; n++ {
			trace := fmt.Sprintf("trace-%06d", n)
			emit(svc.EventGroupStarted, "support", "", trace, svc.Payload{"group_name": "support", "node_count": 3})
			for i := range 3 {
				agent, task := fmt.Sprintf("agent-%02d", rng.IntN(12)), fmt.Sprintf("%s/%d", trace, i)
				emit(svc.EventAgentSpawned, agent, task, trace, svc.Payload{"backend": "local", "trust_level": "medium"})
				for range 2 {
					tool := fmt.Sprintf("tool-%d", rng.IntN(8))
					emit(svc.EventToolCallStarted, agent, task, trace, svc.Payload{"tool_name": tool, "trust_level": "medium"})
					ms := 1 + rng.ExpFloat64()*40
					if rng.IntN(20) == 0 {
						emit(svc.EventToolCallFailed, agent, task, trace, svc.Payload{"tool_name": tool, "error": "ToolExecutionError: boom", "duration_ms": ms})
					} else {
						emit(svc.EventToolCallCompleted, agent, task, trace, svc.Payload{"tool_name": tool, "duration_ms": ms, "tokens_used": 0})
					}
				}
				if rng.IntN(20) == 0 {
					emit(svc.EventAgentFailed, agent, task, trace, svc.Payload{"duration_ms": 900.0, "error": "ModelError: provider unavailable", "backend": "local"})
				} else {
					emit(svc.EventAgentCompleted, agent, task, trace, svc.Payload{"duration_ms": 900.0,
						"tokens_used": 50 + rng.IntN(2000), "backend": "local", "model": models[rng.IntN(len(models))]})
				}
			}
			emit(svc.EventGroupCompleted, "support", "", trace, svc.Payload{"group_name": "support", "duration_ms": 3000.0})
			if len(batch) >= cap(batch)-20 {
				if benchErr = s.Write(context.Background(), batch); benchErr != nil {
					return
				}
				batch = batch[:0]
			}
		}
		if benchErr = s.Write(context.Background(), batch); benchErr != nil {
			return
		}
		fmt.Fprintf(os.Stderr, "built %d events in %s\n", benchEvents, time.Since(start).Round(time.Millisecond))
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchPath
}

// reportMS reports the mean time per op in milliseconds.
func reportMS(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}

// benchBaselines are plain queries over the same file, in the same run:
// "count" is SELECT COUNT(*) (a walk of the smallest index), "json" what a
// rollup costs without fact columns (json_extract from every payload of
// the event types it reads).
func benchBaselines(b *testing.B, path, naive string) {
	b.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=query_only(1)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	for _, q := range [][2]string{{"baseline-count", `SELECT COUNT(*) FROM events`}, {"baseline-json", naive}} {
		b.Run(q[0], func(b *testing.B) {
			for b.Loop() {
				rows, err := db.Query(q[1])
				if err != nil {
					b.Fatal(err)
				}
				for rows.Next() {
				}
				if err := rows.Err(); err != nil {
					b.Fatal(err)
				}
				rows.Close()
			}
			reportMS(b)
		})
	}
}

func openBench(b *testing.B) *sqliteevents.Store {
	b.Helper()
	s, err := sqliteevents.Open(benchDB(b), eventstore.Retention{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkUsage measures Usage over benchEvents SQLite events, for each
// group_by, beside the baselines.
func BenchmarkUsage(b *testing.B) {
	s := openBench(b)
	ctx := context.Background()
	for _, g := range []string{svc.GroupByNone, svc.GroupByAgent, svc.GroupByTrace, svc.GroupByModel} {
		b.Run(g, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Usage(ctx, g); err != nil {
					b.Fatal(err)
				}
			}
			reportMS(b)
		})
	}
	benchBaselines(b, benchDB(b), `SELECT agent, COUNT(*), SUM(json_extract(payload, '$.tokens_used'))
		FROM events WHERE event_type = 'agent_completed' GROUP BY agent`)
}

// BenchmarkToolUsage measures ToolUsage over benchEvents SQLite events,
// for each group_by, beside the baselines.
func BenchmarkToolUsage(b *testing.B) {
	s := openBench(b)
	ctx := context.Background()
	for _, g := range []string{svc.GroupByTool, svc.GroupByAgentTool} {
		b.Run(g, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.ToolUsage(ctx, g); err != nil {
					b.Fatal(err)
				}
			}
			reportMS(b)
		})
	}
	benchBaselines(b, benchDB(b), `SELECT json_extract(payload, '$.tool_name') AS tool, COUNT(*),
		AVG(json_extract(payload, '$.duration_ms')) FROM events
		WHERE event_type IN ('tool_call_completed', 'tool_call_failed') GROUP BY tool`)
}

// BenchmarkRuntimeStats and BenchmarkTree measure the other rollups on the
// same file (no target; for the record).
func BenchmarkRuntimeStats(b *testing.B) {
	s := openBench(b)
	now := time.Date(2026, 11, 21, 0, 16, 40, 0, time.UTC) // the last event: the burn window holds 5 minutes of them
	for b.Loop() {
		if _, err := s.RuntimeStats(context.Background(), now); err != nil {
			b.Fatal(err)
		}
	}
	reportMS(b)
}

func BenchmarkTree(b *testing.B) {
	s := openBench(b)
	for b.Loop() {
		if _, err := s.Tree(context.Background(), "trace-025000"); err != nil {
			b.Fatal(err)
		}
	}
	reportMS(b)
}

// benchWindows are the windows BenchmarkWindows reads of the benchmark
// file (1,000,000 events a millisecond apart, from 00:00:00 to 00:16:40):
// the last hour (the whole file: every minute summed from the per-minute
// totals), the last 5 minutes (300,000 events), and 2 minutes with a
// partial minute at each edge (120,000 events).
var benchWindows = []struct {
	name string
	w    svc.Window
}{
	{"last-1h", svc.Window{Since: time.Date(2026, 11, 20, 23, 16, 40, 0, time.UTC)}},
	{"last-5m", svc.Window{Since: time.Date(2026, 11, 21, 0, 11, 40, 0, time.UTC)}},
	{"2m-edges", svc.Window{Since: time.Date(2026, 11, 21, 0, 4, 0, 500e6, time.UTC), Until: time.Date(2026, 11, 21, 0, 6, 0, 250e6, time.UTC)}},
}

// BenchmarkWindows measures the windowed rollups (since/until) over
// benchEvents SQLite events; the unwindowed ones (BenchmarkUsage,
// BenchmarkToolUsage, BenchmarkRuntimeStats) are their baselines.
func BenchmarkWindows(b *testing.B) {
	s := openBench(b)
	ctx := context.Background()
	now := time.Date(2026, 11, 21, 0, 16, 40, 0, time.UTC)
	for _, w := range benchWindows {
		for _, g := range []string{svc.GroupByNone, svc.GroupByAgent, svc.GroupByModel, svc.GroupByTrace} {
			b.Run(w.name+"/usage-"+g, func(b *testing.B) {
				for b.Loop() {
					if _, err := s.UsageIn(ctx, g, w.w); err != nil {
						b.Fatal(err)
					}
				}
				reportMS(b)
			})
		}
		for _, g := range []string{svc.GroupByTool, svc.GroupByAgentTool} {
			b.Run(w.name+"/tools-"+g, func(b *testing.B) {
				for b.Loop() {
					if _, err := s.ToolUsageIn(ctx, g, w.w); err != nil {
						b.Fatal(err)
					}
				}
				reportMS(b)
			})
		}
		b.Run(w.name+"/stats", func(b *testing.B) {
			for b.Loop() {
				if _, err := s.RuntimeStatsIn(ctx, now, w.w); err != nil {
					b.Fatal(err)
				}
			}
			reportMS(b)
		})
	}
}

// BenchmarkRunHistory measures a page of the run history (50 rows, newest
// first, with its total) over the benchmark file's 50,000 runs: all of
// them, by status, by target, and the page after a cursor half way.
func BenchmarkRunHistory(b *testing.B) {
	s := openBench(b)
	ctx := context.Background()
	mid := &svc.HistoryPos{At: time.Date(2026, 11, 21, 0, 8, 20, 0, time.UTC), TraceID: "trace-025000"}
	for _, c := range []struct {
		name string
		q    svc.RunHistoryQuery
	}{
		{"all", svc.RunHistoryQuery{}},
		{"status-failed", svc.RunHistoryQuery{Status: svc.RunStatusFailed}},
		{"target", svc.RunHistoryQuery{Target: "support"}},
		{"cursor", svc.RunHistoryQuery{Before: mid}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.RunHistory(ctx, c.q); err != nil {
					b.Fatal(err)
				}
			}
			reportMS(b)
		})
	}
}
