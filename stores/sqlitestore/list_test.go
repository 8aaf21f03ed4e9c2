package sqlitestore

import (
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
)

// TestListUsesIndexes checks every ListRuns query walks an index in the
// listing order: no sort of the whole table, so a page costs its own rows.
func TestListUsesIndexes(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "runs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, byState := range []bool{false, true} {
		for _, byCursor := range []bool{false, true} {
			q := listQuery(byState, byCursor)
			rows, err := s.reader.Query("EXPLAIN QUERY PLAN "+q, 10, "running", 1, "x", "team-a")
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			rows.Close()
			want := "USING INDEX runs_created"
			if byState {
				want = "USING INDEX runs_state_created"
			}
			text := strings.Join(plan, "; ")
			if !strings.Contains(text, want) || strings.Contains(text, "TEMP B-TREE") {
				t.Errorf("plan of %q is %q, want it %s without a temporary sort", q, text, want)
			}
		}
	}
}

// TestListMigratesOldFile opens a file made before the listing indexes:
// Open adds them and the old runs are listed.
func TestListMigratesOldFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// The schema of version 1 before ListRuns.
	_, err = db.Exec(`
CREATE TABLE runs (
	run_id TEXT PRIMARY KEY, target TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL,
	progress TEXT, result BLOB, reason TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE INDEX runs_state ON runs (state);
CREATE TABLE run_events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, agent TEXT NOT NULL,
	task_id TEXT NOT NULL, error TEXT NOT NULL, ts INTEGER NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
INSERT INTO runs (run_id, target, kind, state, created_at, updated_at) VALUES
	('old', 'echo', 'agent', 'completed', 1000, 2000),
	('new', 'echo', 'agent', 'running', 3000, 3000),
	('mid', 'pipeline', 'group', 'running', 2000, 2500);
PRAGMA user_version = 1;`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var indexes []string
	rows, err := s.reader.Query(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs' AND sql IS NOT NULL ORDER BY name`)
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
	if want := []string{"runs_created", "runs_state_created"}; !slices.Equal(indexes, want) {
		t.Errorf("indexes of runs after Open = %q, want %q", indexes, want)
	}
	page, err := s.ListRuns(t.Context(), svc.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range page.Runs {
		ids = append(ids, r.RunID)
	}
	if want := []string{"new", "mid", "old"}; !slices.Equal(ids, want) || page.NextCursor != "" {
		t.Errorf("ListRuns of the old file = %q (cursor %q), want %q", ids, page.NextCursor, want)
	}
	page, err = s.ListRuns(t.Context(), svc.RunFilter{State: svc.RunRunning, Limit: 1})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].RunID != "new" || page.Runs[0].Kind != "agent" || page.NextCursor == "" {
		t.Errorf("first running page of the old file = %+v, %v", page, err)
	}
}
