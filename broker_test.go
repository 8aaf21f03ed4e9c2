package svc_test

import (
	"context"
	"errors"
	"fmt"
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

// A broker's error says whether trying again may help, through any
// wrapping, and keeps its cause for errors.Is.
func TestBrokerErrorTyping(t *testing.T) {
	cause := errors.New("connection reset")
	tr := svc.TransientBrokerError("redisbroker", "publish to svc.tasks.a", cause)
	if tr.Error() != "redisbroker: publish to svc.tasks.a: connection reset" {
		t.Errorf("Error() = %q", tr.Error())
	}
	wrapped := fmt.Errorf("dispatch: %w", tr)
	if !svc.IsTransientBrokerError(wrapped) || svc.IsPermanentBrokerError(wrapped) || !errors.Is(wrapped, cause) {
		t.Errorf("a wrapped transient error lost its type or cause: %v", wrapped)
	}
	pe := svc.PermanentBrokerError("natsbroker", "", errors.New("bad subject"))
	if pe.Error() != "natsbroker: bad subject" || !svc.IsPermanentBrokerError(pe) || svc.IsTransientBrokerError(pe) {
		t.Errorf("permanent error = %q, typed wrong", pe)
	}
	for _, sentinel := range []error{svc.ErrBrokerClosed, svc.ErrSettled} {
		if !svc.IsPermanentBrokerError(fmt.Errorf("x: %w", sentinel)) {
			t.Errorf("%v is not a permanent broker error", sentinel)
		}
	}
	if svc.ErrBrokerClosed.Error() != "broker: closed" {
		t.Errorf("ErrBrokerClosed says %q", svc.ErrBrokerClosed)
	}
	for _, other := range []error{nil, cause, context.Canceled} {
		if svc.IsTransientBrokerError(other) || svc.IsPermanentBrokerError(other) {
			t.Errorf("%v is typed as a broker error", other)
		}
	}
}
