package sqlitestore

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
)

// TestStepsMigrateOldFile opens a file as the version before the step log
// made it (schema version 1, runs with trace_id, no run_steps table, no
// step columns), holding a running run: Open adds the table and columns in
// place, the old run takes steps and counts them against its bound, they
// survive a reopen, and the writes an older build makes still work on the
// migrated file (the schema version did not change, so it may open it).
func TestStepsMigrateOldFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`
CREATE TABLE runs (
	run_id TEXT PRIMARY KEY, target TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL,
	progress TEXT, result BLOB, reason TEXT NOT NULL DEFAULT '', trace_id TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE INDEX runs_created ON runs (created_at, run_id);
CREATE INDEX runs_state_created ON runs (state, created_at, run_id);
CREATE TABLE run_events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, agent TEXT NOT NULL,
	task_id TEXT NOT NULL, error TEXT NOT NULL, ts INTEGER NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
CREATE TABLE idempotency (key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, run_id TEXT NOT NULL,
	expires_at INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO runs (run_id, target, kind, state, trace_id, created_at, updated_at)
	VALUES ('old', 'echo', 'agent', 'running', 't-old', 1000, 1000);
INSERT INTO run_events VALUES ('old', 1, 'agent_started', 'echo', 'task', '', 1000);
PRAGMA user_version = 1;`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	step := func(i int, data string) svc.RunStep {
		return svc.RunStep{Kind: svc.StepModelCall, Key: svc.StepKey("echo", i), Data: []byte(data)}
	}
	for round := range 2 { // the second Open finds the table and columns there
		s, err := OpenWith(path, Options{MaxStepBytes: 100})
		if err != nil {
			t.Fatalf("Open #%d: %v", round+1, err)
		}
		if round == 0 {
			if last, err := s.AppendSteps(t.Context(), "old", step(0, `{"n":0}`), step(1, `{"n":1}`)); err != nil || last != 2 {
				t.Fatalf("AppendSteps on the migrated file = %d, %v; want 2", last, err)
			}
		}
		got, err := s.Steps(t.Context(), "old", 0)
		if err != nil || len(got) != 2 || got[0].Key != "echo#0" || string(got[1].Data) != `{"n":1}` || got[1].Seq != 2 {
			t.Errorf("Steps after Open #%d = %+v, %v; want the two steps", round+1, got, err)
		}
		if evs, err := s.Events(t.Context(), "old", 0); err != nil || len(evs) != 1 {
			t.Errorf("the old run's events after Open #%d = %+v, %v", round+1, evs, err)
		}
		// 2 * (6 + 7) bytes are counted, kept across the reopen: 74 more
		// fit, 75 do not.
		// A step of key "k" and 74 bytes of data is 75.
		_, err = s.AppendSteps(t.Context(), "old", svc.RunStep{Kind: svc.StepToolCall, Key: "k", Data: []byte(`"` + strings.Repeat("a", 72) + `"`)})
		if !errors.Is(err, svc.ErrPayloadTooLarge) {
			t.Errorf("a step one byte past the bound after Open #%d: %v, want a PayloadTooLargeError", round+1, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// An older build's writes name their columns; the new ones default.
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO runs (run_id, target, kind, state, trace_id, created_at, updated_at)
		VALUES ('older', 'echo', 'agent', 'pending', '', 5000, 5000)`); err != nil {
		t.Errorf("an older build's insert into the migrated file: %v", err)
	}
	if _, err := db.Exec(`UPDATE runs SET state = 'failed', reason = 'interrupted' WHERE run_id = 'old'`); err != nil {
		t.Errorf("an older build's update of the migrated file: %v", err)
	}
}
