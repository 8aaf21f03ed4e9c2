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

// schemaV4 is a version 4 file, as the build before cached tokens were
// summed wrote it: schemaV3 with the cost columns. It holds three
// completions: two without cached_tokens (no cache hit, or written before
// the key existed) and one with it (a version 4 build already stored the
// key in the payload but did not sum it), with their usage totals.
const schemaV4 = `
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
	parent_span_id TEXT NOT NULL DEFAULT '',
	cost_nusd INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE usage_totals (dim TEXT NOT NULL, key TEXT NOT NULL, invocations INTEGER NOT NULL,
	tokens_used INTEGER NOT NULL, cost_nusd INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (dim, key)) WITHOUT ROWID;
CREATE TABLE tool_totals (tool_name TEXT NOT NULL, agent TEXT NOT NULL, calls INTEGER NOT NULL,
	failures INTEGER NOT NULL, durations INTEGER NOT NULL, duration_us INTEGER NOT NULL,
	PRIMARY KEY (tool_name, agent)) WITHOUT ROWID;
CREATE TABLE type_totals (event_type TEXT PRIMARY KEY, events INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE trace_totals (trace_id TEXT PRIMARY KEY, events INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO events (ts, event_type, agent, task_id, trace_id, parent_trace_id, payload, tokens_used, model, cost_nusd) VALUES
	(1763726400000000, 'agent_completed', 'billing', 'k1', 't1', '', '{"duration_ms":1,"tokens_used":10,"backend":"local","model":"openai:gpt-4o"}', 10, 'openai:gpt-4o', 0),
	(1763726401000000, 'agent_completed', 'triage', 'k2', 't2', '', '{"duration_ms":1,"tokens_used":2000,"cost_usd":0.003,"cached_tokens":1500,"backend":"local","model":"anthropic:claude"}', 2000, 'anthropic:claude', 3000000),
	(1763726402000000, 'agent_completed', 'triage', 'k3', 't3', '', '{"duration_ms":1,"tokens_used":30,"backend":"local","model":"anthropic:claude"}', 30, 'anthropic:claude', 0);
INSERT INTO usage_totals VALUES ('agent', 'billing', 1, 10, 0), ('agent', 'triage', 2, 2030, 3000000),
	('trace', 't1', 1, 10, 0), ('trace', 't2', 1, 2000, 3000000), ('trace', 't3', 1, 30, 0),
	('model', 'openai:gpt-4o', 1, 10, 0), ('model', 'anthropic:claude', 2, 2030, 3000000);
INSERT INTO type_totals VALUES ('agent_completed', 3);
INSERT INTO trace_totals VALUES ('t1', 1), ('t2', 1), ('t3', 1);
PRAGMA user_version = 4;
`

// TestSQLiteMigratesV4 opens a version 4 file in place: the cached tokens
// columns are added, the stored completion whose payload has cached_tokens
// counts them (by agent, trace and model) and those without count 0, as a
// memory store holding the same events counts them; new completions add
// their cached tokens, and pruning takes them out again.
func TestSQLiteMigratesV4(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v4.db")
	db := rawDB(t, path)
	if _, err := db.Exec(schemaV4); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	lite := openSQLite(t, path, eventstore.Retention{})
	old, err := lite.Events(ctx, svc.EventQuery{Limit: 10})
	if err != nil || len(old) != 3 {
		t.Fatalf("old events: %+v, %v", old, err)
	}
	u, err := lite.Usage(ctx, svc.GroupByAgent)
	if err != nil {
		t.Fatal(err)
	}
	want := svc.Usage{GroupBy: "agent",
		Total: svc.UsageTotals{TokensUsed: 2040, CachedTokens: 1500, CostUSD: 0.003, Invocations: 3},
		Groups: map[string]svc.UsageTotals{
			"billing": {TokensUsed: 10, Invocations: 1},
			"triage":  {TokensUsed: 2030, CachedTokens: 1500, CostUSD: 0.003, Invocations: 2},
		}}
	if !reflect.DeepEqual(u, want) {
		t.Errorf("Usage(agent) after migration:\n got %+v\nwant %+v", u, want)
	}

	// New completions, with and without cached tokens, add to the old.
	mem := memevents.New(eventstore.Retention{})
	defer mem.Close()
	write(t, mem, old...)
	newer := []svc.RuntimeEvent{
		mk(svc.EventAgentCompleted, 5000, "triage", "k4", "t4", svc.Payload{"tokens_used": 400, "cached_tokens": int64(256), "model": "anthropic:claude"}),
		mk(svc.EventAgentCompleted, 6000, "billing", "k5", "t5", svc.Payload{"tokens_used": 5, "model": "openai:gpt-4o"}),
	}
	write(t, lite, newer...)
	write(t, mem, newer...)
	traces := []string{"t1", "t2", "t3", "t4", "t5"}
	m, l := eventstoretest.ReadAll(t, mem, eventstoretest.FixtureNow, traces), eventstoretest.ReadAll(t, lite, eventstoretest.FixtureNow, traces)
	for k := range m {
		if !reflect.DeepEqual(m[k], l[k]) {
			t.Errorf("%s differs:\nmemory %+v\nsqlite %+v", k, m[k], l[k])
		}
	}
	u, err = lite.Usage(ctx, svc.GroupByModel)
	want = svc.Usage{GroupBy: "model",
		Total: svc.UsageTotals{TokensUsed: 2445, CachedTokens: 1756, CostUSD: 0.003, Invocations: 5},
		Groups: map[string]svc.UsageTotals{
			"openai:gpt-4o":    {TokensUsed: 15, Invocations: 2},
			"anthropic:claude": {TokensUsed: 2430, CachedTokens: 1756, CostUSD: 0.003, Invocations: 3},
		}}
	if err != nil || !reflect.DeepEqual(u, want) {
		t.Errorf("Usage(model) after new completions:\n got %+v, %v\nwant %+v", u, err, want)
	}
	if err := lite.Close(); err != nil {
		t.Fatal(err)
	}
	var version int
	if err := rawDB(t, path).QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != sqliteevents.SchemaVersion {
		t.Errorf("user_version = %d, %v; want %d", version, err, sqliteevents.SchemaVersion)
	}

	// Reopened, the migration does not run twice (it would count the old
	// cached tokens again).
	reopened := openSQLite(t, path, eventstore.Retention{})
	u, err = reopened.Usage(ctx, svc.GroupByNone)
	if err != nil || u.Total.CachedTokens != 1756 {
		t.Errorf("Usage after reopening = %+v, %v; want 1756 cached tokens", u, err)
	}
	if err := reopened.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened with a retention of two rows: the three old ones go, with
	// their cached tokens (triage keeps only the new completion's).
	again := openSQLite(t, path, eventstore.Retention{MaxRows: 2})
	if _, err := again.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	u, err = again.Usage(ctx, svc.GroupByAgent)
	want = svc.Usage{GroupBy: "agent",
		Total: svc.UsageTotals{TokensUsed: 405, CachedTokens: 256, Invocations: 2},
		Groups: map[string]svc.UsageTotals{
			"triage":  {TokensUsed: 400, CachedTokens: 256, Invocations: 1},
			"billing": {TokensUsed: 5, Invocations: 1},
		}}
	if err != nil || !reflect.DeepEqual(u, want) {
		t.Errorf("Usage(agent) after pruning to two rows:\n got %+v, %v\nwant %+v", u, err, want)
	}
}
