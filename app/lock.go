package app

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/svc-dev/svc/internal/dirlock"
)

// LockFile is the lock file a server takes in its data directory.
const LockFile = "svc.lock"

// LockedError is returned by Start when another process holds the lock of
// the data directory or of the run store's path: two servers on the same
// directory would each take the other's live runs for interrupted ones.
type LockedError struct {
	What string // "data directory" or "run store"
	Path string // the directory or store path
	Lock string // the lock file
	PID  int    // the holder's PID; 0 when unknown
}

func (e *LockedError) Error() string {
	pid := "PID unknown"
	if e.PID != 0 {
		pid = fmt.Sprintf("PID %d", e.PID)
	}
	return fmt.Sprintf("%s %s is in use by another svc process (%s, lock %s): stop that process or give this one another %s",
		e.What, e.Path, pid, e.Lock, e.What)
}

// lock takes the locks of what the process keeps on disk, before any store
// is opened: the data directory's (DataDir/svc.lock) when a default store
// or the embedded broker lives there, and PATH.lock for a sqlite:PATH or
// pebble:PATH run store outside it. A worker keeps nothing on disk and
// takes none. stop releases them, last.
func (a *App) lock() error {
	o := &a.opts
	if o.Worker != nil {
		return nil
	}
	var dataDir string
	if (o.RunStore == nil && o.Store == "") || o.Events == "" || o.Broker == "embedded" {
		if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
			return &ConfigError{Option: "DataDir", Err: err}
		}
		if err := a.take("data directory", o.DataDir, filepath.Join(o.DataDir, LockFile)); err != nil {
			return err
		}
		dataDir, _ = filepath.Abs(o.DataDir)
	}
	if o.RunStore != nil {
		return nil
	}
	var path string
	switch {
	case strings.HasPrefix(o.Store, "sqlite:"):
		path = strings.TrimPrefix(o.Store, "sqlite:")
	case strings.HasPrefix(o.Store, "pebble:"):
		path = strings.TrimPrefix(o.Store, "pebble:")
	default:
		return nil // memory, redis: nothing on this disk
	}
	abs, err := filepath.Abs(path)
	if err != nil || path == "" {
		return nil // the store's Open says what is wrong with the path
	}
	if dataDir != "" && strings.HasPrefix(abs, dataDir+string(filepath.Separator)) {
		return nil // covered by the data directory's lock
	}
	if strings.HasPrefix(o.Store, "pebble:") {
		_ = os.MkdirAll(filepath.Dir(abs), 0o755) // pebble creates its directory
	}
	err = a.take("run store", path, abs+".lock")
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no such directory: the store's Open reports it
	}
	return err
}

func (a *App) take(what, path, lockFile string) error {
	l, err := dirlock.Acquire(lockFile)
	if err != nil {
		if held, ok := errors.AsType[*dirlock.HeldError](err); ok {
			return &LockedError{What: what, Path: path, Lock: lockFile, PID: held.PID}
		}
		return fmt.Errorf("app: %s %s: %w", what, path, err)
	}
	a.locks = append(a.locks, l)
	return nil
}

// unlock releases the locks lock took.
func (a *App) unlock() error {
	var errs []error
	for _, l := range a.locks {
		errs = append(errs, l.Release())
	}
	a.locks = nil
	return errors.Join(errs...)
}
