package sqliteevents

import (
	"context"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/internal/rollup"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// queryPlan is SQLite's plan of query, its lines joined by "; ".
func queryPlan(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.reader.Query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "; ")
}

// TestSQLiteQueryPlans checks that the queries by event type use an index
// of those the writer keeps (agent_completed's partial index, or the
// partial index of the other types), as every other query keeps its own,
// and that none reads the whole table: the store's indexes are fewer for
// the writer than they were, not for the readers.
func TestSQLiteQueryPlans(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "events.db"), eventstore.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	var evs []svc.RuntimeEvent
	for i := range 500 {
		for _, typ := range []svc.EventType{svc.EventAgentSpawned, svc.EventAgentCompleted, svc.EventWorkerHeartbeat} {
			evs = append(evs, svc.RuntimeEvent{EventType: typ, Timestamp: now.Add(time.Duration(i) * time.Millisecond),
				AgentName: "a", TraceID: "t" + string(rune('a'+i%20)), Payload: svc.Payload{"tokens_used": 1.0}})
		}
	}
	if err := s.Write(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		q     eventstore.Query
		index string
	}{
		{eventstore.Query{}, "events_ts"},
		{eventstore.Query{Since: now}, "events_ts"},
		{eventstore.Query{Since: now, Until: now.Add(time.Second)}, "events_ts"},
		{eventstore.Query{TraceID: "ta"}, "events_trace_id"},
		{eventstore.Query{EventType: svc.EventAgentCompleted}, "events_completed_ts"},
		{eventstore.Query{EventType: svc.EventAgentCompleted, Since: now, Until: now.Add(time.Second)}, "events_completed_ts"},
		{eventstore.Query{EventType: svc.EventAgentCompleted, TraceID: "ta"}, "events_trace_id"},
		{eventstore.Query{EventType: svc.EventAgentSpawned}, "events_type_ts"},
		{eventstore.Query{EventType: svc.EventAgentSpawned, TraceID: "ta"}, "events_trace_id"},
		{eventstore.Query{EventType: svc.EventWorkerHeartbeat, Since: now}, "events_type_ts"},
	} {
		q, err := rollup.CheckQuery(c.q)
		if err != nil {
			t.Fatal(err)
		}
		query, args := eventsSQL(q)
		plan := queryPlan(t, s, query, args...)
		if !usesIndex(plan, c.index) {
			t.Errorf("Events(%+v): plan %q, want it to use %s", c.q, plan, c.index)
		}
	}
	if plan := queryPlan(t, s, sqlLatestWorkers); !usesIndex(plan, "events_type_ts") {
		t.Errorf("latest workers: plan %q, want it to use events_type_ts", plan)
	}
	// Every type's events come back by either index.
	for _, typ := range []svc.EventType{svc.EventAgentSpawned, svc.EventAgentCompleted, svc.EventWorkerHeartbeat} {
		got, err := s.Events(context.Background(), eventstore.Query{EventType: typ, Limit: eventstore.MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 500 {
			t.Errorf("Events(%s): %d events, want 500", typ, len(got))
		}
		for i := 1; i < len(got); i++ {
			if got[i].EventType != typ || got[i].Timestamp.After(got[i-1].Timestamp) {
				t.Fatalf("Events(%s): event %d is %s at %s after %s", typ, i, got[i].EventType, got[i].Timestamp, got[i-1].Timestamp)
			}
		}
	}
}

// usesIndex reports whether plan reads events by index (and never the
// whole table).
func usesIndex(plan, index string) bool {
	used := false
	for _, line := range strings.Split(plan, "; ") {
		if line == "SCAN events" {
			return false
		}
		used = used || strings.Contains(line+" ", "INDEX "+index+" ")
	}
	return used
}

// TestSQLiteReplacesTypeIndex opens a file with the index set of the
// builds before events_type_ts (events_event_type over every event): the
// old index is dropped, the new one built, and the events by type are
// all there.
func TestSQLiteReplacesTypeIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	s, err := Open(path, eventstore.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	evs := []svc.RuntimeEvent{
		{EventType: svc.EventAgentSpawned, Timestamp: now, AgentName: "a", TraceID: "t"},
		{EventType: svc.EventAgentCompleted, Timestamp: now.Add(time.Millisecond), AgentName: "a", TraceID: "t",
			Payload: svc.Payload{"tokens_used": 7.0}},
	}
	if err := s.Write(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	// The old builds' index set.
	if _, err := s.writer.Exec(`DROP INDEX events_type_ts; CREATE INDEX events_event_type ON events (event_type, ts)`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, eventstore.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var indexes []string
	rows, err := s.reader.Query(`SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'events_%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, name)
	}
	rows.Close()
	if got := strings.Join(indexes, " "); strings.Contains(got, "events_event_type") || !strings.Contains(got, "events_type_ts") {
		t.Errorf("indexes after reopening: %s; want events_type_ts and no events_event_type", got)
	}
	for _, ev := range evs {
		got, err := s.Events(context.Background(), eventstore.Query{EventType: ev.EventType})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].EventType != ev.EventType {
			t.Errorf("Events(%s) after reopening: %+v", ev.EventType, got)
		}
	}
}
