package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// Shared is a store of limits' budgets that several processes draw on
// together (a fleet's broker): each key is a bucket that refills
// continuously at perMinute/60 units a second and holds at most burst.
// Implementations: ratelimit/redislimit, ratelimit/natslimit; the
// conformance suite is ratelimit/ratelimittest.
type Shared interface {
	// Take takes n units of key's bucket, all or nothing. Wait is 0 when
	// it took them, else how long until n would be there (nothing was
	// taken). node names the caller: Nodes counts the nodes that took
	// from key lately (the caller included), which a Limiter divides the
	// limit by when the store fails.
	Take(ctx context.Context, key, node string, n, perMinute, burst float64) (Grant, error)
	// Kind names the store in the stats: "redis", "nats".
	Kind() string
}

// Grant is a Shared store's answer to Take.
type Grant struct {
	Wait  time.Duration
	Nodes int
}

// SharedOptions make a Set's named limits draw on a Shared store.
type SharedOptions struct {
	Store Shared
	// Prefix starts every key (the limit's name follows it): a fleet
	// namespace.
	Prefix string
	// Nodes is the node count a limit is divided by when the store fails
	// before it answered once (afterwards the count the store last
	// reported); 1 when 0.
	Nodes int
	// Timeout bounds one Take; DefaultSharedTimeout when 0.
	Timeout time.Duration
}

// The shared draw's constants: a Take is bounded by DefaultSharedTimeout;
// after a failure the limit runs on its local share for fallbackFor
// before it tries the store again; a draw takes a tenth of a second's
// worth at a time, and waits as long after the store said no, so each
// node with calls waiting makes at most about ten round trips a second
// per limit, whatever the rate (measured with four nodes: about 2 a call
// at 1,200 calls a minute, 0.4 at 6,000).
const (
	DefaultSharedTimeout = 250 * time.Millisecond
	fallbackFor          = 2 * time.Second
	drawSeconds          = 0.1
)

// sharedDraw is a Limiter's link to a Shared store: the units it drew
// and has not spent yet, a draw in flight, and the local share it falls
// back on. Its fields are under the Limiter's mu.
type sharedDraw struct {
	store   Shared
	timeout time.Duration
	node    string
	req     *drawn // nil: no requests per minute
	tok     *drawn // nil: no tokens per minute
	nodes   int    // the last count the store reported (or configured)

	fetching bool
	retryAt  time.Time // the store said to wait until then
	// fallbackUntil: the store failed; until then the limit admits
	// through the local shares alone.
	fallbackUntil time.Time
	fallbacks     uint64
	ctx           context.Context
	cancel        context.CancelFunc
	wg            sync.WaitGroup
}

// drawn is one bucket's budget drawn from the store: reserve is what is
// left to spend (below zero after a call used more tokens than it said),
// local the pacer of the local share used while the store fails.
type drawn struct {
	key       string
	tokens    bool // the tokens bucket (else the requests one)
	perMinute float64
	reserve   float64
	local     *pacer
	localFor  int // the node count local was made for
}

