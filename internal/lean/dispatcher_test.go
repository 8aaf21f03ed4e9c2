package lean

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/testutil"
)

// A burst of scheduled mailboxes runs on at most max goroutines: the rest
// wait their turn instead of each starting a goroutine (a
// gather's spawn burst started thousands, each keeping an 8 KiB stack).
func TestDispatcherBoundsWorkers(t *testing.T) {
	const max, n = 3, 200
	pool := NewDispatcherPool(time.Minute, max)
	defer pool.Close()
	d := NewDispatcher(pool, 10)
	if d.Throughput() != 10 {
		t.Fatalf("Throughput() = %d, want 10", d.Throughput())
	}
	var running, peak atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var order []int
	wg.Add(n)
	for i := range n {
		d.Schedule(func() {
			defer wg.Done()
			r := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
			}
			if i < max {
				<-release // the first max hold their workers
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
	}
	if w := d.Workers(); w != max {
		t.Errorf("Workers() = %d with %d mailboxes scheduled, want %d", w, n, max)
	}
	close(release)
	wg.Wait()
	if p := peak.Load(); p > max {
		t.Errorf("%d mailboxes ran at once, want at most %d", p, max)
	}
	if len(order) != n {
		t.Fatalf("%d of %d mailboxes ran", len(order), n)
	}
	testutil.Eventually(t, "no mailbox worker left busy once all ran", func() bool { return d.Workers() == 0 })
}

// Mailboxes scheduled while every worker is busy run once one is free, in
// the order they were scheduled, and the queue starts over once drained.
func TestDispatcherQueueDrains(t *testing.T) {
	pool := NewDispatcherPool(time.Minute, 1)
	defer pool.Close()
	d := NewDispatcher(pool, 1)
	for round := range 3 {
		var wg sync.WaitGroup
		var order []int // one worker: no lock needed beyond wg
		wg.Add(5000)
		for i := range 5000 {
			d.Schedule(func() { order = append(order, i); wg.Done() })
		}
		wg.Wait()
		for i, v := range order {
			if v != i {
				t.Fatalf("round %d: mailbox %d ran %dth", round, v, i)
			}
		}
		if q := pool.Queued(); q != 0 {
			t.Fatalf("round %d: %d queued mailboxes left after all ran", round, q)
		}
	}
}
