package sqliteevents_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/eventstore"
	"github.com/svc-dev/svc/eventstore/eventstoretest"
	"github.com/svc-dev/svc/eventstore/memevents"
	"github.com/svc-dev/svc/eventstore/sqliteevents"
)

// TestSQLiteMigratesV5 opens a version 5 file (this build's file with
// schema version 6's column and tables taken out): the migration fills
// run_flags from the payloads (a failed group, refusals, a budget crossed
// with an overshoot) and builds the run history and the per-minute totals,
// so that the history and every windowed rollup equal a memory store's
// holding the same events.
func TestSQLiteMigratesV5(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v5.db")
	evs := eventstoretest.Fixture()
	base := eventstoretest.FixtureNow.Add(-10 * time.Minute)
	at := func(s int) time.Time { return base.Add(time.Duration(s)*time.Second + 123*time.Microsecond) }
	more := []svc.RuntimeEvent{
		{EventType: svc.EventGroupStarted, Timestamp: at(70), AgentName: "pipeline", TraceID: "g1", Payload: svc.Payload{}},
		{EventType: svc.EventAgentSpawned, Timestamp: at(71), AgentName: "a", TraceID: "g1", Payload: svc.Payload{}},
		{EventType: svc.EventAgentCompleted, Timestamp: at(130), AgentName: "a", TraceID: "g1", Payload: svc.Payload{"tokens_used": 3}},
		{EventType: svc.EventGroupCompleted, Timestamp: at(131), AgentName: "pipeline", TraceID: "g1", Payload: svc.Payload{"success": false}},
		{EventType: svc.EventBudgetExceeded, Timestamp: at(200), AgentName: "a", TraceID: "r1", Payload: svc.Payload{"limit": 1}},
		{EventType: svc.EventDepthLimitExceeded, Timestamp: at(201), AgentName: "a", TraceID: "r2", Payload: svc.Payload{}},
		{EventType: svc.EventAgentSpawned, Timestamp: at(250), AgentName: "a", TraceID: "o1", Payload: svc.Payload{}},
		{EventType: svc.EventBudgetExceeded, Timestamp: at(251), AgentName: "a", TraceID: "o1", Payload: svc.Payload{"overshoot": 4}},
		{EventType: svc.EventAgentCompleted, Timestamp: at(252), AgentName: "a", TraceID: "o1", Payload: svc.Payload{"tokens_used": 9}},
	}
	evs = append(evs, more...)
	lite := openSQLite(t, path, eventstore.Retention{})
	write(t, lite, evs...)
	if err := lite.Close(); err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, path)
	if _, err := db.Exec(`DROP TABLE run_totals; DROP TABLE usage_minutes; DROP TABLE type_minutes;
		ALTER TABLE events DROP COLUMN run_flags; PRAGMA user_version = 5;`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	migrated := openSQLite(t, path, eventstore.Retention{})
	mem := memevents.New(eventstore.Retention{})
	defer mem.Close()
	write(t, mem, evs...)
	traces := []string{"g1", "r1", "o1"}
	m, l := eventstoretest.ReadAll(t, mem, eventstoretest.FixtureNow, traces), eventstoretest.ReadAll(t, migrated, eventstoretest.FixtureNow, traces)
	for k := range m {
		if !reflect.DeepEqual(m[k], l[k]) {
			t.Errorf("%s differs after the migration:\nmemory %+v\nsqlite %+v", k, m[k], l[k])
		}
	}
	page, err := migrated.RunHistory(ctx, svc.RunHistoryQuery{Status: svc.RunStatusRejected})
	if err != nil || page.Total != 3 {
		t.Errorf("rejected runs after the migration = %+v, %v; want r1, r2 and the fixture's t3", page, err)
	}
	page, err = migrated.RunHistory(ctx, svc.RunHistoryQuery{Target: "pipeline"})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].Status != svc.RunStatusFailed {
		t.Errorf("the group after the migration = %+v, %v; want g1, failed", page, err)
	}
	u, err := migrated.UsageIn(ctx, svc.GroupByNone, svc.Window{Since: base.Add(time.Minute), Until: base.Add(5 * time.Minute)})
	if err != nil || u.Total.TokensUsed != 12 {
		t.Errorf("usage of minutes 1 to 5 after the migration = %+v, %v; want 12 tokens", u, err)
	}
	if err := migrated.Close(); err != nil {
		t.Fatal(err)
	}
	var version int
	if err := rawDB(t, path).QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != sqliteevents.SchemaVersion {
		t.Errorf("user_version = %d, %v; want %d", version, err, sqliteevents.SchemaVersion)
	}
}
