package sqliteevents

import (
	"github.com/svc-dev/svc/eventstore"
	"path/filepath"
	"testing"
)

// TestSQLiteWriterCache checks the page caches RELIABILITY.md's bound is
// computed from: the writer's is writerCacheKiB (32 MiB, for insert
// speed), a reader's SQLite's 2000 KiB.
func TestSQLiteWriterCache(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "events.db"), eventstore.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		name string
		got  func() (int64, error)
		want int64
	}{
		{"writer", func() (n int64, err error) { return n, s.writer.QueryRow("PRAGMA cache_size").Scan(&n) }, -32768},
		{"reader", func() (n int64, err error) { return n, s.reader.QueryRow("PRAGMA cache_size").Scan(&n) }, -2000},
	} {
		if got, err := c.got(); err != nil || got != c.want {
			t.Errorf("%s: PRAGMA cache_size = %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}
