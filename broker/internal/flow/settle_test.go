package flow

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

var (
	errLost    = errors.New("lost")
	errExpired = errors.New("expired")
)

type fake struct {
	mu          sync.Mutex
	s           Settlement
	acks, nacks int
}

func (f *fake) acker() *Acker {
	return &Acker{Mu: &f.mu, S: &f.s, AckWait: time.Minute, Lost: errLost, Expired: errExpired,
		OnAck:  func(context.Context) error { f.acks++; f.s.State = Done; return nil },
		OnNack: func(context.Context) error { f.nacks++; f.s.State = Done; return nil },
	}
}

func newFake(deadline time.Time) *fake {
	f := &fake{}
	f.s.Start(deadline)
	return f
}

func TestAckAndNackHandOver(t *testing.T) {
	ctx := context.Background()
	f := newFake(time.Now().Add(time.Minute))
	if err := f.acker().Ack(ctx); err != nil || f.acks != 1 || f.s.State != Done {
		t.Fatalf("Ack: err %v, acks %d, state %v", err, f.acks, f.s.State)
	}
	if err := f.acker().Nack(ctx, 0); !errors.Is(err, errExpired) || f.nacks != 0 {
		t.Errorf("Nack after Ack: err %v, nacks %d; want the expired error and no redelivery", err, f.nacks)
	}
	f = newFake(time.Now().Add(time.Minute))
	if err := f.acker().Nack(ctx, 0); err != nil || f.nacks != 1 {
		t.Fatalf("Nack: err %v, nacks %d", err, f.nacks)
	}
}

func TestNackWithDelayWaitsForTheReaper(t *testing.T) {
	f := newFake(time.Now().Add(time.Minute))
	a := f.acker()
	a.AckWait = time.Second
	before := time.Now()
	if err := a.Nack(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if f.s.State != Delayed || f.nacks != 0 {
		t.Fatalf("state %v, nacks %d; want Delayed and no redelivery yet", f.s.State, f.nacks)
	}
	if f.s.Deadline.After(before.Add(2 * time.Second)) {
		t.Errorf("delay not capped at AckWait: deadline %v after nack at %v", f.s.Deadline, before)
	}
	if f.s.Due(before) {
		t.Error("due before its delay ended")
	}
	if !f.s.Due(f.s.Deadline.Add(time.Millisecond)) || f.s.State != Settling {
		t.Errorf("not due after its delay: state %v", f.s.State)
	}
	if f.s.Due(f.s.Deadline.Add(time.Hour)) {
		t.Error("due twice: the reaper would redeliver it twice")
	}
}

func TestDeadlinePassed(t *testing.T) {
	f := newFake(time.Now().Add(-time.Millisecond))
	if !f.s.Due(time.Now()) {
		t.Fatal("a delivery past its deadline is not due")
	}
	a := f.acker()
	for name, settle := range map[string]func() error{
		"Ack":        func() error { return a.Ack(context.Background()) },
		"Nack":       func() error { return a.Nack(context.Background(), 0) },
		"InProgress": func() error { return a.InProgress(context.Background()) },
	} {
		if err := settle(); !errors.Is(err, errExpired) {
			t.Errorf("%s after the reaper took it = %v, want the expired error", name, err)
		}
	}
	if f.acks+f.nacks != 0 {
		t.Errorf("settled %d times after the reaper took it", f.acks+f.nacks)
	}
}

func TestInProgressMovesTheDeadline(t *testing.T) {
	f := newFake(time.Now().Add(10 * time.Millisecond))
	if err := f.acker().InProgress(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.s.Due(time.Now().Add(time.Second)) {
		t.Error("due a second on, though InProgress gave it a minute")
	}
}

func TestLost(t *testing.T) {
	f := newFake(time.Now().Add(-time.Second))
	f.s.Lost = true
	if f.s.Due(time.Now()) {
		t.Error("a lost delivery is due: the server redelivers it, not the reaper")
	}
	if err := f.acker().Ack(context.Background()); !errors.Is(err, errLost) || f.acks != 0 {
		t.Errorf("Ack of a lost delivery = %v (acks %d), want the lost error", err, f.acks)
	}
}

func TestTake(t *testing.T) {
	f := newFake(time.Now().Add(time.Minute))
	a := f.acker()
	if err := a.Take(); err != nil || f.s.State != Settling {
		t.Fatalf("Take = %v, state %v; want Settling", err, f.s.State)
	}
	if f.s.Due(time.Now().Add(time.Hour)) {
		t.Error("a delivery taken by the broker is due for the reaper")
	}
	if err := a.Ack(context.Background()); !errors.Is(err, errExpired) || f.acks != 0 {
		t.Errorf("Ack after Take = %v; want the expired error", err)
	}
}
