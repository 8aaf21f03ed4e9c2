package actors

import (
	"sync"

	"github.com/svc-dev/svc"
)

// Progress counts the invocations of one top-level run across the actors
// that run them (a group's nodes each have their own run actor) and reports
// every change to a svc.ProgressFunc. A nil *Progress ignores everything, so
// runs nobody watches pay nothing.
type Progress struct {
	mu sync.Mutex
	p  svc.RunProgress
	fn svc.ProgressFunc
}

// NewProgress returns a tracker reporting to fn, or nil when fn is nil.
func NewProgress(fn svc.ProgressFunc) *Progress {
	if fn == nil {
		return nil
	}
	return &Progress{fn: fn}
}

// Add changes the counts and reports the new totals. fn is called under the
// lock so reports arrive in order; it must be quick.
func (p *Progress) Add(total, running, completed, failed int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p.Total += total
	p.p.Running += running
	p.p.Completed += completed
	p.p.Failed += failed
	p.fn(p.p)
}

// Snapshot returns the current counts.
func (p *Progress) Snapshot() svc.RunProgress {
	if p == nil {
		return svc.RunProgress{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.p
}