func newSharedDraw(name string, lim Limit, o SharedOptions) *sharedDraw {
	if o.Timeout <= 0 {
		o.Timeout = DefaultSharedTimeout
	}
	d := &sharedDraw{store: o.Store, timeout: o.Timeout, node: nodeID(), nodes: max(o.Nodes, 1)}
	if lim.RequestsPerMinute > 0 {
		d.req = &drawn{key: o.Prefix + name + ":requests", perMinute: lim.RequestsPerMinute}
	}
	if lim.TokensPerMinute > 0 {
		d.tok = &drawn{key: o.Prefix + name + ":tokens", tokens: true, perMinute: lim.TokensPerMinute}
	}
	if d.req == nil && d.tok == nil {
		return nil // max_concurrent only: nothing to share
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

// nodeID names this Limiter to the store.
func nodeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ready reports whether a call of tokens tokens may go now: in fallback,
// by the local shares; else by the units drawn, starting a draw when they
// are short. d > 0 is when to look again (0: a draw will dispatch).
func (s *sharedDraw) ready(l *Limiter, tokens float64, now time.Time) (bool, time.Duration) {
	if now.Before(s.fallbackUntil) {
		var wait time.Duration
		for _, b := range []*drawn{s.req, s.tok} {
			if b != nil {
				wait = max(wait, b.localPacer(s.nodes, now).delay(b.need(tokens), now))
			}
		}
		return wait == 0, wait
	}
	short := (s.req != nil && s.req.reserve < 1) || (s.tok != nil && s.tok.reserve < tokens)
	if !short {
		return true, 0
	}
	if !s.fetching {
		if now.Before(s.retryAt) {
			return false, s.retryAt.Sub(now)
		}
		s.fetching = true
		s.wg.Add(1)
		go s.fetch(l, tokens)
	}
	return false, 0
}

// need is what a call of tokens tokens takes from b.
func (b *drawn) need(tokens float64) float64 {
	if b.tokens {
		return tokens
	}
	return 1
}

// localPacer is b's local share, for nodes nodes.
func (b *drawn) localPacer(nodes int, now time.Time) *pacer {
	if b.local == nil || b.localFor != nodes {
		b.local, b.localFor = newPacer(b.perMinute/float64(nodes), now), nodes
	}
	return b.local
}

// take spends a call's units.
func (s *sharedDraw) take(tokens float64, now time.Time) {
	for _, b := range []*drawn{s.req, s.tok} {
		if b == nil {
			continue
		}
		if now.Before(s.fallbackUntil) {
			b.localPacer(s.nodes, now).take(b.need(tokens), now)
		} else {
			b.reserve -= b.need(tokens)
		}
	}
}

// give corrects the token reserve by a call's actual use (n: its
// estimate less what it used).
func (s *sharedDraw) give(n float64) {
	if s.tok != nil {
		s.tok.reserve = min(s.tok.reserve+n, s.tok.perMinute/60*drawSeconds)
	}
}

// fetch draws a tenth of a second's worth (at least what the call at the
// head of the queue needs) of each short bucket, off the Limiter's lock,
// then dispatches again.
func (s *sharedDraw) fetch(l *Limiter, tokens float64) {
	defer s.wg.Done()
	var (
		wait  time.Duration
		nodes int
		err   error
	)
	l.mu.Lock()
	type ask struct {
		b *drawn
		n float64
	}
	var asks []ask
	for _, b := range []*drawn{s.req, s.tok} {
		if b == nil {
			continue
		}
		want := b.need(tokens)
		if b.reserve >= want {
			continue
		}
		n := max(b.perMinute/60*drawSeconds, want-b.reserve, 1)
		asks = append(asks, ask{b, n})
	}
	l.mu.Unlock()
	for _, a := range asks {
		ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
		var g Grant
		g, err = s.store.Take(ctx, a.b.key, s.node, a.n, a.b.perMinute, max(a.b.perMinute/60/2, a.n))
		cancel()
		if err != nil {
			break
		}
		nodes = max(nodes, g.Nodes)
		if g.Wait > 0 {
			wait = max(wait, g.Wait)
			continue
		}
		l.mu.Lock()
		a.b.reserve += a.n
		l.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s.fetching = false
	now := l.now()
	if nodes > 0 {
		s.nodes = nodes
	}
	if err != nil {
		if s.ctx.Err() != nil {
			return // closed
		}
		s.fallbackUntil = now.Add(fallbackFor)
		s.fallbacks++
		l.armLocked(s.fallbackUntil)
	} else if wait > 0 {
		// Not before a draw's time: the store's bucket holds half a
		// second, so nothing is lost, and a node with calls waiting makes
		// at most about ten round trips a second however many race it.
		s.retryAt = now.Add(max(wait, time.Duration(drawSeconds*float64(time.Second))))
	}
	l.dispatchLocked(now)
}

// status is what Stats shows of the draw.
func (s *sharedDraw) status(now time.Time) (kind string, fallback bool) {
	return s.store.Kind(), now.Before(s.fallbackUntil)
}

// close ends a draw in flight and waits for it. Not under the Limiter's
// mu: the draw takes it.
func (s *sharedDraw) close() {
	s.cancel()
	s.wg.Wait()
}
