package sqlitestore

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc"
)

// TestBatchModeMigratesOldFile opens a file whose batches table is the
// build before's (no mode, no provider value): Open adds both columns;
// the old batch reads as a runtime batch with no provider value and
// takes one, and a new batch of mode provider keeps its mode, through a
// reopen.
func TestBatchModeMigratesOldFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`
CREATE TABLE batches (
	batch_id TEXT PRIMARY KEY, target TEXT NOT NULL, state TEXT NOT NULL, max_concurrency INTEGER NOT NULL,
	total INTEGER NOT NULL, succeeded INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,
	running INTEGER NOT NULL DEFAULT 0, tokens INTEGER NOT NULL DEFAULT 0, cost REAL NOT NULL DEFAULT 0,
	reason TEXT NOT NULL DEFAULT '', resumed INTEGER NOT NULL DEFAULT 0, owner TEXT NOT NULL DEFAULT '',
	seq INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO batches (batch_id, target, state, max_concurrency, total, created_at, updated_at)
	VALUES ('old', 'echo', 'running', 4, 1, 1000, 1000);`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for round := range 2 {
		s, err := Open(path)
		if err != nil {
			t.Fatalf("Open #%d: %v", round+1, err)
		}
		old, err := s.GetBatch(ctx, "old")
		if err != nil || old.Mode != "" || (round == 0 && old.Provider != nil) {
			t.Fatalf("old batch after Open #%d: %+v, %v", round+1, old, err)
		}
		if round == 0 {
			if err := s.SetBatchProvider(ctx, "old", json.RawMessage(`{"a":1}`)); err != nil {
				t.Fatal(err)
			}
			rec := svc.BatchRecord{BatchStatus: svc.BatchStatus{BatchID: "new", Target: "echo", State: svc.BatchQueued,
				MaxConcurrency: 1, Mode: svc.BatchProvider, Counts: svc.BatchCounts{Total: 1}}}
			if err := s.CreateBatch(ctx, rec); err != nil {
				t.Fatal(err)
			}
		} else if string(old.Provider) != `{"a":1}` {
			t.Errorf("old batch's provider value after a reopen: %s", old.Provider)
		}
		if nb, err := s.GetBatch(ctx, "new"); err != nil || nb.Mode != svc.BatchProvider {
			t.Errorf("new batch after Open #%d: %+v, %v", round+1, nb, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
