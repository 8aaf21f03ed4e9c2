//go:build !unix

package app

// fileLimit is 0 where the descriptor limit cannot be read.
func fileLimit() uint64 { return 0 }
