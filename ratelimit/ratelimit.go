// Package ratelimit owns flow control toward model providers: a Limiter
// admits calls to one provider key (or one declared limit shared by
// several agents) at the pace its limits allow, queueing the others in
// order of priority and, within a priority, in turn across runs, so that
// a gather of 100,000 tasks does not starve a run that comes after it.
//
// A per-minute limit is paced evenly, never spent in one burst:
// providers enforce per-minute limits over shorter windows (6,000 a
// minute is 100 a second), so the buckets hold half a second's worth. A
// Limiter that learns (a key nobody declared a limit for) starts slow, a
// few calls at once, widens its window with each success and halves it
// at each 429, pausing until the provider's Retry-After: additive
// increase, multiplicative decrease, as TCP does.
//
// Waiting costs no goroutine: a waiting call blocks its own, and the
// Limiter wakes the next one from Done or from one timer armed for when
// the pace allows it. A call whose context ends leaves the queue at once.
package ratelimit

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/svc-dev/svc"
)

// Priority orders waiting calls: High before Normal before Low. The zero
// value is Normal.
type Priority uint8

// The priorities.
const (
	Normal Priority = iota
	High
	Low
	priorities
)

// rank is p's queue: High's first.
func (p Priority) rank() int {
	switch p {
	case High:
		return 0
	case Low:
		return 2
	}
	return 1
}

// ParsePriority reads "high", "normal" or "low"; "" is Normal.
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "high":
		return High, nil
	case "", "normal":
		return Normal, nil
	case "low":
		return Low, nil
	}
	return Normal, fmt.Errorf("priority %q: want high, normal or low", s)
}

func (p Priority) String() string {
	switch p {
	case High:
		return "high"
	case Low:
		return "low"
	}
	return "normal"
}

// Limit is what a limit allows: svc.RateLimit, whose zero fields do not
// limit.
type Limit = svc.RateLimit

// Learning: the window of calls at once a learning Limiter starts with,
// and the pause after a 429 that said no Retry-After.
const (
	startWindow  = 4
	defaultPause = time.Second
)

// Limiter admits calls under one Limit. It is safe for concurrent use.
type Limiter struct {
	name  string
	limit Limit
	learn bool
	now   func() time.Time

	mu       sync.Mutex
	req, tok *pacer // nil: not limited
	inFlight int
	// The learned window of calls at once (learn only), and the
	// threshold past which it grows by 1/window a success instead of 1.
	window, threshold float64
	pausedUntil       time.Time
	queues            [priorities]fairQueue
	queued            int
	timer             *time.Timer
	timerAt           time.Time
	closed            bool
	stats             counters
	shared            *sharedDraw // nil: the limit is this process's alone
}

// Options of New.
type Options struct {
	// Learn makes the Limiter learn a window of calls at once from the
	// provider's answers (a key nobody declared a limit for).
	Learn bool
	// Now is the clock (time.Now when nil): tests move it.
	Now func() time.Time
	// Shared, with a Store, makes a Set's named limits draw their
	// per-minute budgets from it, shared with the fleet (shared.go).
	Shared SharedOptions
}

// New returns a Limiter named name for lim (which lim.Validate accepts,
// or zero for one that only learns).
func New(name string, lim Limit, opts Options) *Limiter {
	l := &Limiter{name: name, limit: lim, learn: opts.Learn, now: opts.Now}
	if l.now == nil {
		l.now = time.Now
	}
	now := l.now()
	if lim.RequestsPerMinute > 0 {
		l.req = newPacer(lim.RequestsPerMinute, now)
	}
	if lim.TokensPerMinute > 0 {
		l.tok = newPacer(lim.TokensPerMinute, now)
	}
	if l.learn {
		l.window, l.threshold = startWindow, math.Inf(1)
	}
	if opts.Shared.Store != nil && !l.learn {
		l.shared = newSharedDraw(name, lim, opts.Shared)
	}
	for i := range l.queues {
		l.queues[i].runs = map[string]*list.List{}
	}
	return l
}

// Name is the limit's name.
func (l *Limiter) Name() string { return l.name }

// waiter is a call waiting for its turn.
type waiter struct {
	run     string
	prio    Priority
	tokens  int
	since   time.Time
	reason  string // why it waited at the head of the queue ("": it did not)
	ready   chan struct{}
	granted bool
	waited  time.Duration // set with granted
	elem    *list.Element
}

// Permit is an admitted call's turn; Done gives it back.
type Permit struct {
	l      *Limiter
	tokens int
	once   sync.Once
	// Waited is how long the call waited for its turn, and Reason why:
	// "paused" (a 429 paused the limit), "paced" (the per-minute pace),
	// "concurrency" (the calls at once), "queued" (behind other calls
	// only), or "" when it did not wait.
	Waited time.Duration
	Reason string
}

