package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

func TestOpenPragmas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := Open(path, Options{BusyTimeout: 1500 * time.Millisecond, WriterCacheKiB: 1024, WriterPragmas: []string{"temp_store(2)"},
		Init: func(db *sql.DB) error { _, err := db.Exec(`CREATE TABLE t (k TEXT PRIMARY KEY)`); return err }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		db     *sql.DB
		pragma string
		want   int64
	}{
		{db.Writer, "busy_timeout", 1500}, {db.Reader, "busy_timeout", 1500},
		{db.Writer, "synchronous", 1}, {db.Reader, "synchronous", 1}, // NORMAL
		{db.Writer, "foreign_keys", 1}, {db.Reader, "query_only", 1},
		{db.Writer, "query_only", 0}, {db.Writer, "cache_size", -1024}, {db.Writer, "temp_store", 2},
	} {
		var got int64
		if err := c.db.QueryRow("PRAGMA " + c.pragma).Scan(&got); err != nil || got != c.want {
			t.Errorf("PRAGMA %s = %d, %v; want %d", c.pragma, got, err, c.want)
		}
	}
	var mode string
	if err := db.Reader.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v", mode, err)
	}
	if _, err := db.Reader.Exec(`INSERT INTO t VALUES ('a')`); err == nil {
		t.Errorf("a reader wrote")
	}
}

// TestOpenCacheBound checks that every connection's page cache, the
// memory SQLite fills outside the Go heap as the file grows, has the size
// the options give it, so that DB.CacheKiB bounds them all.
func TestOpenCacheBound(t *testing.T) {
	for _, c := range []struct {
		name           string
		opts           Options
		writer, reader int64
		bound          int
	}{
		{"defaults", Options{}, DefaultCacheKiB, DefaultCacheKiB, 5 * DefaultCacheKiB},
		{"sized", Options{Readers: 3, WriterCacheKiB: 4096, ReaderCacheKiB: 512}, 4096, 512, 4096 + 3*512},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := Open(filepath.Join(t.TempDir(), "x.db"), c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if got := db.CacheKiB(); got != c.bound {
				t.Errorf("CacheKiB() = %d, want %d", got, c.bound)
			}
			var got int64
			if err := db.Writer.QueryRow("PRAGMA cache_size").Scan(&got); err != nil || got != -c.writer {
				t.Errorf("writer: PRAGMA cache_size = %d, %v; want %d", got, err, -c.writer)
			}
			// Hold as many reader connections as the pool allows, so that
			// each one is asked, not the first one again.
			readers := c.opts.Readers
			if readers == 0 {
				readers = 4
			}
			ctx := context.Background()
			for i := 0; i < readers; i++ {
				conn, err := db.Reader.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if err := conn.QueryRowContext(ctx, "PRAGMA cache_size").Scan(&got); err != nil || got != -c.reader {
					t.Errorf("reader %d: PRAGMA cache_size = %d, %v; want %d", i, got, err, -c.reader)
				}
			}
		})
	}
}

func TestOpenInitError(t *testing.T) {
	boom := errors.New("boom")
	if _, err := Open(filepath.Join(t.TempDir(), "x.db"), Options{Init: func(*sql.DB) error { return boom }}); !errors.Is(err, boom) {
		t.Fatalf("Open = %v, want the Init error", err)
	}
}

func TestFail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := Open(path, Options{BusyTimeout: 10 * time.Millisecond,
		Init: func(db *sql.DB) error { _, err := db.Exec(`CREATE TABLE t (k TEXT PRIMARY KEY)`); return err }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.Writer.Exec(`INSERT INTO t VALUES ('a')`); err != nil {
		t.Fatal(err)
	}
	_, err = db.Writer.Exec(`INSERT INTO t VALUES ('a')`)
	if f := Fail(ctx, err, false, "x: insert"); !errors.Is(f, ErrConstraint) || !errors.Is(f, svc.ErrRunState) {
		t.Errorf("duplicate key: %v (kind %s), want ErrConstraint, RunStateError", f, svc.KindOf(f))
	}
	// Another process (here another pool) holds the write lock.
	other, err := Open(path, Options{BusyTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Writer.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO t VALUES ('b')`); err != nil {
		t.Fatal(err)
	}
	_, err = db.Writer.Exec(`INSERT INTO t VALUES ('c')`)
	if f := Fail(ctx, err, false, "x: insert"); !errors.Is(f, ErrBusy) || svc.KindOf(f) != svc.KindRuntime || errors.Is(f, ErrConstraint) {
		t.Errorf("locked file: %v (kind %s), want ErrBusy, AgentRuntimeError", f, svc.KindOf(f))
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if f := Fail(cctx, err, false, "x"); !errors.Is(f, svc.ErrCancelled) {
		t.Errorf("cancelled: %v", f)
	}
	if f := Fail(ctx, err, true, "x"); !errors.Is(f, svc.ErrShuttingDown) {
		t.Errorf("closed: %v", f)
	}
	if f := Fail(ctx, errors.New("other"), false, "x"); svc.KindOf(f) != svc.KindRuntime || errors.Is(f, ErrBusy) {
		t.Errorf("other: %v", f)
	}
}
