//go:build pprof

package main

import "testing"

// TestServePprofLoopbackOnly checks that the profiling build refuses to
// serve its unauthenticated profiles anywhere but on loopback.
func TestServePprofLoopbackOnly(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:0", "example.com:0", "127.0.0.1"} {
		if err := servePprof(addr); err == nil {
			t.Errorf("servePprof(%q) = nil, want an error", addr)
		}
	}
}
