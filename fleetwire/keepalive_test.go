package fleetwire_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/fleetwire"
)

type countAcker struct{ acks, nacks, extends atomic.Int32 }

func (c *countAcker) Ack(context.Context) error                 { c.acks.Add(1); return nil }
func (c *countAcker) Nack(context.Context, time.Duration) error { c.nacks.Add(1); return nil }
func (c *countAcker) InProgress(context.Context) error          { c.extends.Add(1); return nil }

func TestKeepAlive(t *testing.T) {
	a := &countAcker{}
	d := &svc.Delivery{Acker: a, AckWait: 30 * time.Millisecond}
	stop := fleetwire.KeepAlive(context.Background(), d, 0) // every AckWait/3
	for a.extends.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	_ = d.Ack(context.Background())
	stop()
	stop() // twice is fine
	n := a.extends.Load()
	time.Sleep(50 * time.Millisecond)
	if a.extends.Load() != n {
		t.Error("KeepAlive went on after stop")
	}
}