// Acquire waits for the turn of a call of run (the fairness key: the
// request that started it) at priority prio, estimated at tokens tokens,
// and returns its permit, or ctx's error once ctx ends (the call leaves
// the queue at once).
func (l *Limiter) Acquire(ctx context.Context, run string, prio Priority, tokens int) (*Permit, error) {
	if prio >= priorities {
		prio = Low
	}
	tokens = max(tokens, 0)
	w := &waiter{run: run, prio: prio, tokens: tokens, ready: make(chan struct{})}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("rate limit %s: closed", l.name)
	}
	w.since = l.now()
	l.queues[prio.rank()].push(w)
	l.queued++
	l.dispatchLocked(w.since)
	l.mu.Unlock()
	select {
	case <-w.ready:
		p := &Permit{l: l, tokens: tokens, Waited: w.waited, Reason: w.reason}
		if p.Waited > 0 && p.Reason == "" {
			p.Reason = "queued"
		}
		return p, nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	if w.granted {
		l.mu.Unlock()
		(&Permit{l: l, tokens: tokens}).Done(0, false, 0)
		return nil, ctx.Err()
	}
	l.queues[prio.rank()].remove(w)
	l.queued--
	l.stats.left++
	l.dispatchLocked(l.now())
	l.mu.Unlock()
	return nil, ctx.Err()
}

// Done ends the call: tokens is what it used (the token bucket is
// corrected by its difference from the estimate), throttled that the
// provider refused it for its rate limit, with retryAfter the pause the
// provider asked for (0: none said). Later calls are Done no-ops.
func (p *Permit) Done(tokens int, throttled bool, retryAfter time.Duration) {
	p.once.Do(func() { p.l.done(p.tokens, max(tokens, 0), throttled, retryAfter) })
}

func (l *Limiter) done(estimate, used int, throttled bool, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.inFlight--
	if l.tok != nil {
		l.tok.give(float64(estimate-used), now)
	}
	if l.shared != nil {
		l.shared.give(float64(estimate - used))
	}
	l.stats.tokens += uint64(used)
	l.stats.add(now, 0, int64(used))
	if throttled {
		l.stats.throttled++
		if retryAfter <= 0 {
			retryAfter = defaultPause
		}
		if until := now.Add(retryAfter); until.After(l.pausedUntil) {
			l.pausedUntil = until
		}
		if l.learn {
			l.threshold = max(l.window/2, 1)
			l.window = l.threshold
		}
	} else if l.learn {
		if l.window < l.threshold {
			l.window++
		} else {
			l.window += 1 / l.window
		}
	}
	l.dispatchLocked(now)
}

// concurrency is the calls allowed at once; 0 for no bound.
func (l *Limiter) concurrency() int {
	n := l.limit.MaxConcurrent
	if l.learn {
		w := max(int(l.window), 1)
		if n == 0 || w < n {
			n = w
		}
	}
	return n
}

// dispatchLocked admits waiting calls while the limits allow, and arms
// the timer for when the pace will allow the next one.
func (l *Limiter) dispatchLocked(now time.Time) {
	for l.queued > 0 && !l.closed {
		w := l.nextLocked()
		if now.Before(l.pausedUntil) {
			w.reason = "paused"
			l.armLocked(l.pausedUntil)
			return
		}
		if c := l.concurrency(); c > 0 && l.inFlight >= c {
			if w.reason == "" {
				w.reason = "concurrency"
			}
			return // Done dispatches again
		}
		var at time.Time
		if l.req != nil {
			if d := l.req.delay(1, now); d > 0 {
				at = now.Add(d)
			}
		}
		if l.tok != nil {
			if d := l.tok.delay(float64(w.tokens), now); d > 0 && now.Add(d).After(at) {
				at = now.Add(d)
			}
		}
		if at.IsZero() && l.shared != nil {
			if ok, d := l.shared.ready(l, float64(w.tokens), now); !ok {
				if w.reason == "" {
					w.reason = "paced"
				}
				if d > 0 {
					l.armLocked(now.Add(d))
				}
				return // else the draw from the store dispatches
			}
		}
		if !at.IsZero() {
			if w.reason == "" {
				w.reason = "paced"
			}
			l.armLocked(at)
			return
		}
		l.queues[w.prio.rank()].pop()
		l.queued--
		if l.req != nil {
			l.req.take(1, now)
		}
		if l.tok != nil {
			l.tok.take(float64(w.tokens), now)
		}
		if l.shared != nil {
			l.shared.take(float64(w.tokens), now)
		}
		l.inFlight++
		l.stats.calls++
		l.stats.add(now, 1, 0)
		w.waited = now.Sub(w.since)
		l.stats.wait(w.waited)
		w.granted = true
		close(w.ready)
	}
}

