package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newLimiter(t *testing.T, lim Limit, opts Options) *Limiter {
	t.Helper()
	if err := lim.Validate(); err != nil && !opts.Learn {
		t.Fatal(err)
	}
	l := New("test", lim, opts)
	t.Cleanup(l.Close)
	return l
}

// acquire takes a permit or fails the test.
func acquire(t *testing.T, l *Limiter, run string, p Priority, tokens int) *Permit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pm, err := l.Acquire(ctx, run, p, tokens)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", run, err)
	}
	return pm
}

// A per-minute limit goes out evenly: half a second's worth at once, then
// at its rate, not a minute's worth in a burst.
func TestPacedEvenly(t *testing.T) {
	l := newLimiter(t, Limit{RequestsPerMinute: 600}, Options{}) // 10 a second
	const calls = 30
	start := time.Now()
	var wg sync.WaitGroup
	var at [calls]time.Duration
	for i := range calls {
		wg.Go(func() {
			acquire(t, l, "r", Normal, 0).Done(0, false, 0)
			at[i] = time.Since(start)
		})
	}
	wg.Wait()
	// 5 at once, the other 25 at 10 a second: 2.5 s at least. (An upper
	// bound would be a timing assertion; the machine may be slow.)
	if took := time.Since(start); took < 2300*time.Millisecond {
		t.Errorf("%d calls at 600/min took %v; want about 2.5 s (half a second's worth at once, then paced)", calls, took)
	}
	// The k-th call (from 0) goes no sooner than the pace allows: the
	// first 5 at once, then one every 100 ms.
	slices.Sort(at[:])
	for k, d := range at {
		if earliest := time.Duration(k-4) * 100 * time.Millisecond; d < earliest-20*time.Millisecond {
			t.Errorf("call %d went after %v; the pace allows it no sooner than %v", k, d, earliest)
		}
	}
	if s := l.Stats(); s.Calls != calls || s.Queued != 0 || s.InFlight != 0 {
		t.Errorf("stats %+v", s)
	}
}

// max_concurrent bounds the calls at once.
func TestMaxConcurrent(t *testing.T) {
	l := newLimiter(t, Limit{MaxConcurrent: 3}, Options{})
	var now, most atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			p := acquire(t, l, fmt.Sprint("r", i%4), Normal, 0)
			n := now.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			now.Add(-1)
			p.Done(0, false, 0)
		})
	}
	wg.Wait()
	if m := most.Load(); m > 3 || m < 1 {
		t.Errorf("%d calls at once, want at most 3", m)
	}
}

// waitQueued waits until n calls wait in l.
func waitQueued(t *testing.T, l *Limiter, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().Queued != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", l.Stats().Queued, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Waiting calls go by priority, and within one in turn across runs: a
// call of a run that comes after a big batch does not wait behind it.
func TestPriorityAndTurns(t *testing.T) {
	l := newLimiter(t, Limit{MaxConcurrent: 1}, Options{})
	hold := acquire(t, l, "first", Normal, 0)
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	start := func(run string, p Priority, label string, queued int) {
		wg.Go(func() {
			pm := acquire(t, l, run, p, 0)
			mu.Lock()
			order = append(order, label)
			mu.Unlock()
			pm.Done(0, false, 0)
		})
		waitQueued(t, l, queued)
	}
	for i := range 5 {
		start("batch", Normal, fmt.Sprint("batch", i), i+1)
	}
	start("batch-low", Low, "low", 6)
	start("sync", Normal, "sync", 7)
	start("urgent", High, "high", 8)
	hold.Done(0, false, 0)
	wg.Wait()
	want := []string{"high", "batch0", "sync", "batch1", "batch2", "batch3", "batch4", "low"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("admitted in the order %v, want %v", order, want)
	}
}

// A call whose context ends leaves the queue at once, and the calls
// behind it move up.
func TestCancelLeavesQueue(t *testing.T) {
	l := newLimiter(t, Limit{MaxConcurrent: 1}, Options{})
	hold := acquire(t, l, "a", Normal, 0)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "b", Normal, 0)
		errc <- err
	}()
	waitQueued(t, l, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire after cancel: %v", err)
	}
	if s := l.Stats(); s.Queued != 0 || s.Left != 1 {
		t.Errorf("after the cancel: %+v", s)
	}
	next := make(chan struct{})
	go func() { acquire(t, l, "c", Normal, 0).Done(0, false, 0); close(next) }()
	waitQueued(t, l, 1)
	hold.Done(0, false, 0)
	<-next
}

// The token bucket takes each call's estimate and the call's real use
// corrects it: an estimate too large is given back at Done.
func TestTokensCorrected(t *testing.T) {
	l := newLimiter(t, Limit{TokensPerMinute: 6000}, Options{}) // 100 a second
	first := acquire(t, l, "a", Normal, 100)                    // twice what the bucket holds: a debt
	got := make(chan time.Time, 1)
	go func() { acquire(t, l, "b", Normal, 100).Done(100, false, 0); got <- time.Now() }()
	waitQueued(t, l, 1)
	done := time.Now()
	first.Done(10, false, 0) // used 10: 90 come back
	at := <-got
	// Without the correction the second call waits a second for the
	// bucket to refill; with it, a tenth of one.
	if d := at.Sub(done); d > 500*time.Millisecond {
		t.Errorf("the second call waited %v after the first gave back 90 tokens; want it at once", d)
	}
	if s := l.Stats(); s.Tokens != 110 {
		t.Errorf("tokens %d, want 110 (the real uses)", s.Tokens)
	}
}

// A learning limiter starts with a few calls at once, widens with each
// success, and at a 429 halves its window and pauses for Retry-After.
func TestLearns(t *testing.T) {
	l := newLimiter(t, Limit{}, Options{Learn: true})
	var permits []*Permit
	for range startWindow {
		permits = append(permits, acquire(t, l, "a", Normal, 0))
	}
	admitted := make(chan *Permit, 100)
	for range 20 {
		go func() { admitted <- acquire(t, l, "a", Normal, 0) }()
	}
	waitQueued(t, l, 20)
	// Each success widens the window by one (slow start): two go.
	permits[0].Done(0, false, 0)
	permits = append(permits, <-admitted, <-admitted)
	if s := l.Stats(); s.InFlight != 5 || s.Queued != 18 || s.Learned != 5 {
		t.Fatalf("after one success: %+v; want 5 in flight (window 5), 18 queued", s)
	}
	// A 429 asking for 300 ms: the window halves (to 2) and nothing
	// goes before the pause ends, even as calls end.
	paused := time.Now()
	permits[1].Done(0, true, 300*time.Millisecond)
	for _, p := range permits[2:] {
		p.Done(0, false, 0)
	}
	p := <-admitted
	if d := time.Since(paused); d < 250*time.Millisecond {
		t.Errorf("a call went %v after a 429 asking for 300ms", d)
	}
	p.Done(0, false, 0)
	for range 17 {
		(<-admitted).Done(0, false, 0)
	}
	if s := l.Stats(); s.Throttled != 1 || s.Calls != 4+20 || s.Queued != 0 {
		t.Errorf("at the end: %+v", s)
	}
}

func TestValidate(t *testing.T) {
	for _, bad := range []Limit{{RequestsPerMinute: -1}, {TokensPerMinute: -5}, {MaxConcurrent: -1}, {}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if _, err := ParsePriority("urgent"); err == nil {
		t.Error(`priority "urgent" accepted`)
	}
}
