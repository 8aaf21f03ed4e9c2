package model

import (
	"context"
	"errors"
	"time"
)

// ErrStreamIdle is the cause of a streamed call's context ended by its
// IdleWatch.
var ErrStreamIdle = errors.New("stream idle")

// IdleWatch ends a streamed call that receives nothing for its idle
// timeout, as the providers' stream_idle_timeout_ms asks: the call runs
// in the context WatchIdle returns, Touch (once the response began, then
// at each chunk) restarts the wait, and Fired tells an idle end from any
// other. The wait starts at the first Touch, so the time to the
// response's headers is the transport's to bound, not the stream's.
type IdleWatch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	d      time.Duration
	timer  *time.Timer // from the first Touch
}

// WatchIdle returns the context a streamed call runs in and its watch;
// Stop releases both.
func WatchIdle(ctx context.Context, d time.Duration) (context.Context, *IdleWatch) {
	w := &IdleWatch{d: d}
	w.ctx, w.cancel = context.WithCancelCause(ctx)
	return w.ctx, w
}

// Touch starts the wait for the next chunk, or restarts it. Touch and Stop
// are called by the goroutine that reads the stream.
func (w *IdleWatch) Touch() {
	if w.timer == nil {
		w.timer = time.AfterFunc(w.d, func() { w.cancel(ErrStreamIdle) })
		return
	}
	w.timer.Reset(w.d)
}

// Fired reports whether the watch ended the call.
func (w *IdleWatch) Fired() bool { return errors.Is(context.Cause(w.ctx), ErrStreamIdle) }

// Stop stops the wait and ends the call's context.
func (w *IdleWatch) Stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
	w.cancel(nil)
}
