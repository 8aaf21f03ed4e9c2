package lean

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunsEverythingAndReuses(t *testing.T) {
	p := NewPool(time.Second)
	var n atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		p.Go(func() { n.Add(1); wg.Done() })
	}
	wg.Wait()
	if n.Load() != 1000 {
		t.Fatalf("ran %d of 1000", n.Load())
	}
	// A worker that is idle takes the next function instead of a new one.
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	p.Close()
}

func TestNeverBlocks(t *testing.T) {
	p := NewPool(time.Second)
	defer p.Close()
	release := make(chan struct{})
	var started sync.WaitGroup
	for i := 0; i < 100; i++ {
		started.Add(1)
		p.Go(func() { started.Done(); <-release })
	}
	started.Wait() // all 100 run at once: Go started new workers while others were busy
	close(release)
}

// Idle workers retire after the idle timeout, by the janitor's clock:
// synctest makes that clock exact and the wait free.
func TestIdleWorkersRetire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(time.Minute)
		defer p.Close()
		var wg sync.WaitGroup
		for i := 0; i < 10; i++ {
			wg.Add(1)
			p.Go(func() { time.Sleep(time.Millisecond); wg.Done() })
		}
		wg.Wait()
		synctest.Wait()
		if p.Workers() == 0 {
			t.Fatal("no workers counted")
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if p.Workers() == 0 {
			t.Fatal("workers retired long before the idle timeout")
		}
		time.Sleep(2 * time.Minute) // the timeout, and a janitor round after it
		synctest.Wait()
		if n := p.Workers(); n != 0 {
			t.Fatalf("%d idle workers did not retire", n)
		}
	})
}

func TestGoAfterClose(t *testing.T) {
	p := NewPool(time.Second)
	p.Close()
	done := make(chan struct{})
	p.Go(func() { close(done) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Go after Close did not run")
	}
	p.Close()
}

// Work handed to the pool while Close waits (a timer firing during a
// shutdown) runs, and Close still returns: the race detector flagged the
// WaitGroup Add that used to race with Close's Wait.
func TestGoDuringClose(t *testing.T) {
	for range 50 {
		p := NewPool(time.Second)
		var ran sync.WaitGroup
		ran.Add(2)
		p.Go(func() { ran.Done() })
		stop := make(chan struct{})
		go func() {
			<-stop
			p.Go(func() { ran.Done() })
		}()
		close(stop)
		p.Close()
		ran.Wait()
		p.Close()
	}
}

// Close does not wait for a function its owner detached (one stuck for
// good, as far as anyone knows); the worker still exits once it returns.
func TestCloseSkipsDetached(t *testing.T) {
	p := NewPool(time.Second)
	release := make(chan struct{})
	started := make(chan struct{})
	p.Go(func() { close(started); <-release })
	<-started
	p.Detach()
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Close waited for a detached function")
	}
	p.Rejoin()
	close(release)
	for p.Workers() != 0 {
		time.Sleep(time.Millisecond)
	}
}

// A bounded pool runs at most max functions at once; the rest wait, and
// each runs on a worker that finished, not on a new goroutine (the order
// of a one-worker queue is actors' TestDispatcherQueueDrains).
func TestBoundedQueuesInOrder(t *testing.T) {
	const max, n = 2, 100
	p := NewBoundedPool(time.Minute, max)
	release := make(chan struct{})
	var running, peak atomic.Int32
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		p.Go(func() {
			defer wg.Done()
			r := running.Add(1)
			defer running.Add(-1)
			for q := peak.Load(); r > q && !peak.CompareAndSwap(q, r); q = peak.Load() {
			}
			if i < max {
				<-release
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
	}
	if w, q := p.Workers(), p.Queued(); w != max || q != n-max {
		t.Errorf("with %d handed over and %d blocked: %d workers, %d queued; want %d and %d", n, max, w, q, max, n-max)
	}
	close(release)
	wg.Wait()
	if got := peak.Load(); got > max {
		t.Errorf("%d ran at once, want at most %d", got, max)
	}
	if len(order) != n {
		t.Fatalf("%d of %d ran", len(order), n)
	}
	// A worker goes idle just after its last function returns.
	deadline := time.Now().Add(10 * time.Second)
	for (p.Queued() != 0 || p.Busy() != 0) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if p.Queued() != 0 || p.Busy() != 0 {
		t.Errorf("after all ran: %d queued, %d busy", p.Queued(), p.Busy())
	}
	p.Close()
}

// Close runs what a bounded pool still has queued before it returns:
// nothing handed to the pool is dropped.
func TestBoundedCloseDrainsQueue(t *testing.T) {
	p := NewBoundedPool(time.Minute, 1)
	release := make(chan struct{})
	var ran atomic.Int32
	p.Go(func() { <-release; ran.Add(1) })
	for range 10 {
		p.Go(func() { ran.Add(1) })
	}
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a function was still running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-closed
	if got := ran.Load(); got != 11 {
		t.Fatalf("Close returned after %d of 11 functions ran", got)
	}
}
