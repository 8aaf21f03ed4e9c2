// Package dirlock takes an exclusive, advisory lock on a file that holds the
// PID of its owner, so that two svc processes never share a data directory
// or a store path. On Linux and the BSDs it is flock(2): the kernel drops the
// lock when the process dies, so a crash leaves no stale lock behind (the
// file stays, with the dead PID in it, and the next process takes it).
package dirlock

import (
	"fmt"
	"os"
)

// HeldError is returned by Acquire when another process (or another open of
// the same file in this process) holds the lock.
type HeldError struct {
	Path string // the lock file
	PID  int    // the holder's PID as written in the file; 0 when unknown
}

func (e *HeldError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("%s is locked by another process (PID unknown)", e.Path)
	}
	return fmt.Sprintf("%s is locked by another process (PID %d)", e.Path, e.PID)
}

// Lock is a held lock; Release gives it back.
type Lock struct {
	f    *os.File
	path string
}

// Path is the lock file.
func (l *Lock) Path() string { return l.path }

// Acquire creates path if needed, takes an exclusive lock on it without
// waiting, and writes this process's PID in it. When the lock is held it
// returns a *HeldError naming the holder's PID.
func Acquire(path string) (*Lock, error) {
	return acquire(path)
}

// Release drops the lock. The file stays (removing it would race with a
// process opening it to take the lock); its PID is cleared.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close() // closing the last descriptor releases the lock
	l.f = nil
	return err
}
