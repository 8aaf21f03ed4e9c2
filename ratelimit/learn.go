package ratelimit

import (
	"time"

	"github.com/svc-dev/svc"
)

// Observe tells the call's limit what the provider's answer said of its
// rate limits (its headers, read by package model), success or 429. A
// learning Limiter paces the key at the per-minute limits the answers
// state, from the first answer on (until then its window of a few calls
// at once holds it back), keeps its pacers no fuller than what the
// provider says remains, and pauses until the reset when nothing remains.
// A 429 still halves the window, in Done. A Limiter that does not learn
// (a declared limit, or a cap) ignores it, as it does a nil h. Call it
// before Done, so that the calls Done admits go at the pace learned.
func (p *Permit) Observe(h *svc.RateHint) {
	if h == nil || !p.l.learn {
		return
	}
	p.l.observe(h)
}

func (l *Limiter) observe(h *svc.RateHint) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if w := h.Requests; w.Limit > 0 {
		l.req = learnPace(l.req, w, now)
		l.limit.RequestsPerMinute = float64(w.Limit)
		l.pauseForLocked(w, now)
	}
	if w := h.Tokens; w.Limit > 0 {
		l.tok = learnPace(l.tok, w, now)
		l.limit.TokensPerMinute = float64(w.Limit)
		l.pauseForLocked(w, now)
	}
	if !l.closed {
		l.dispatchLocked(now)
	}
}

// pauseForLocked pauses the Limiter until w's reset when nothing of w
// remains: the provider would refuse every call before then.
func (l *Limiter) pauseForLocked(w svc.RateWindow, now time.Time) {
	if w.Remaining > 0 || w.Reset <= 0 {
		return
	}
	if until := now.Add(w.Reset); until.After(l.pausedUntil) {
		l.pausedUntil = until
	}
}

// learnPace is p (nil: a new pacer) set to the per-minute limit w states
// and holding no more than the w.Remaining the provider has left: a
// provider's answers are the truth about a key that other clients, or the
// calls before this pacer existed, draw from too.
func learnPace(p *pacer, w svc.RateWindow, now time.Time) *pacer {
	perMinute := float64(w.Limit)
	if p == nil {
		p = newPacer(perMinute, now)
	} else if rate := perMinute / 60; rate != p.rate {
		p.refill(now)
		p.rate, p.burst = rate, max(rate/2, 1)
		p.level = min(p.level, p.burst)
	}
	p.refill(now)
	p.level = min(p.level, float64(w.Remaining))
	return p
}
