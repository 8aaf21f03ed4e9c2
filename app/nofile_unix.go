//go:build unix

package app

import "syscall"

// fileLimit is the process's limit of open file descriptors (Go raises
// the soft limit to the hard one at start), or 0 when it cannot be read.
func fileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return l.Cur
}
