package gopool

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunsEverythingAndReuses(t *testing.T) {
	p := New(time.Second)
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
	p := New(time.Second)
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

func TestIdleWorkersRetire(t *testing.T) {
	p := New(10 * time.Millisecond)
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		p.Go(func() { time.Sleep(time.Millisecond); wg.Done() })
	}
	wg.Wait()
	if p.Workers() == 0 {
		t.Fatal("no workers counted")
	}
	testutil.Eventually(t, "the idle workers to retire", func() bool { return p.Workers() == 0 })
	p.Close()
}

func TestGoAfterClose(t *testing.T) {
	p := New(time.Second)
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
