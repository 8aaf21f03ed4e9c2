// Package sqlitedb opens SQLite files the way the run store and the event
// store both want them, and classifies SQLite's errors for both.
//
// A file is opened as two pools over the pure-Go modernc.org/sqlite driver:
// a writer with one connection, so this process's writers queue in Go
// rather than spin in SQLite's busy handler, whose transactions are
// IMMEDIATE (they take the write lock at BEGIN, so a read-check-write
// cannot be overtaken by another process); and a small pool of query-only
// readers, which WAL mode lets read while the writer writes. Every
// connection sets busy_timeout (another process's write lock is waited for,
// up to BusyTimeout), synchronous=NORMAL (a process crash loses nothing
// committed, a power cut may lose the last commits) and foreign_keys=ON.
//
// Every connection's page cache has an explicit size (cache_size, in KiB;
// SQLite's 2000 KiB unless Options say otherwise). The driver allocates it
// outside the Go heap, and it fills as the file grows, so a long-running
// process's RSS grows with its files until the caches are full: DB.CacheKiB
// is that bound, which RELIABILITY.md ("Thirty minutes") measures.
package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/svc-dev/svc"
)

// DefaultBusyTimeout bounds how long a statement waits for another
// process's write lock before failing with a busy error.
const DefaultBusyTimeout = 5 * time.Second

// DefaultCacheKiB is a connection's page cache when Options do not size
// it: SQLite's own default, set explicitly so that the bound is this
// package's and not the build's.
const DefaultCacheKiB = 2000

// Options tune Open; the zero value is the defaults.
type Options struct {
	// BusyTimeout is DefaultBusyTimeout when 0.
	BusyTimeout time.Duration
	// Readers is the size of the reader pool; 4 when 0.
	Readers int
	// WriterCacheKiB and ReaderCacheKiB are the page cache of the writer
	// and of each reader; DefaultCacheKiB when 0.
	WriterCacheKiB, ReaderCacheKiB int
	// WriterPragmas are more pragmas for the writer only, as
	// "name(value)" (e.g. "temp_store(MEMORY)").
	WriterPragmas []string
	// Init runs on the writer once WAL is on, before the readers open:
	// the schema. Its error fails Open.
	Init func(*sql.DB) error
}

// DB is an opened file: its writer and its readers.
type DB struct {
	Writer *sql.DB
	Reader *sql.DB
	// cacheKiB is the sum of the page caches of all connections.
	cacheKiB int
}

// CacheKiB bounds the page caches of all the file's connections together
// (the writer's and every reader's cache_size): the memory, outside the Go
// heap, that they fill as the file grows. SQLite adds a few hundred bytes
// of bookkeeping per cached page, and each connection has its schema and
// prepared statements besides.
func (db *DB) CacheKiB() int { return db.cacheKiB }

// Open opens (creating if needed) the SQLite file at path, which must be a
// plain file path: the caller refuses ":memory:", "file:" URIs and '?',
// which the driver would read as something else.
func Open(path string, opts Options) (*DB, error) {
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = DefaultBusyTimeout
	}
	if opts.Readers <= 0 {
		opts.Readers = 4
	}
	if opts.WriterCacheKiB <= 0 {
		opts.WriterCacheKiB = DefaultCacheKiB
	}
	if opts.ReaderCacheKiB <= 0 {
		opts.ReaderCacheKiB = DefaultCacheKiB
	}
	common := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)",
		opts.BusyTimeout.Milliseconds())
	// A negative cache_size is in KiB, whatever the page size.
	wparams := fmt.Sprintf("%s&_pragma=cache_size(%d)&_txlock=immediate", common, -opts.WriterCacheKiB)
	for _, p := range opts.WriterPragmas {
		wparams += "&_pragma=" + p
	}
	writer, err := sql.Open("sqlite", path+"?"+wparams)
	if err != nil {
		return nil, err
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)
	if err := wal(writer); err != nil {
		writer.Close()
		return nil, err
	}
	if opts.Init != nil {
		if err := opts.Init(writer); err != nil {
			writer.Close()
			return nil, err
		}
	}
	reader, err := sql.Open("sqlite", fmt.Sprintf("%s?%s&_pragma=cache_size(%d)&_pragma=query_only(1)",
		path, common, -opts.ReaderCacheKiB))
	if err != nil {
		writer.Close()
		return nil, err
	}
	reader.SetMaxOpenConns(opts.Readers)
	reader.SetMaxIdleConns(opts.Readers)
	return &DB{Writer: writer, Reader: reader,
		cacheKiB: opts.WriterCacheKiB + opts.Readers*opts.ReaderCacheKiB}, nil
}

// wal turns on WAL mode, which stays on in the file.
func wal(db *sql.DB) error {
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("cannot turn on WAL mode (journal_mode is %s)", mode)
	}
	return nil
}

// Close closes the readers and the writer.
func (db *DB) Close() error {
	return errors.Join(db.Reader.Close(), db.Writer.Close())
}

// SQLite's primary result codes that Fail tells apart.
const (
	codeBusy       = 5
	codeLocked     = 6
	codeConstraint = 19
)

// ErrBusy matches (errors.Is) an error of a statement that found the file
// locked by another connection past the busy timeout: worth retrying.
var ErrBusy = errors.New("sqlite: database is busy")

// ErrConstraint matches an error of a statement a constraint refused
// (unique, not null, foreign key): retrying cannot help.
var ErrConstraint = errors.New("sqlite: constraint violated")

// code is SQLite's primary result code of err, 0 for none.
func code(err error) int {
	var e interface{ Code() int }
	if errors.As(err, &e) {
		return e.Code() & 0xff
	}
	return 0
}

// classified is a driver error with the sentinel that names its class.
type classified struct {
	err   error
	class error
}

func (c *classified) Error() string   { return c.err.Error() }
func (c *classified) Unwrap() []error { return []error{c.err, c.class} }

// Fail wraps a database error once, as msg (the operation, prefixed with
// the store's name). When ctx ended, that is the cause that matters: a
// CancelledError or TimeoutError. A closed store is ShuttingDownError. A
// constraint refusal is a RunStateError (the data refuses the write) that
// matches ErrConstraint; a busy or locked file an AgentRuntimeError that
// matches ErrBusy (transient: callers may retry); anything else an
// AgentRuntimeError.
func Fail(ctx context.Context, err error, closed bool, msg string) error {
	if cerr := ctx.Err(); cerr != nil {
		return svc.Wrap(svc.KindOf(cerr), cerr, msg)
	}
	if closed {
		return svc.Wrap(svc.KindShuttingDown, err, msg)
	}
	switch code(err) {
	case codeBusy, codeLocked:
		return svc.Wrap(svc.KindRuntime, &classified{err, ErrBusy}, msg)
	case codeConstraint:
		return svc.Wrap(svc.KindRunState, &classified{err, ErrConstraint}, msg)
	}
	return svc.Wrap(svc.KindRuntime, err, msg)
}
