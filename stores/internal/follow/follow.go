// Package follow is the live-follow loop of every run store's Stream: send
// the events after a position, wait for a wake-up, read again, until the
// run is terminal and every event was sent, the caller's context ends or
// the store closes. Stores differ only in how they read and what wakes
// them, which they give as a Source.
package follow

import (
	"context"
	"time"

	"github.com/svc-dev/svc"
)

// Backoff bounds between reads retried after an error (Source.Retry).
const (
	RetryMin = 50 * time.Millisecond
	RetryMax = 2 * time.Second
)

// Source is one stream's view of its run.
type Source struct {
	// Arm returns a channel that is ready (receives or is closed) at the
	// next change of the run after Arm was called. The loop arms before
	// each Read, so a change landing between a read and the wait that
	// follows it still wakes the wait. Nil: only Poll wakes the loop.
	Arm func() <-chan struct{}
	// Read returns events with Seq > after (events at or before after are
	// skipped if a source returns them). done says the run was terminal
	// when they were read and none follows them: the stream ends once they
	// are sent. more says the read was cut at a page: read again at once.
	Read func(ctx context.Context, after int64) (evs []svc.RunEvent, done, more bool, err error)
	// Poll, when positive, also reads every Poll: for writers this
	// process does not hear (another process sharing a file), or to
	// notice a run deleted under the stream.
	Poll time.Duration
	// Retry says whether a Read error may pass: the loop reads again after
	// a backoff from RetryMin doubling to RetryMax. Nil, or false: the
	// stream ends, as its channel cannot carry the error.
	Retry func(error) bool
}

// Run sends the run's events with Seq > after to out until the stream ends:
// the run is done (Source.Read), ctx ends, stop closes (the store's Close),
// or a read fails for good. The caller closes out after Run returns.
func Run(ctx context.Context, stop <-chan struct{}, after int64, src Source, out chan<- svc.RunEvent) {
	var tick <-chan time.Time
	if src.Poll > 0 {
		t := time.NewTicker(src.Poll)
		defer t.Stop()
		tick = t.C
	}
	backoff := RetryMin
	for {
		var wake <-chan struct{}
		if src.Arm != nil {
			wake = src.Arm()
		}
		evs, done, more, err := src.Read(ctx, after)
		if err != nil {
			if src.Retry == nil || !src.Retry(err) || !sleep(ctx, stop, backoff) {
				return
			}
			backoff = min(2*backoff, RetryMax)
			continue
		}
		backoff = RetryMin
		for _, ev := range evs {
			if ev.Seq <= after {
				continue
			}
			select {
			case out <- ev:
				after = ev.Seq
			case <-ctx.Done():
				return
			case <-stop:
				return
			}
		}
		if done {
			return
		}
		if more {
			continue
		}
		select {
		case <-wake:
		case <-tick:
		case <-ctx.Done():
			return
		case <-stop:
			return
		}
	}
}

// sleep waits d, reporting false if ctx ended or stop closed first.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}