// nextLocked is the call whose turn is next: the highest priority with
// calls waiting, and in it the run whose turn it is.
func (l *Limiter) nextLocked() *waiter {
	for i := range l.queues {
		if w := l.queues[i].peek(); w != nil {
			return w
		}
	}
	return nil
}

// armLocked makes sure a dispatch runs at at (or earlier).
func (l *Limiter) armLocked(at time.Time) {
	if l.timer != nil && !l.timerAt.After(at) && l.timerAt.After(l.now()) {
		return // one runs before then already
	}
	d := at.Sub(l.now())
	if l.timer == nil {
		l.timer = time.AfterFunc(d, l.fire)
	} else {
		l.timer.Reset(d)
	}
	l.timerAt = at
}

func (l *Limiter) fire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dispatchLocked(l.now())
}

// Close stops the Limiter's timer; calls still waiting wait for their
// contexts to end. Later Acquires fail.
func (l *Limiter) Close() {
	l.mu.Lock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	if l.shared != nil {
		l.shared.close() // a draw in flight takes mu
	}
}

// Stats is a snapshot of a Limiter.
type Stats = svc.RateLimitStatus

// Stats returns the Limiter's figures now.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	s := Stats{Name: l.name, Limit: l.limit, Queued: l.queued, InFlight: l.inFlight,
		Calls: l.stats.calls, Tokens: l.stats.tokens, Throttled: l.stats.throttled, Left: l.stats.left}
	s.CallsPerMinute, s.TokensPerMinute = l.stats.lastMinute(now)
	if l.learn {
		s.Learned = math.Round(l.window*10) / 10
	}
	if d := l.pausedUntil.Sub(now); d > 0 {
		s.PausedMs = float64(d.Milliseconds())
	}
	s.WaitP50Ms, s.WaitP99Ms = l.stats.quantiles()
	if l.shared != nil {
		s.Shared, s.SharedFallback = l.shared.status(now)
	}
	return s
}

// counters are a Limiter's figures, under its mu.
type counters struct {
	calls, tokens, throttled, left uint64
	// secs are the calls and tokens of each of the last 60 seconds, by
	// the Unix second modulo 60, with the second they are of.
	secs   [60]struct{ at, calls, tokens int64 }
	waits  [1024]time.Duration // a ring of the last waits
	nWaits int
}

// add counts a call (calls 1) or tokens at now.
func (c *counters) add(now time.Time, calls, tokens int64) {
	sec := now.Unix()
	b := &c.secs[sec%60]
	if b.at != sec {
		b.at, b.calls, b.tokens = sec, 0, 0
	}
	b.calls += calls
	b.tokens += tokens
}

// lastMinute sums the calls and tokens of the last 60 seconds.
func (c *counters) lastMinute(now time.Time) (calls, tokens uint64) {
	sec := now.Unix()
	for _, b := range c.secs {
		if b.at > sec-60 && b.at <= sec {
			calls += uint64(b.calls)
			tokens += uint64(max(b.tokens, 0))
		}
	}
	return calls, tokens
}

func (c *counters) wait(d time.Duration) {
	c.waits[c.nWaits%len(c.waits)] = d
	c.nWaits++
}

func (c *counters) quantiles() (p50, p99 float64) {
	n := min(c.nWaits, len(c.waits))
	if n == 0 {
		return 0, 0
	}
	w := slices.Clone(c.waits[:n])
	slices.Sort(w)
	ms := func(q float64) float64 {
		return float64(w[min(int(q*float64(n)), n-1)].Microseconds()) / 1000
	}
	return ms(0.50), ms(0.99)
}

// fairQueue is the waiting calls of one priority: a FIFO per run, the
// runs served in turn.
type fairQueue struct {
	runs  map[string]*list.List // of *waiter
	order []string              // the runs with calls waiting, in turn order
	next  int                   // the index in order of the run whose turn it is
}

func (q *fairQueue) push(w *waiter) {
	l := q.runs[w.run]
	if l == nil {
		l = list.New()
		q.runs[w.run] = l
		q.order = append(q.order, w.run)
	}
	w.elem = l.PushBack(w)
}

func (q *fairQueue) peek() *waiter {
	if len(q.order) == 0 {
		return nil
	}
	q.next %= len(q.order)
	return q.runs[q.order[q.next]].Front().Value.(*waiter)
}

// pop takes the call peek returned and passes the turn to the next run.
func (q *fairQueue) pop() {
	run := q.order[q.next]
	l := q.runs[run]
	l.Remove(l.Front())
	if l.Len() == 0 {
		q.drop(run)
		return
	}
	q.next = (q.next + 1) % len(q.order)
}

