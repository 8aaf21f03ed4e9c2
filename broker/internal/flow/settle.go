package flow

import (
	"context"
	"sync"
	"time"
)

// State is where one delivery is in its settlement, for brokers that keep
// the ack deadline themselves (Kafka, AMQP): their servers have none short
// enough, so a reaper loop redelivers what passed it.
type State int

const (
	// Handling: in a handler, or abandoned by it; at its deadline the
	// reaper redelivers it.
	Handling State = iota
	// Delayed: nacked with a delay; redelivered at its deadline.
	Delayed
	// Settling: the broker is redelivering, dead-lettering or acking it;
	// neither the handler nor the reaper may touch it.
	Settling
	// Done: acked, redelivered or dead-lettered.
	Done
)

// Settlement is one delivery's state. The broker's lock (Acker.Mu) guards
// it.
type Settlement struct {
	State    State
	Deadline time.Time // Handling: the ack deadline; Delayed: when to redeliver
	// Lost: the broker no longer holds the delivery (its channel or
	// partition went) and the server gives it to someone else.
	Lost bool
}

// Start puts s in a handler with deadline at.
func (s *Settlement) Start(at time.Time) { *s = Settlement{State: Handling, Deadline: at} }

// Due reports whether the reaper should redeliver s now: its deadline
// passed while it was Handling or Delayed and it is not Lost. It moves s to
// Settling when so, and the reaper must then settle it.
func (s *Settlement) Due(now time.Time) bool {
	if (s.State == Handling || s.State == Delayed) && !s.Lost && now.After(s.Deadline) {
		s.State = Settling
		return true
	}
	return false
}

// ReapEvery is how often a reaper looks for deadlines passed: a tenth of
// the ack deadline, between 10ms and 250ms.
func ReapEvery(ackWait time.Duration) time.Duration {
	return min(max(ackWait/10, 10*time.Millisecond), 250*time.Millisecond)
}

// Acker is the handler's side of one delivery (an svc.Acknowledger): it
// moves the Settlement from Handling and hands the settling to the broker.
// A delivery whose deadline passed (the reaper took it) refuses with
// Expired; one whose channel or partition went, with Lost.
type Acker struct {
	Mu      sync.Locker
	S       *Settlement
	AckWait time.Duration
	Lost    error // the broker's error for a Lost delivery
	Expired error // the broker's error for a delivery no longer Handling
	// OnAck settles an acked delivery (already Settling).
	OnAck func(ctx context.Context) error
	// OnNack redelivers a delivery nacked without delay (already Settling).
	OnNack func(ctx context.Context) error
}

// move takes the Settlement from Handling to st with deadline at.
func (a *Acker) move(st State, at time.Time) error {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	switch {
	case a.S.Lost:
		return a.Lost
	case a.S.State != Handling:
		return a.Expired
	}
	a.S.State, a.S.Deadline = st, at
	return nil
}

// Ack hands the delivery to OnAck.
func (a *Acker) Ack(ctx context.Context) error {
	if err := a.move(Settling, time.Time{}); err != nil {
		return err
	}
	return a.OnAck(ctx)
}

// Nack hands the delivery to OnNack, or leaves it Delayed for the reaper
// to redeliver after delay (capped at the ack deadline: a member holding a
// message longer than that would look dead to the reaper's peers).
func (a *Acker) Nack(ctx context.Context, delay time.Duration) error {
	if delay > 0 {
		return a.move(Delayed, time.Now().Add(min(delay, a.AckWait)))
	}
	if err := a.move(Settling, time.Time{}); err != nil {
		return err
	}
	return a.OnNack(ctx)
}

// Take moves the delivery from Handling to Settling for a settlement the
// broker offers beyond svc.Acknowledger (a dead letter asked for by the
// handler), or explains why it cannot.
func (a *Acker) Take() error { return a.move(Settling, time.Time{}) }

// InProgress moves the deadline a full AckWait on.
func (a *Acker) InProgress(context.Context) error {
	return a.move(Handling, time.Now().Add(a.AckWait))
}
