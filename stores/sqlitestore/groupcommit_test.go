package sqlitestore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/testutil"
	"github.com/svc-dev/svc/stores/sqlitestore"
	"github.com/svc-dev/svc/stores/storetest"
)

// TestContractOneWritePerCommit runs the suite with group commit off
// (MaxBatch 1), the path a failed batch falls back to and the benchmarks'
// baseline.
func TestContractOneWritePerCommit(t *testing.T) {
	t.Parallel() // its own server or files: the suites overlap their waits
	storetest.Run(t, func(t *testing.T) svc.RunStore {
		s, err := sqlitestore.OpenWith(filepath.Join(t.TempDir(), "runs.db"), sqlitestore.Options{MaxBatch: 1})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}

// TestWritesShareACommit: writes that queue while the writer is busy are
// committed together, one transaction for all of them, and each caller is
// answered only after it (every run is there once its Create returned).
func TestWritesShareACommit(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "runs.db"))
	const n = 100
	hold := sqlitestore.HoldWriter(t, s)
	var once sync.Once
	release := func() { once.Do(hold) }
	defer release() // a failed wait must not leave Close waiting for the writer
	sent := sqlitestore.Sent(s)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = s.Create(context.Background(), svc.RunRecord{RunID: fmt.Sprint("r", i), Target: "echo", Kind: svc.TargetAgent})
		})
	}
	// The writer took a first batch and waits for the connection; the
	// others queue behind it.
	// Every write handed over (Pending counts one from before its send).
	testutil.Eventually(t, "all writes enqueued", func() bool { return sqlitestore.Pending(s) == n && sqlitestore.Sent(s)-sent == n })
	before := sqlitestore.Commits(s)
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Create r%d: %v", i, err)
		}
		if _, err := s.Get(context.Background(), fmt.Sprint("r", i)); err != nil {
			t.Fatalf("r%d answered but not stored: %v", i, err)
		}
	}
	if got := sqlitestore.Commits(s) - before; got > 2 {
		t.Fatalf("%d writes took %d commits, want at most 2 (the batch the writer took first, then the rest)", n, got)
	}
}