func (q *fairQueue) remove(w *waiter) {
	l := q.runs[w.run]
	if l == nil {
		return
	}
	l.Remove(w.elem)
	if l.Len() == 0 {
		q.drop(w.run)
	}
}

// drop takes run, which has no call waiting, out of the turn order; the
// run after it has the turn.
func (q *fairQueue) drop(run string) {
	delete(q.runs, run)
	i := slices.Index(q.order, run)
	q.order = slices.Delete(q.order, i, i+1)
	if i < q.next {
		q.next--
	}
	if len(q.order) == 0 {
		q.next = 0
	} else {
		q.next %= len(q.order)
	}
}

// pacer paces a per-minute allowance evenly: it refills continuously at
// perMinute/60 a second and holds at most half a second's worth (at least
// one), so a minute's allowance never goes out at once. Half, not a whole
// second's: a provider enforcing the limit over a second then keeps room
// for the jitter between the pacer's clock and the calls' arrival (with a
// second's worth, 2 of 60 calls paced at the limit were refused). A call larger
// than what it holds goes once the pacer is full, leaving it in debt,
// which the next calls wait out.
type pacer struct {
	rate  float64 // units a second
	burst float64
	level float64 // may go below zero: a debt
	last  time.Time
}

func newPacer(perMinute float64, now time.Time) *pacer {
	rate := perMinute / 60
	burst := max(rate/2, 1)
	return &pacer{rate: rate, burst: burst, level: burst, last: now}
}

func (p *pacer) refill(now time.Time) {
	if now.After(p.last) {
		p.level = min(p.level+now.Sub(p.last).Seconds()*p.rate, p.burst)
		p.last = now
	}
}

// delay is how long a call of n units must wait from now.
func (p *pacer) delay(n float64, now time.Time) time.Duration {
	p.refill(now)
	need := min(n, p.burst) - p.level
	if need <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(need / p.rate * float64(time.Second)))
}

func (p *pacer) take(n float64, now time.Time) {
	p.refill(now)
	p.level -= n
}

// give returns n units (negative: takes them), as a call's actual use
// corrects its estimate.
func (p *pacer) give(n float64, now time.Time) {
	p.refill(now)
	p.level = min(p.level+n, p.burst)
}

// Set is the Limiters of a runtime: the named ones of its options
// (rate_limits), the per-model caps of the agents' max_concurrent_requests,
// and the learned ones of the provider keys nobody declared a limit for,
// made on first use. It is safe for concurrent use.
type Set struct {
	mu      sync.Mutex
	named   map[string]*Limiter
	other   map[string]*Limiter // capped and learned, by key
	closed  bool
	options Options
}

// NewSet returns the Set of the named limits (which svc.Options.Validate
// accepts).
func NewSet(limits map[string]svc.RateLimit, opts Options) *Set {
	s := &Set{named: make(map[string]*Limiter, len(limits)), other: map[string]*Limiter{}, options: opts}
	for name, lim := range limits {
		o := opts
		o.Learn = false // only the named limits are shared (Shared)
		s.named[name] = New(name, lim, o)
	}
	return s
}

// Named is the limit named name; false when there is none.
func (s *Set) Named(name string) (*Limiter, bool) {
	if s == nil {
		return nil, false
	}
	l, ok := s.named[name]
	return l, ok
}

// Capped is the limit of n calls at once to the model key names (an
// agent's max_concurrent_requests), shared by every agent with the same
// key and cap.
func (s *Set) Capped(key string, n int) *Limiter {
	name := fmt.Sprintf("%s (max_concurrent_requests %d)", key, n)
	return s.get(name, func() *Limiter { return New(name, Limit{MaxConcurrent: n}, s.options) })
}

// Learned is the learned limit of a provider key (provider, base URL,
// API key, model), made on first use.
func (s *Set) Learned(key string) *Limiter {
	return s.get(key, func() *Limiter {
		o := s.options
		o.Learn = true
		return New(key, Limit{}, o)
	})
}

func (s *Set) get(key string, make func() *Limiter) *Limiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.other[key]
	if l == nil {
		l = make()
		if s.closed {
			l.Close()
		}
		s.other[key] = l
	}
	return l
}

// Stats are the figures of every limit, by name.
func (s *Set) Stats() []Stats {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	ls := make([]*Limiter, 0, len(s.named)+len(s.other))
	for _, l := range s.named {
		ls = append(ls, l)
	}
	for _, l := range s.other {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	out := make([]Stats, len(ls))
	for i, l := range ls {
		out[i] = l.Stats()
	}
	slices.SortFunc(out, func(a, b Stats) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Close closes every limit.
func (s *Set) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	ls := make([]*Limiter, 0, len(s.named)+len(s.other))
	for _, l := range s.named {
		ls = append(ls, l)
	}
	for _, l := range s.other {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
}
