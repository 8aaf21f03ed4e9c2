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

// schemaV3 is a version 3 file: schemaV2 with the span columns, holding
// two completions, one of them with a cost_usd (what an older serve node
// stored from a newer worker's relay), with their usage totals.
const schemaV3 = `
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
	runtime_id  TEXT NOT NULL DEFAULT '',
	span_id        TEXT NOT NULL DEFAULT '',
	parent_span_id TEXT NOT NULL DEFAULT ''
);
CREATE TABLE usage_totals (dim TEXT NOT NULL, key TEXT NOT NULL, invocations INTEGER NOT NULL,
	tokens_used INTEGER NOT NULL, PRIMARY KEY (dim, key)) WITHOUT ROWID;
CREATE TABLE tool_totals (tool_name TEXT NOT NULL, agent TEXT NOT NULL, calls INTEGER NOT NULL,
	failures INTEGER NOT NULL, durations INTEGER NOT NULL, duration_us INTEGER NOT NULL,
	PRIMARY KEY (tool_name, agent)) WITHOUT ROWID;
CREATE TABLE type_totals (event_type TEXT PRIMARY KEY, events INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE trace_totals (trace_id TEXT PRIMARY KEY, events INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO events (ts, event_type, agent, task_id, trace_id, parent_trace_id, payload, tokens_used, model) VALUES
	(1763726400000000, 'agent_completed', 'billing', 'k1', 't1', '', '{"duration_ms":1,"tokens_used":10,"backend":"local","model":"openai:gpt-4o"}', 10, 'openai:gpt-4o'),
	(1763726401000000, 'agent_completed', 'triage', 'k2', 't2', '', '{"duration_ms":1,"tokens_used":20,"cost_usd":0.0031,"backend":"broker:nats","model":"openai:gpt-4o"}', 20, 'openai:gpt-4o');
INSERT INTO usage_totals VALUES ('agent', 'billing', 1, 10), ('agent', 'triage', 1, 20),
	('trace', 't1', 1, 10), ('trace', 't2', 1, 20), ('model', 'openai:gpt-4o', 2, 30);
INSERT INTO type_totals VALUES ('agent_completed', 2);
INSERT INTO trace_totals VALUES ('t1', 1), ('t2', 1);
PRAGMA user_version = 3;
`

// TestSQLiteMigratesV3 opens a version 3 file: the cost columns are added,
// the stored completion that has a cost_usd counts it (by agent, trace and
// model) and the one without counts 0, as a memory store holding the same
// events counts them; new completions add their costs and pruning takes
// them out again.
func TestSQLiteMigratesV3(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v3.db")
	db := rawDB(t, path)
	if _, err := db.Exec(schemaV3); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	lite := openSQLite(t, path, eventstore.Retention{})
	old, err := lite.Events(ctx, svc.EventQuery{Limit: 10})
	if err != nil || len(old) != 2 {
		t.Fatalf("old events: %+v, %v", old, err)
	}
	mem := memevents.New(eventstore.Retention{})
	defer mem.Close()
	write(t, mem, old...)
	u, err := lite.Usage(ctx, svc.GroupByAgent)
	if err != nil {
		t.Fatal(err)
	}
	want := svc.Usage{GroupBy: "agent", Total: svc.UsageTotals{TokensUsed: 30, CostUSD: 0.0031, Invocations: 2},
		Groups: map[string]svc.UsageTotals{"billing": {TokensUsed: 10, Invocations: 1}, "triage": {TokensUsed: 20, CostUSD: 0.0031, Invocations: 1}}}
	if !reflect.DeepEqual(u, want) {
		t.Errorf("Usage(agent) after migration:\n got %+v\nwant %+v", u, want)
	}

	newer := mk(svc.EventAgentCompleted, 5000, "billing", "k3", "t3", svc.Payload{"tokens_used": 5, "cost_usd": 0.0007, "model": "openai:gpt-4o"})
	write(t, lite, newer)
	write(t, mem, newer)
	traces := []string{"t1", "t2", "t3"}
	m, l := eventstoretest.ReadAll(t, mem, eventstoretest.FixtureNow, traces), eventstoretest.ReadAll(t, lite, eventstoretest.FixtureNow, traces)
	for k := range m {
		if !reflect.DeepEqual(m[k], l[k]) {
			t.Errorf("%s differs:\nmemory %+v\nsqlite %+v", k, m[k], l[k])
		}
	}
	if u, _ := lite.Usage(ctx, svc.GroupByModel); u.Groups["openai:gpt-4o"].CostUSD != 0.0038 {
		t.Errorf("Usage(model) after a new completion = %+v, want gpt-4o at 0.0038", u)
	}
	if err := lite.Close(); err != nil {
		t.Fatal(err)
	}
	var version int
	if err := rawDB(t, path).QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != sqliteevents.SchemaVersion {
		t.Errorf("user_version = %d, %v; want %d", version, err, sqliteevents.SchemaVersion)
	}

	// Reopened with a retention of one row: the two oldest go, with their
	// costs; the migration does not run twice.
	again := openSQLite(t, path, eventstore.Retention{MaxRows: 1})
	if _, err := again.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	u, err = again.Usage(ctx, svc.GroupByModel)
	want = svc.Usage{GroupBy: "model", Total: svc.UsageTotals{TokensUsed: 5, CostUSD: 0.0007, Invocations: 1},
		Groups: map[string]svc.UsageTotals{"openai:gpt-4o": {TokensUsed: 5, CostUSD: 0.0007, Invocations: 1}}}
	if err != nil || !reflect.DeepEqual(u, want) {
		t.Errorf("Usage(model) after pruning to one row:\n got %+v, %v\nwant %+v", u, err, want)
	}
}
