package ratelimit

import (
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// fakeClock is a clock the test moves. The Limiter's timer still runs on
// real time: the tests make the Limiter dispatch (an Acquire does) after
// moving the clock, rather than wait for it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// queuedAcquire starts an Acquire that must wait, and waits until it is
// queued; the channel gives its permit.
func queuedAcquire(t *testing.T, l *Limiter, run string, queued int) <-chan *Permit {
	t.Helper()
	got := make(chan *Permit, 1)
	go func() { got <- acquire(t, l, run, Normal, 0) }()
	waitQueued(t, l, queued)
	return got
}

// A learned limit paces the key at the limit the first answer's headers
// state (before them, only its window of a few calls at once holds it
// back), and when an answer says nothing remains it pauses until the
// reset.
func TestLearnsFromHeaders(t *testing.T) {
	clock := newFakeClock()
	l := newLimiter(t, Limit{}, Options{Learn: true, Now: clock.now})
	// Unseen: the start window, no pace.
	first := acquire(t, l, "a", Normal, 0)
	if s := l.Stats(); s.Limit != (Limit{}) || s.InFlight != 1 {
		t.Fatalf("before any answer: %+v; want no limit learned", s)
	}
	// The first answer: 120 a minute (2 a second, 1 at once), 119 left.
	first.Observe(&svc.RateHint{Requests: svc.RateWindow{Limit: 120, Remaining: 119, Reset: 500 * time.Millisecond}})
	first.Done(0, false, 0)
	if s := l.Stats(); s.Limit.RequestsPerMinute != 120 {
		t.Fatalf("after the first answer the limit is %+v; want 120 requests a minute learned", s.Limit)
	}
	second := acquire(t, l, "a", Normal, 0) // the pacer's one at once
	third := queuedAcquire(t, l, "a", 1)    // paced: the window of 5 would let it go
	if s := l.Stats(); s.InFlight != 1 {
		t.Fatalf("with the pace learned: %+v; want the third call waiting for its turn", s)
	}
	clock.advance(500 * time.Millisecond)
	p := acquireAfter(t, l, third) // half a second later its turn has come
	if p.Reason != "paced" {
		t.Errorf("the paced call's reason %q, want paced", p.Reason)
	}
	second.Done(0, false, 0)

	// An answer saying none remain, the limit whole again in 10 s: the
	// key pauses until then, however wide its window.
	p.Observe(&svc.RateHint{Requests: svc.RateWindow{Limit: 120, Remaining: 0, Reset: 10 * time.Second}})
	p.Done(0, false, 0)
	if s := l.Stats(); s.PausedMs != 10000 {
		t.Fatalf("after an answer with none remaining: paused %v ms, want 10000", s.PausedMs)
	}
	next := queuedAcquire(t, l, "a", 1)
	clock.advance(9 * time.Second)
	if q := dispatchNow(t, l); q != 1 {
		t.Fatalf("%d calls waiting a second before the reset; want the one", q)
	}
	clock.advance(time.Second)
	p = acquireAfter(t, l, next)
	if p.Reason != "paused" {
		t.Errorf("the paused call's reason %q, want paused", p.Reason)
	}
	p.Done(0, false, 0)
}

// The tokens-per-minute limit is learned the same way, and a 429 that
// says nothing remains pauses until the reset as well as halving the
// window.
func TestLearnsTokensFromHeaders(t *testing.T) {
	clock := newFakeClock()
	l := newLimiter(t, Limit{}, Options{Learn: true, Now: clock.now})
	p := acquire(t, l, "a", Normal, 0)
	p.Observe(&svc.RateHint{Tokens: svc.RateWindow{Limit: 6000, Remaining: 0, Reset: 3 * time.Second}, RetryAfter: time.Second})
	p.Done(0, true, time.Second)
	s := l.Stats()
	if s.Limit.TokensPerMinute != 6000 || s.PausedMs != 3000 || s.Learned != 2 || s.Throttled != 1 {
		t.Fatalf("after a 429 with no tokens left until 3 s: %+v; want 6,000 tokens a minute, paused 3 s, window halved to 2", s)
	}
	if l.tok == nil || l.tok.rate != 100 {
		t.Fatalf("token pacer %+v, want 100 a second", l.tok)
	}
}

// A declared limit is the user's word: answers' headers do not change it.
func TestDeclaredIgnoresHeaders(t *testing.T) {
	l := newLimiter(t, Limit{MaxConcurrent: 2}, Options{})
	p := acquire(t, l, "a", Normal, 0)
	p.Observe(&svc.RateHint{Requests: svc.RateWindow{Limit: 60, Remaining: 0, Reset: time.Minute}})
	p.Observe(nil)
	p.Done(0, false, 0)
	if s := l.Stats(); s.Limit != (Limit{MaxConcurrent: 2}) || s.PausedMs != 0 {
		t.Fatalf("a declared limit after an answer's headers: %+v", s)
	}
	acquire(t, l, "a", Normal, 0).Done(0, false, 0)
}

// acquireAfter makes l dispatch at the clock's time now and returns the
// permit that waited on got.
func acquireAfter(t *testing.T, l *Limiter, got <-chan *Permit) *Permit {
	t.Helper()
	dispatchNow(t, l)
	select {
	case p := <-got:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting call was not admitted when its turn came")
		return nil
	}
}

// dispatchNow makes l dispatch at its clock's time, as its timer would,
// and returns how many calls are then waiting.
func dispatchNow(t *testing.T, l *Limiter) int {
	t.Helper()
	l.fire()
	return l.Stats().Queued
}
