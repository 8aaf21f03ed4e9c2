package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/ratelimit"
	"github.com/svc-dev/svc/ratelimit/ratelimittest"
)

// hammer acquires and ends calls of l from workers goroutines until
// stop, and returns how many it was admitted.
func hammer(t *testing.T, l *ratelimit.Limiter, workers int, stop time.Time) int64 {
	t.Helper()
	var n atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ctx, cancel := context.WithDeadline(context.Background(), stop)
				p, err := l.Acquire(ctx, "run", ratelimit.Normal, 0)
				cancel()
				if err != nil {
					return // stop
				}
				n.Add(1)
				p.Done(0, false, 0)
			}
		}()
	}
	wg.Wait()
	return n.Load()
}

// Four processes' limiters of one named limit, drawing on one store,
// admit together what the limit allows, not four times it.
func TestSharedFleetStaysWithinTheLimit(t *testing.T) {
	store := ratelimittest.NewMemory()
	const perMinute = 1200.0 // 20 a second
	limits := map[string]svc.RateLimit{"api": {RequestsPerMinute: perMinute}}
	var sets []*ratelimit.Set
	for range 4 {
		s := ratelimit.NewSet(limits, ratelimit.Options{Shared: ratelimit.SharedOptions{Store: store, Prefix: "fleet:"}})
		t.Cleanup(s.Close)
		sets = append(sets, s)
	}
	start := time.Now()
	stop := start.Add(2 * time.Second)
	var total atomic.Int64
	var wg sync.WaitGroup
	for _, s := range sets {
		l, _ := s.Named("api")
		wg.Add(1)
		go func() { defer wg.Done(); total.Add(hammer(t, l, 8, stop)) }()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	got := float64(total.Load())
	// The store holds half a second's worth and refills at the limit.
	most := perMinute/60/2 + perMinute/60*elapsed
	if got > most || got < perMinute/60*2*0.7 {
		t.Errorf("4 limiters admitted %v in %.2fs: want at most %.1f (the limit) and at least 70%% of it", got, elapsed, most)
	}
	t.Logf("admitted %v in %.2fs (limit %.1f), %d takes from the store", got, elapsed, perMinute/60*elapsed, store.Takes.Load())
	for _, s := range sets {
		st := s.Stats()
		if len(st) != 1 || st[0].Shared != "memory" || st[0].SharedFallback {
			t.Errorf("stats %+v: want shared memory, no fallback", st)
		}
	}
}

// A store that fails costs no call its turn: the limit runs on its local
// share (the limit over the configured nodes), and says so.
func TestSharedStoreFailsFallsBackOnTheLocalShare(t *testing.T) {
	store := ratelimittest.NewMemory()
	store.Failing.Store(true)
	const perMinute = 1200.0 // 20 a second; 5 a second for each of 4 nodes
	s := ratelimit.NewSet(map[string]svc.RateLimit{"api": {RequestsPerMinute: perMinute}},
		ratelimit.Options{Shared: ratelimit.SharedOptions{Store: store, Nodes: 4}})
	t.Cleanup(s.Close)
	l, _ := s.Named("api")
	start := time.Now()
	got := float64(hammer(t, l, 4, start.Add(1500*time.Millisecond)))
	elapsed := time.Since(start).Seconds()
	share := perMinute / 60 / 4
	if most := share/2 + share*elapsed + 1; got > most || got < 2 {
		t.Errorf("admitted %v in %.2fs with the store failing: want between 2 and %.1f (the local share)", got, elapsed, most)
	}
	st := l.Stats()
	if st.Shared != "memory" || !st.SharedFallback {
		t.Errorf("stats shared %q fallback %v: want memory, true", st.Shared, st.SharedFallback)
	}
	// The store back, the limit draws on it again.
	store.Failing.Store(false)
	time.Sleep(2100 * time.Millisecond)
	before := store.Takes.Load()
	p, err := l.Acquire(context.Background(), "run", ratelimit.Normal, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Done(0, false, 0)
	if store.Takes.Load() == before || l.Stats().SharedFallback {
		t.Errorf("after the fallback: takes %d -> %d, fallback %v: want a take from the store", before, store.Takes.Load(), l.Stats().SharedFallback)
	}
}

// A store that never answers costs a call a bounded wait, not its run.
func TestSharedStoreHangsCostsABoundedWait(t *testing.T) {
	store := ratelimittest.NewMemory()
	store.Hang.Store(true)
	s := ratelimit.NewSet(map[string]svc.RateLimit{"api": {RequestsPerMinute: 600}},
		ratelimit.Options{Shared: ratelimit.SharedOptions{Store: store, Timeout: 50 * time.Millisecond}})
	t.Cleanup(s.Close)
	l, _ := s.Named("api")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := l.Acquire(ctx, "run", ratelimit.Normal, 0)
	if err != nil {
		t.Fatalf("Acquire with the store hanging: %v", err)
	}
	p.Done(0, false, 0)
	if !l.Stats().SharedFallback {
		t.Error("stats: want shared_fallback")
	}
}

// Close ends a draw in flight (goleak checks its goroutine is gone).
func TestSharedCloseEndsADraw(t *testing.T) {
	store := ratelimittest.NewMemory()
	store.Hang.Store(true)
	s := ratelimit.NewSet(map[string]svc.RateLimit{"api": {RequestsPerMinute: 600}},
		ratelimit.Options{Shared: ratelimit.SharedOptions{Store: store, Timeout: time.Hour}})
	l, _ := s.Named("api")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(ctx, "run", ratelimit.Normal, 0); done <- err }()
	for l.Stats().Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	s.Close()
	cancel()
	if err := <-done; err == nil {
		t.Error("Acquire admitted with the store hanging and the limit closed")
	}
}

// Only the named limits are shared: a model's cap and a learned key are
// this process's.
func TestSharedOnlyNamed(t *testing.T) {
	store := ratelimittest.NewMemory()
	s := ratelimit.NewSet(map[string]svc.RateLimit{"conc": {MaxConcurrent: 2}},
		ratelimit.Options{Shared: ratelimit.SharedOptions{Store: store}})
	t.Cleanup(s.Close)
	s.Learned("openai|key|gpt")
	s.Capped("openai|key|gpt", 3)
	for _, st := range s.Stats() {
		if st.Shared != "" {
			t.Errorf("%s: shared %q, want local (nothing per minute to share, or not named)", st.Name, st.Shared)
		}
	}
}
