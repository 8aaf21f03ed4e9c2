//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package dirlock

import (
	"fmt"
	"runtime"
)

// acquire fails: without flock(2) the lock could not be released by the
// kernel when its holder dies, and a stale lock file would keep the next
// server out.
func acquire(path string) (*Lock, error) {
	return nil, fmt.Errorf("lock %s: locking a data directory is not supported on %s", path, runtime.GOOS)
}
