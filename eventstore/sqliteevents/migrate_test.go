package sqliteevents_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/eventstoretest"
	"github.com/svc-dev/svc/eventstore/memevents"
	"github.com/svc-dev/svc/eventstore/sqliteevents"
)

// schemaV1 is the schema of the first release, which set no user_version.
const schemaV1 = `
CREATE TABLE IF NOT EXISTS events (
	id              INTEGER PRIMARY KEY,
	ts              INTEGER NOT NULL,
	event_type      TEXT NOT NULL,
	agent           TEXT NOT NULL,
	task_id         TEXT NOT NULL,
	trace_id        TEXT NOT NULL,
	parent_trace_id TEXT NOT NULL,
	payload         TEXT NOT NULL -- JSON object
);
CREATE INDEX IF NOT EXISTS events_ts ON events (ts);
CREATE INDEX IF NOT EXISTS events_trace_id ON events (trace_id, ts);
CREATE INDEX IF NOT EXISTS events_event_type ON events (event_type, ts);
`

func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestSQLiteMigratesV1 opens a file the first release wrote: the rollups
// must count the events already in it, exactly as a memory store holding
// the same events does, and the file must keep working.
func TestSQLiteMigratesV1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	db := rawDB(t, path)
	if _, err := db.Exec(schemaV1); err != nil {
		t.Fatal(err)
	}
	evs := eventstoretest.Fixture()
	for _, e := range evs[:20] {
		p := []byte("{}") // what the first release wrote for a nil payload
		if e.Payload != nil {
			var err error
			if p, err = json.Marshal(e.Payload); err != nil {
				t.Fatal(err)
			}
		}
		_, err := db.Exec(`INSERT INTO events (ts, event_type, agent, task_id, trace_id, parent_trace_id, payload)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, e.Timestamp.UnixMicro(), string(e.EventType), e.AgentName, e.TaskID,
			e.TraceID, e.ParentTraceID, string(p))
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	lite := openSQLite(t, path, eventstore.Retention{})
	mem := memevents.New(eventstore.Retention{})
	defer mem.Close()
	write(t, mem, evs[:20]...)
	// And both keep counting what comes after.
	write(t, lite, evs[20:]...)
	write(t, mem, evs[20:]...)
	traces := []string{"t1", "t2", "t3", "t4", "t5"}
	m, l := eventstoretest.ReadAll(t, mem, eventstoretest.FixtureNow, traces), eventstoretest.ReadAll(t, lite, eventstoretest.FixtureNow, traces)
	for k := range m {
		if !reflect.DeepEqual(m[k], l[k]) {
			t.Errorf("%s differs:\nmemory %+v\nsqlite %+v", k, m[k], l[k])
		}
	}
	if u, _ := lite.Usage(context.Background(), ""); u.Total.TokensUsed != 1202 {
		t.Errorf("usage after migration: %+v", u)
	}
	if err := lite.Close(); err != nil {
		t.Fatal(err)
	}

	// Opening it again migrates nothing twice.
	again := openSQLite(t, path, eventstore.Retention{})
	if u, _ := again.Usage(context.Background(), ""); u.Total.TokensUsed != 1202 {
		t.Errorf("usage after reopening: %+v", u)
	}
}

func TestSQLiteRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "future.db")
	s := openSQLite(t, path, eventstore.Retention{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, path).Exec(`PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	_, err := sqliteevents.Open(path, eventstore.Retention{})
	if !errors.Is(err, svc.ErrRuntime) || !strings.Contains(err.Error(), "schema version 99") {
		t.Fatalf("OpenSQLite of a newer file = %v, want an error naming its schema version", err)
	}
}

// TestSQLitePruneKeepsTotals checks the totals follow both retentions,
// down to empty.
func TestSQLitePruneKeepsTotals(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	old := func(e svc.RuntimeEvent) svc.RuntimeEvent { e.Timestamp = now.Add(-2 * time.Hour); return e }
	pruned := make(chan struct{}, 1)
	s, err := sqliteevents.OpenEvery(filepath.Join(t.TempDir(), "events.db"), eventstore.Retention{MaxAge: time.Hour}, time.Hour, pruned)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	<-pruned // the prune at open, so the one below is the test's
	write(t, s, old(eventstoretest.Fixture()[5]), old(eventstoretest.Fixture()[2]))
	if u, _ := s.Usage(ctx, svc.GroupByTrace); u.Total.Invocations != 1 {
		t.Fatalf("before pruning: %+v", u)
	}
	if n, err := s.Prune(ctx); err != nil || n != 2 {
		t.Fatalf("Prune = %d, %v", n, err)
	}
	u, err := s.Usage(ctx, svc.GroupByTrace)
	if err != nil || !reflect.DeepEqual(u, svc.Usage{GroupBy: "trace", Groups: map[string]svc.UsageTotals{}}) {
		t.Errorf("usage after pruning everything: %+v, %v", u, err)
	}
	tu, err := s.ToolUsage(ctx, svc.GroupByAgentTool)
	if err != nil || len(tu.Rows) != 0 {
		t.Errorf("tools after pruning everything: %+v, %v", tu, err)
	}
	st, err := s.RuntimeStats(ctx, now)
	if err != nil || st.Header != (svc.StatsHeader{}) {
		t.Errorf("stats header after pruning everything: %+v, %v", st.Header, err)
	}
}
