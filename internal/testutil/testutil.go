// Package testutil holds the helpers the module's tests share. It imports
// testing, so production code must never import it (imports_test.go
// checks that only _test.go files do).
package testutil

import (
	"testing"
	"time"
)

// Limit is how long Eventually waits: long enough that only a hang
// reaches it on a loaded machine, so it catches hangs, not slowness.
const Limit = 10 * time.Second

// Eventually polls cond until it holds, failing t with what ("the run to
// finish") if it still does not after Limit. The polls start 1 ms apart
// and back off to 20 ms, so a condition that is nearly true costs little
// and one that takes seconds does not spin. Inside a testing/synctest
// bubble the sleeps are the bubble's, so waits cost no real time. Call it
// from the test's goroutine: it stops the test with t.Fatalf.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Limit, what, cond)
}

// Within is Eventually with a limit other than Limit, for waits that are
// slow by nature (a process starting, a server restarting with backoff).
func Within(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}
