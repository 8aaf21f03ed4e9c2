package fleetwire

import (
	"context"
	"time"

	"github.com/svc-dev/svc"
)

// KeepAlive extends d's deadline every interval (AckWait/3 when interval is
// 0) until the returned stop is called, ctx ends or d is settled. stop waits
// for the extending goroutine to exit and may be called more than once.
func KeepAlive(ctx context.Context, d *svc.Delivery, interval time.Duration) (stop func()) {
	if interval <= 0 {
		interval = d.AckWait / 3
		if interval <= 0 {
			interval = svc.DefaultAckWait / 3
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if d.Settled() {
					return
				}
				_ = d.InProgress(ctx) // a failed extension shows up as a redelivery
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
