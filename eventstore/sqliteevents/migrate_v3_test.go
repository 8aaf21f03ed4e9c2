package sqliteevents_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/eventstoretest"
	"github.com/svc-dev/svc/eventstore/memevents"
	"github.com/svc-dev/svc/eventstore/sqliteevents"
)

// schemaV2 is the events table of schema version 2: facts, no span ids.
const schemaV2 = `
CREATE TABLE events (
	id              INTEGER PRIMARY KEY,
	ts              INTEGER NOT NULL,
	event_type      TEXT NOT NULL,
	agent           TEXT NOT NULL,
	task_id         TEXT NOT NULL,
	trace_id        TEXT NOT NULL,
	parent_trace_id TEXT NOT NULL,
	payload         TEXT NOT NULL,
	tokens_used INTEGER NOT NULL DEFAULT 0,
	duration_us INTEGER,
	model       TEXT NOT NULL DEFAULT '',
	tool_name   TEXT NOT NULL DEFAULT '',
	error_kind  TEXT NOT NULL DEFAULT '',
	runtime_id  TEXT NOT NULL DEFAULT ''
);
CREATE TABLE usage_totals (dim TEXT NOT NULL, key TEXT NOT NULL, invocations INTEGER NOT NULL,
	tokens_used INTEGER NOT NULL, PRIMARY KEY (dim, key)) WITHOUT ROWID;
CREATE TABLE tool_totals (tool_name TEXT NOT NULL, agent TEXT NOT NULL, calls INTEGER NOT NULL,
	failures INTEGER NOT NULL, durations INTEGER NOT NULL, duration_us INTEGER NOT NULL,
	PRIMARY KEY (tool_name, agent)) WITHOUT ROWID;
CREATE TABLE type_totals (event_type TEXT PRIMARY KEY, events INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE trace_totals (trace_id TEXT PRIMARY KEY, events INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO events (ts, event_type, agent, task_id, trace_id, parent_trace_id, payload, error_kind) VALUES
	(1763726400000000, 'agent_spawned', 'billing', 'k1', 't1', '', '{"backend":"local","trust_level":"medium"}', ''),
	(1763726401000000, 'agent_failed', 'billing', 'k1', 't1', '', '{"error":"ModelError: provider down","duration_ms":1,"backend":"local"}', 'ModelError'),
	(1763726402000000, 'agent_failed', 'billing', 'k2', 't1', '', '{"error":"slow","reason":"timeout","duration_ms":1,"backend":"local"}', 'TimeoutError');
INSERT INTO type_totals VALUES ('agent_spawned', 1), ('agent_failed', 2);
INSERT INTO trace_totals VALUES ('t1', 3);
PRAGMA user_version = 2;
`

// TestSQLiteMigratesV2 opens a version 2 file: the span columns are added
// (old rows have none), the failures' kinds are derived again from their
// reasons only, as a memory store holding the same events derives them,
// and new events keep their span ids.
func TestSQLiteMigratesV2(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v2.db")
	db := rawDB(t, path)
	if _, err := db.Exec(schemaV2); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	lite := openSQLite(t, path, eventstore.Retention{})
	old, err := lite.Events(ctx, svc.EventQuery{TraceID: "t1", Limit: 10})
	if err != nil || len(old) != 3 {
		t.Fatalf("old events: %+v, %v", old, err)
	}
	mem := memevents.New(eventstore.Retention{})
	defer mem.Close()
	write(t, mem, old...)

	newer := span(mk(svc.EventAgentSpawned, 5000, "triage", "k3", "t2", nil), "s3", "")
	write(t, lite, newer)
	write(t, mem, newer)
	m, l := eventstoretest.ReadAll(t, mem, eventstoretest.FixtureNow, []string{"t1", "t2"}), eventstoretest.ReadAll(t, lite, eventstoretest.FixtureNow, []string{"t1", "t2"})
	for k := range m {
		if !reflect.DeepEqual(m[k], l[k]) {
			t.Errorf("%s differs:\nmemory %+v\nsqlite %+v", k, m[k], l[k])
		}
	}
	stats, err := lite.RuntimeStats(ctx, eventstoretest.FixtureNow)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"AgentRuntimeError": 1, "TimeoutError": 1}; !reflect.DeepEqual(stats.Rejections, want) {
		t.Errorf("rejections after migration = %v, want %v (kinds from reasons, not from the error text)", stats.Rejections, want)
	}
	back, err := lite.Events(ctx, svc.EventQuery{TraceID: "t2", Limit: 10})
	if err != nil || len(back) != 1 || back[0].SpanID != "s3" {
		t.Errorf("new event: %+v, %v", back, err)
	}
	if err := lite.Close(); err != nil {
		t.Fatal(err)
	}
	var version int
	if err := rawDB(t, path).QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != sqliteevents.SchemaVersion {
		t.Errorf("user_version = %d, %v; want %d", version, err, sqliteevents.SchemaVersion)
	}
}
