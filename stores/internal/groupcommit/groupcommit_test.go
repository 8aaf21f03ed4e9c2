package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errClosed = errors.New("closed")

func closedErr() error { return errClosed }

// TestConcurrentWritesShareCommits: 1,000 concurrent writes are all
// committed, each answered with its own outcome, in fewer commits than
// writes while the commit is slow enough for others to queue behind it.
func TestConcurrentWritesShareCommits(t *testing.T) {
	var (
		mu      sync.Mutex
		commits int
		seen    = map[int]bool{}
		gate    = make(chan struct{})
	)
	q := New(Options{MaxBatch: 100}, func(batch []*Job[int]) {
		<-gate // the first commit holds the writer until many have queued
		mu.Lock()
		defer mu.Unlock()
		commits++
		if len(batch) > 100 {
			t.Errorf("batch of %d > MaxBatch", len(batch))
		}
		for _, j := range batch {
			if seen[j.Op] {
				t.Errorf("job %d committed twice", j.Op)
			}
			seen[j.Op] = true
			if j.Op%7 == 0 {
				j.Err = fmt.Errorf("refused %d", j.Op)
			}
		}
	}, closedErr)
	defer q.Close()
	const n = 1000
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = q.Do(context.Background(), i)
		}()
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		want := i%7 == 0
		if (err != nil) != want {
			t.Fatalf("job %d: err %v, want an error: %v", i, err, want)
		}
		if want && err.Error() != fmt.Sprint("refused ", i) {
			t.Fatalf("job %d got another job's answer: %v", i, err)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d of %d jobs committed", len(seen), n)
	}
	if commits >= n {
		t.Fatalf("%d commits for %d concurrent writes: nothing was grouped", commits, n)
	}
}

// TestCloseCommitsQueued: Close commits what was queued before it, answers
// those callers, and refuses later writes.
func TestCloseCommitsQueued(t *testing.T) {
	var (
		mu        sync.Mutex
		committed []int
	)
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	q := New(Options{}, func(batch []*Job[int]) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-gate
		mu.Lock()
		for _, j := range batch {
			committed = append(committed, j.Op)
		}
		mu.Unlock()
	}, closedErr)
	var wg sync.WaitGroup
	errs := make([]error, 10)
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = q.Do(context.Background(), 0) }()
	<-started // job 0 is being committed; the rest queue behind it
	for i := 1; i < 10; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = q.Do(context.Background(), i) }()
	}
	for len(q.ch) < 9 {
		runtime.Gosched() // until the nine are queued
	}
	closed := make(chan struct{})
	go func() { q.Close(); close(closed) }()
	close(gate)
	<-closed
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
	}
	if len(committed) != 10 {
		t.Fatalf("committed %v, want all 10", committed)
	}
	if err := q.Do(context.Background(), 11); !errors.Is(err, errClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
	q.Close() // idempotent
}

// TestCancelledJobIsSkipped: a write whose caller gave up before its batch
// began is not committed.
func TestCancelledJobIsSkipped(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	var got []int
	q := New(Options{}, func(batch []*Job[int]) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-gate
		for _, j := range batch {
			got = append(got, j.Op)
		}
	}, closedErr)
	done := make(chan error, 1)
	go func() { done <- q.Do(context.Background(), 1) }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	skipped := make(chan error, 1)
	go func() { skipped <- q.Do(ctx, 2) }()
	for len(q.ch) < 1 {
		runtime.Gosched()
	}
	cancel()
	if err := <-skipped; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Do: %v", err)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	q.Close()
	if len(got) != 1 || got[0] != 1 {
		t.Fatalf("committed %v, want [1]", got)
	}
}

// TestWritersOverlap: with several writers, batches are committed at once
// (the second starts while the first is still in its commit), and every
// job is answered once.
func TestWritersOverlap(t *testing.T) {
	var (
		inCommit atomic.Int32
		overlap  atomic.Bool
		mu       sync.Mutex
		seen     = map[int]int{}
	)
	gate := make(chan struct{})
	// Two writers may both see the overlap: the gate is closed once.
	var openGate sync.Once
	q := New(Options{MaxBatch: 10, Writers: 3}, func(batch []*Job[int]) {
		if inCommit.Add(1) > 1 {
			overlap.Store(true)
			openGate.Do(func() { close(gate) })
		}
		select { // the first batch waits until another one overlaps it
		case <-gate:
		case <-time.After(10 * time.Second): // one writer only: fail, do not hang
		}
		mu.Lock()
		for _, j := range batch {
			seen[j.Op]++
		}
		mu.Unlock()
		inCommit.Add(-1)
	}, closedErr)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			if err := q.Do(context.Background(), i); err != nil {
				t.Errorf("job %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	q.Close()
	if !overlap.Load() {
		t.Fatal("no two batches were committed at once")
	}
	for i := range 100 {
		if seen[i] != 1 {
			t.Fatalf("job %d committed %d times", i, seen[i])
		}
	}
}
