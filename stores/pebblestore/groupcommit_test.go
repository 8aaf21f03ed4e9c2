package pebblestore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/stores/pebblestore"
)

// TestWritesShareASync: writes that queue while the writer is busy share
// one fsync, and each caller is answered only after it (every run is
// there once its Create returned); a refused write in the batch gets its
// own refusal and changes nothing.
func TestWritesShareASync(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	if err := s.Create(ctx, svc.RunRecord{RunID: "dup", Target: "echo", Kind: svc.TargetAgent}); err != nil {
		t.Fatal(err)
	}
	const n = 100
	hold := pebblestore.HoldWriteLock(s)
	var once sync.Once
	release := func() { once.Do(hold) }
	defer release() // a failed wait must not leave Close waiting for the writer
	sent := pebblestore.Sent(s)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		id := fmt.Sprint("r", i)
		if i == n/2 {
			id = "dup" // refused in the middle of the batch
		}
		wg.Go(func() {
			errs[i] = s.Create(ctx, svc.RunRecord{RunID: id, Target: "echo", Kind: svc.TargetAgent})
		})
	}
	// Every write handed over (Pending counts one from before its send).
	testutil.Eventually(t, "all writes enqueued", func() bool { return pebblestore.Pending(s) == n && pebblestore.Sent(s)-sent == n })
	before := pebblestore.Syncs(s)
	release()
	wg.Wait()
	for i, err := range errs {
		if i == n/2 {
			if !errorsIsRunState(err) {
				t.Fatalf("duplicate Create in a batch: %v, want a RunStateError", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Create r%d: %v", i, err)
		}
		if _, err := s.Get(ctx, fmt.Sprint("r", i)); err != nil {
			t.Fatalf("r%d answered but not stored: %v", i, err)
		}
	}
	if got := pebblestore.Syncs(s) - before; got > 2 {
		t.Fatalf("%d writes waited for %d fsyncs, want at most 2 (the batch the writer took first, then the rest)", n, got)
	}
}

func errorsIsRunState(err error) bool { return err != nil && svc.KindOf(err) == svc.KindRunState }
