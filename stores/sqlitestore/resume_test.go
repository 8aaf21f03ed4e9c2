package sqlitestore

import (
	"bytes"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc"
)

// TestResumeMigratesOldFile opens a file made before runs kept their task
// and resume count: Open adds both columns; the old runs read with no task
// and are failed by Recover (they cannot be resumed) while a new run with
// a task is claimed, takes a step, and both survive a reopen; the INSERT
// an older build makes still works on the migrated file.
func TestResumeMigratesOldFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// The schema of the build before: step log, no task, no resumed.
	_, err = db.Exec(`
CREATE TABLE runs (
	run_id TEXT PRIMARY KEY, target TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL,
	progress TEXT, result BLOB, reason TEXT NOT NULL DEFAULT '', trace_id TEXT NOT NULL DEFAULT '',
	step_bytes INTEGER NOT NULL DEFAULT 0, step_count INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE TABLE run_events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, agent TEXT NOT NULL,
	task_id TEXT NOT NULL, error TEXT NOT NULL, ts INTEGER NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
CREATE TABLE run_steps (run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
	data BLOB NOT NULL, ts INTEGER NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
INSERT INTO runs (run_id, target, kind, state, step_bytes, step_count, created_at, updated_at)
	VALUES ('old', 'echo', 'agent', 'running', 4, 1, 1000, 1000);
INSERT INTO run_steps VALUES ('old', 1, 'model_call', 'a#0', '1', 1000);
PRAGMA user_version = 1;`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	task := []byte(`{ "input": "é" }`)
	for round := range 2 { // the second Open finds the columns there
		s, err := Open(path)
		if err != nil {
			t.Fatalf("Open #%d: %v", round+1, err)
		}
		// The step log's rows were carried into the new table.
		if steps, err := s.Steps(ctx, "old", 0); err != nil || len(steps) != 1 || steps[0].Key != "a#0" || string(steps[0].Data) != "1" {
			t.Errorf("old run's steps after Open #%d = %+v, %v; want its one step", round+1, steps, err)
		}
		old, err := s.Get(ctx, "old")
		if err != nil || old.Task != nil || old.Resumed != 0 || old.Steps != 1 {
			t.Errorf("old run after Open #%d = %+v, %v; want no task, resumed 0, 1 step", round+1, old, err)
		}
		if round == 0 {
			if old.State != svc.RunRunning {
				t.Errorf("old run: %s, want running", old.State)
			}
			if err := s.Create(ctx, svc.RunRecord{RunID: "new", Target: "echo", Kind: "agent", Task: task}); err != nil {
				t.Fatal(err)
			}
			claimed, n, err := s.Recover(ctx)
			if err != nil || n != 1 || len(claimed) != 1 || claimed[0].RunID != "new" {
				t.Fatalf("Recover = %+v, %d, %v; want new claimed, old failed", claimed, n, err)
			}
		}
		if old.State != svc.RunRunning && (old.State != svc.RunFailed || old.Reason != svc.ReasonInterrupted) {
			t.Errorf("old run after Recover: %s (%s), want failed (interrupted)", old.State, old.Reason)
		}
		// The step log of the migrated file takes steps, numbered after
		// the ones there (the old run's one step, the new run's none).
		if round == 0 {
			if seq, err := s.AppendSteps(ctx, "new", svc.RunStep{Kind: svc.StepModelCall, Key: "a#0", Data: []byte(`"x"`)}); err != nil || seq != 1 {
				t.Errorf("AppendSteps to the new run of a migrated file = %d, %v; want 1", seq, err)
			}
		}
		rec, err := s.Get(ctx, "new")
		if err != nil || !bytes.Equal(rec.Task, task) || rec.Resumed != 1 || rec.State != svc.RunPending || rec.Steps != 1 {
			t.Errorf("new run after Open #%d = %+v, %v; want pending, its task, resumed 1, 1 step", round+1, rec, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO runs (run_id, target, kind, state, created_at, updated_at, trace_id)
		VALUES ('older', 'echo', 'agent', 'pending', 5000, 5000, '')`); err != nil {
		t.Errorf("an older build's insert into the migrated file: %v", err)
	}
}
