package svc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

type countAcker struct{ acks, nacks, extends atomic.Int32 }

func (c *countAcker) Ack(context.Context) error                 { c.acks.Add(1); return nil }
func (c *countAcker) Nack(context.Context, time.Duration) error { c.nacks.Add(1); return nil }
func (c *countAcker) InProgress(context.Context) error          { c.extends.Add(1); return nil }

func TestDeliverySettlesOnce(t *testing.T) {
	ctx := context.Background()
	a := &countAcker{}
	d := &svc.Delivery{Acker: a, AckWait: time.Second}
	if err := d.InProgress(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Nack(ctx, -time.Second); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{"Ack": d.Ack(ctx), "Nack": d.Nack(ctx, 0), "InProgress": d.InProgress(ctx)} {
		if !errors.Is(err, svc.ErrSettled) {
			t.Errorf("%s after Nack = %v, want ErrSettled", name, err)
		}
	}
	if a.acks.Load() != 0 || a.nacks.Load() != 1 || a.extends.Load() != 1 || !d.Settled() {
		t.Errorf("acker saw %d acks, %d nacks, %d extensions", a.acks.Load(), a.nacks.Load(), a.extends.Load())
	}
}

func TestSubscribeOptionsDefaults(t *testing.T) {
	o := svc.SubscribeOptions{}.WithDefaults("svc.tasks.a.b")
	if o.Group != "svc-svc-tasks-a-b" || o.ConsumerID == "" || o.Prefetch != svc.DefaultPrefetch ||
		o.AckWait != svc.DefaultAckWait || o.MaxDeliver != svc.DefaultMaxDeliver {
		t.Errorf("defaults = %+v", o)
	}
	if o2 := (svc.SubscribeOptions{}).WithDefaults("x"); o2.ConsumerID == o.ConsumerID {
		t.Error("two default consumer ids are equal")
	}
	if o := (svc.SubscribeOptions{MaxDeliver: -1}).WithDefaults("x"); o.MaxDeliver != -1 {
		t.Errorf("MaxDeliver -1 became %d", o.MaxDeliver)
	}
}
