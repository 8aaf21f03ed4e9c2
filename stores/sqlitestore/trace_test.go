package sqlitestore

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc"
)

// TestTraceIDMigratesOldFile opens a file made before runs kept their
// trace id: Open adds the column, the old runs read with no trace id, new
// runs keep theirs across a reopen, and the INSERT an older build makes
// still works on the migrated file (the schema version did not change, so
// that build may open it).
func TestTraceIDMigratesOldFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`
CREATE TABLE runs (
	run_id TEXT PRIMARY KEY, target TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL,
	progress TEXT, result BLOB, reason TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE TABLE run_events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, agent TEXT NOT NULL,
	task_id TEXT NOT NULL, error TEXT NOT NULL, ts INTEGER NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
INSERT INTO runs (run_id, target, kind, state, created_at, updated_at) VALUES ('old', 'echo', 'agent', 'running', 1000, 1000);
PRAGMA user_version = 1;`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 { // the second Open finds the column there
		s, err := Open(path)
		if err != nil {
			t.Fatalf("Open #%d: %v", round+1, err)
		}
		old, err := s.Get(t.Context(), "old")
		if err != nil || old.TraceID != "" || old.State != svc.RunRunning {
			t.Errorf("old run after Open #%d = %+v, %v; want it running, without a trace id", round+1, old, err)
		}
		if round == 0 {
			if err := s.Create(t.Context(), svc.RunRecord{RunID: "new", Target: "echo", Kind: "agent", TraceID: "t-new"}); err != nil {
				t.Fatal(err)
			}
		}
		rec, err := s.Get(t.Context(), "new")
		if err != nil || rec.TraceID != "t-new" || rec.Status().TraceID != "t-new" {
			t.Errorf("new run after Open #%d = %+v, %v; want trace id t-new", round+1, rec, err)
		}
		page, err := s.ListRuns(t.Context(), svc.RunFilter{})
		if err != nil || len(page.Runs) != 2 || page.Runs[0].RunID != "new" || page.Runs[0].TraceID != "t-new" || page.Runs[1].TraceID != "" {
			t.Errorf("ListRuns after Open #%d = %+v, %v; want new (trace t-new), then old (none)", round+1, page, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// An older build's insert names its columns; the new one defaults.
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO runs (run_id, target, kind, state, created_at, updated_at)
		VALUES ('older', 'echo', 'agent', 'pending', 5000, 5000)`); err != nil {
		t.Errorf("an older build's insert into the migrated file: %v", err)
	}
}
