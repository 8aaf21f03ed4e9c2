package pebblestore

import (
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/stores/internal/runlist"
)

// TestListIndexRebuild opens a database written before the listing
// indexes, with stray index keys as a rebuild cut short would leave: Open
// rebuilds the indexes from the records, and the runs are listed by time and
// by state.
func TestListIndexRebuild(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC)
	for i, r := range []struct {
		id    string
		state svc.RunState
	}{{"a", svc.RunCompleted}, {"b", svc.RunRunning}, {"c", svc.RunRunning}, {"d", svc.RunPending}} {
		created := at.Add(time.Duration(i) * time.Second)
		v, err := encodeRecord(&stored{RunRecord: svc.RunRecord{RunID: r.id, Target: "echo", Kind: "agent", State: r.state,
			Result: []byte(`{"big":"result"}`), CreatedAt: created, UpdatedAt: created}})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Set(runKey(r.id), v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	// Strays: an entry for a run that does not exist, and one filed under
	// the wrong state.
	for _, k := range [][]byte{
		indexKey(idxCreated, runlist.Position{CreatedUS: at.Add(time.Hour).UnixMicro(), RunID: "ghost"}),
		indexKey(stateIndex(svc.RunFailed), runlist.Position{CreatedUS: at.UnixMicro(), RunID: "a"}),
	} {
		if err := db.Set(k, nil, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list := func(f svc.RunFilter) []string {
		t.Helper()
		page, err := s.ListRuns(t.Context(), f)
		if err != nil {
			t.Fatalf("ListRuns(%+v): %v", f, err)
		}
		var ids []string
		for _, r := range page.Runs {
			ids = append(ids, r.RunID)
		}
		return ids
	}
	for _, tc := range []struct {
		f    svc.RunFilter
		want []string
	}{
		{svc.RunFilter{}, []string{"d", "c", "b", "a"}},
		{svc.RunFilter{State: svc.RunRunning}, []string{"c", "b"}},
		{svc.RunFilter{State: svc.RunCompleted}, []string{"a"}},
		{svc.RunFilter{State: svc.RunFailed}, nil},
	} {
		if got := list(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("ListRuns(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}
	// The rebuilt indexes follow the changes from here on.
	if err := s.SetState(t.Context(), "b", svc.RunFailed, "boom", nil); err != nil {
		t.Fatal(err)
	}
	if got := list(svc.RunFilter{State: svc.RunRunning}); !slices.Equal(got, []string{"c"}) {
		t.Errorf("running after b failed = %q, want [c]", got)
	}
	if got := list(svc.RunFilter{State: svc.RunFailed}); !slices.Equal(got, []string{"b"}) {
		t.Errorf("failed after b failed = %q, want [b]", got)
	}
}

// FuzzIndexKey: index keys sort as the listing order reversed, and parse
// back to their position.
func FuzzIndexKey(f *testing.F) {
	f.Add(int64(0), "a", int64(0), "ab")
	f.Add(int64(-1), "z", int64(1), "a")
	f.Add(int64(1741964966535897), "0190a0c2-aaaa", int64(1741964966535897), "0190a0c2-aaab")
	f.Fuzz(func(t *testing.T, us1 int64, id1 string, us2 int64, id2 string) {
		if id1 == "" || id2 == "" {
			return
		}
		p, q := runlist.Position{CreatedUS: us1, RunID: id1}, runlist.Position{CreatedUS: us2, RunID: id2}
		kp, kq := indexKey(idxCreated, p), indexKey(idxCreated, q)
		if got, ok := parseIndexKey(idxCreated, kp); !ok || got != p {
			t.Fatalf("parseIndexKey(indexKey(%+v)) = %+v, %v", p, got, ok)
		}
		if want, got := runlist.Compare(p, q), -slices.Compare(kp, kq); want != got {
			t.Fatalf("%+v vs %+v: listing order %d, key order reversed %d", p, q, want, got)
		}
	})
}
