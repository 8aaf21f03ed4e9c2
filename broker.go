package svc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// Broker carries messages between the processes of a fleet: tasks from a
// publisher to competing workers, results back to the publisher, and
// broadcasts (worker lifecycle, cancel, relayed events) to every listener.
//
// It has two kinds of subject, used through different methods:
//
//   - Work subjects (Publish, Subscribe): every message is stored by the
//     broker until one member of the subject's consumer group acknowledges
//     it. Delivery is at least once: a message a member does not acknowledge
//     before its ack deadline (because it died, hung or gave it back with
//     Nack) is delivered again, to that member or another, with its Attempt
//     counting up; after SubscribeOptions.MaxDeliver deliveries it goes to
//     the dead letter instead. Order is not guaranteed once redeliveries
//     happen.
//   - Broadcast subjects (Broadcast, SubscribeBroadcast): every subscriber
//     connected at the time sees the message, at most once; nothing is
//     stored and nothing is acknowledged.
//
// Subjects are dot-separated tokens ("svc.tasks.triage"); brokers match
// them exactly (no wildcards). A work subject has one consumer group:
// every member subscribes with the same Group, and a broker may refuse a
// second group on the same subject (NATS work queues do).
//
// Every method is safe for concurrent use. Every goroutine a broker starts
// is stopped by Subscription.Stop or Broker.Close.
type Broker interface {
	// Scheme names the kind of broker ("memory", "nats", "redis"); events
	// carry it as broker_scheme and as backend "broker:<scheme>".
	Scheme() string

	// Publish stores data on the work subject. It returns once the broker
	// has accepted the message (a JetStream publish ack, an XADD reply), so
	// a nil error means it will be delivered even if this process dies
	// next. A message published before any member subscribes waits for
	// one. Payloads up to MaxPayloadBytes are carried.
	Publish(ctx context.Context, subject string, data []byte) error

	// Subscribe joins opts.Group on the work subject and calls h for each
	// message delivered to this member, each call in its own goroutine and
	// at most opts.Prefetch at once: the broker takes no more messages for
	// this member while Prefetch handlers are running.
	//
	// ctx bounds only the setup (creating the group or consumer); the
	// subscription lasts until Stop, Drain or the broker's Close. The
	// handler's context is cancelled by Stop and Close (and by Drain when
	// its own context ends).
	//
	// The handler settles its delivery with Ack or Nack, extending the
	// deadline with InProgress (or fleetwire.KeepAlive) while it works. A
	// handler that returns without settling abandons the delivery: the
	// broker redelivers it after the ack deadline, exactly as if this
	// process had died. A panic in the handler is recovered and abandons the delivery.
	Subscribe(ctx context.Context, subject string, opts SubscribeOptions, h Handler) (Subscription, error)

	// Broadcast sends data to every current subscriber of subject. It
	// returns once the client has taken the message (it may still be in
	// the connection's send buffer, which Close flushes), not when
	// subscribers have it; a subscriber that is disconnected or too slow
	// misses it.
	Broadcast(ctx context.Context, subject string, data []byte) error

	// SubscribeBroadcast calls h, in one goroutine and in publish order,
	// for every message broadcast on subject from now until Stop or Close:
	// the subscription is live when it returns, so a message broadcast
	// after that (by any client) reaches it. A handler that falls far
	// behind loses messages rather than slowing the publisher. ctx bounds
	// only the setup; the handler's context ends with Stop or Close.
	SubscribeBroadcast(ctx context.Context, subject string, h BroadcastHandler) (Subscription, error)

	// Ping reports whether the broker is reachable (nil when it is): what
	// /readyz asks.
	Ping(ctx context.Context) error

	// Close stops every subscription of this client (as Stop does: the
	// handlers' contexts are cancelled and Close waits for them to return;
	// deliveries they did not settle are redelivered after their ack
	// deadline) and releases the connection. It is idempotent: later calls
	// return nil. After Close every method returns ErrBrokerClosed.
	Close() error
}

// BrokerStatus is implemented by a broker whose client knows, without a
// round trip, whether its connection is up (a NATS connection's state).
// /readyz asks it before Ping, so a probe during an outage answers at once
// instead of waiting for Ping's timeout. It is optional: a broker without
// it is judged by Ping alone.
type BrokerStatus interface {
	// Connected is nil while the client is connected, else why it is not
	// (reconnecting, closed).
	Connected() error
}

// Retainer is implemented by a broker that can keep a small record for a
// while, where every client of the broker sees it (a Redis key with a TTL,
// a JetStream key-value entry). The distributed mode records the runs it
// cancels with it, so a worker that starts or reconnects after a cancel
// broadcast, and so never saw it, still refuses the run's queued tasks. It
// is optional: without it only the workers connected at the time learn of a
// cancel.
type Retainer interface {
	// Retain records key for ttl (a broker may cap ttl; a later Retain of
	// the same key starts it over).
	Retain(ctx context.Context, key string, ttl time.Duration) error
	// Retained reports whether key was recorded and its ttl has not
	// passed.
	Retained(ctx context.Context, key string) (bool, error)
}

// PanicCounter is implemented by a broker client that recovers the panics
// of its handlers (as Subscribe promises), logs each with its stack and
// counts them: a worker's heartbeat carries the count as handler_panics.
type PanicCounter interface {
	HandlerPanics() int64
}

// Handler handles one delivery of a work subject. See Broker.Subscribe.
type Handler func(ctx context.Context, d *Delivery)

// BroadcastHandler handles one broadcast message. data is the handler's to
// keep.
type BroadcastHandler func(ctx context.Context, subject string, data []byte)

// Subscription is one Subscribe or SubscribeBroadcast. Neither method may be
// called from inside the subscription's own handler (both wait for the
// handlers to return).
type Subscription interface {
	// Stop stops taking messages, cancels the handlers' contexts and waits
	// for them to return. Deliveries they did not settle are redelivered
	// after their ack deadline. Idempotent.
	Stop() error
	// Drain stops taking messages and waits for the running handlers to
	// return, so in-flight work finishes and is acknowledged; if ctx ends
	// first it cancels them as Stop does, waits, and returns ctx.Err().
	Drain(ctx context.Context) error
}

// SubscribeOptions configure one member of a consumer group. The zero value
// is usable: every field has a default.
type SubscribeOptions struct {
	// Group names the consumer group; members of one group share the
	// subject's messages, each message going to one member. Default: a
	// name derived from the subject, so every member subscribing without
	// a Group is in the same group.
	Group string
	// ConsumerID names this member within the group. Brokers that keep
	// per-member state (Redis Streams' pending lists) use it; a stable id
	// across restarts lets a restarted worker take back its own entries.
	// Default: host name, process id and a random suffix.
	ConsumerID string
	// Prefetch is the most deliveries this member holds at once: the
	// number of handlers running in parallel. Default DefaultPrefetch.
	Prefetch int
	// AckWait is the ack deadline: a delivery not settled or extended
	// within it is redelivered. Default DefaultAckWait.
	AckWait time.Duration
	// MaxDeliver bounds how many times one message is handed to handlers.
	// A message that comes back once more after that is not handed to a
	// handler: it goes to the dead letter
	// (fleetwire.DeadLetterSubject(subject), itself a work subject) and
	// OnDeadLetter is called. Default DefaultMaxDeliver; negative means
	// unbounded.
	MaxDeliver int
	// OnDeadLetter, when set, is called (in a handler slot, with the
	// handler's context) for each message of this subject this member sends
	// to the dead letter, before it is removed from the subject: a worker
	// uses it to fail the task's run with dl.Reason.
	OnDeadLetter func(ctx context.Context, dl DeadLetter)
}

// Defaults of SubscribeOptions.
const (
	DefaultPrefetch   = 1
	DefaultAckWait    = 30 * time.Second
	DefaultMaxDeliver = 5
)

// MaxPayloadBytes is the largest message every broker must carry: room for a
// task whose input is a full request body (1 MiB) or a result with a large
// output, inside its envelope.
const MaxPayloadBytes = 8 << 20

// WithDefaults returns o with every unset field at its default.
func (o SubscribeOptions) WithDefaults(subject string) SubscribeOptions {
	if o.Group == "" {
		o.Group = DefaultGroup(subject)
	}
	if o.ConsumerID == "" {
		o.ConsumerID = DefaultConsumerID()
	}
	if o.Prefetch <= 0 {
		o.Prefetch = DefaultPrefetch
	}
	if o.AckWait <= 0 {
		o.AckWait = DefaultAckWait
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = DefaultMaxDeliver
	}
	return o
}

// DefaultConsumerID names a group member when SubscribeOptions.ConsumerID is
// empty: host name, process id and a random suffix, unique per call.
func DefaultConsumerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// DefaultGroup is the consumer group of a subject subscribed without a Group.
func DefaultGroup(subject string) string { return "svc-" + strings.ReplaceAll(subject, ".", "-") }

// Acknowledger is what a broker implements for one delivery; handlers call
// the Delivery methods, which make sure only the first settlement counts.
type Acknowledger interface {
	Ack(ctx context.Context) error
	Nack(ctx context.Context, delay time.Duration) error
	InProgress(ctx context.Context) error
}

// Delivery is one message of a work subject handed to one handler.
type Delivery struct {
	Subject string
	// Data is the message as published; read it, do not modify it (a
	// broker may hand the same bytes to a later redelivery).
	Data []byte
	// Attempt is the delivery count: 1 the first time this message is
	// handed out, 2 on its first redelivery, and so on.
	Attempt int
	// ID is the broker's id of the message (a stream sequence, an entry
	// id); it stays the same across redeliveries.
	ID string
	// AckWait is the ack deadline this delivery runs under.
	AckWait time.Duration
	// Acker is the broker's side of the delivery; handlers use the methods
	// below instead.
	Acker Acknowledger

	settled atomic.Bool
}

// Ack removes the message from the subject: it will not be delivered again.
// Ack a task after its result is published, so a crash in between redelivers
// the task rather than losing the result. The first of Ack or Nack counts;
// later calls return ErrSettled. An ack that arrives after the deadline has
// passed may be refused (the message may already be with another member).
func (d *Delivery) Ack(ctx context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	return d.Acker.Ack(ctx)
}

// Nack gives the message back to be delivered again, to any member, after
// delay (0: at once; a broker may cap the delay at the ack deadline); its
// Attempt counts up, and past MaxDeliver it goes to the dead letter.
func (d *Delivery) Nack(ctx context.Context, delay time.Duration) error {
	if !d.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	if delay < 0 {
		delay = 0
	}
	return d.Acker.Nack(ctx, delay)
}

// InProgress tells the broker the message is still being worked on: its ack
// deadline starts over from now. Call it more often than AckWait
// (fleetwire.KeepAlive does) for work that may outlast the deadline.
func (d *Delivery) InProgress(ctx context.Context) error {
	if d.settled.Load() {
		return ErrSettled
	}
	return d.Acker.InProgress(ctx)
}

// Settled reports whether Ack or Nack has been called.
func (d *Delivery) Settled() bool { return d.settled.Load() }

// DeadLetter is what goes to a dead-letter subject (as JSON) and to
// SubscribeOptions.OnDeadLetter: a message that was delivered MaxDeliver
// times without being acknowledged.
type DeadLetter struct {
	// Subject is where the message was published.
	Subject string `json:"subject"`
	// Data is the message as published.
	Data []byte `json:"data"`
	// Deliveries is how many times it was handed to a handler.
	Deliveries int `json:"deliveries"`
	// Reason says why it was given up, for the task's failed result.
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// BrokerError is what a broker's methods fail with: the failure, which
// broker and operation it came from, and whether trying the same call again
// may succeed. Callers decide with it, not with the text: dispatch retries a
// publish that failed transiently (a lost connection, a timeout, a server
// busy or failing over) and gives up at once on a permanent failure (the
// broker is closed, the message is too large, the subject or the call is
// refused), which no retry can mend.
type BrokerError struct {
	// Broker names the broker package ("redisbroker"), "broker" for the
	// shared sentinels.
	Broker string
	// Op is the operation ("publish", "subscribe", "ack", ...); may be
	// empty.
	Op string
	// Transient reports that the same call may succeed later.
	Transient bool
	Err       error
}

func (e *BrokerError) Error() string {
	if e.Op == "" {
		return e.Broker + ": " + e.Err.Error()
	}
	return e.Broker + ": " + e.Op + ": " + e.Err.Error()
}

func (e *BrokerError) Unwrap() error { return e.Err }

// TransientBrokerError is err from broker's op, worth trying again.
func TransientBrokerError(broker, op string, err error) error {
	return &BrokerError{Broker: broker, Op: op, Transient: true, Err: err}
}

// PermanentBrokerError is err from broker's op, which the same call will
// meet again.
func PermanentBrokerError(broker, op string, err error) error {
	return &BrokerError{Broker: broker, Op: op, Err: err}
}

// IsTransientBrokerError reports whether err is, or wraps, a BrokerError
// that is transient.
func IsTransientBrokerError(err error) bool {
	var be *BrokerError
	return errors.As(err, &be) && be.Transient
}

// IsPermanentBrokerError reports whether err is, or wraps, a BrokerError
// that is permanent (ErrBrokerClosed and ErrSettled are).
func IsPermanentBrokerError(err error) bool {
	var be *BrokerError
	return errors.As(err, &be) && !be.Transient
}

// Broker errors. Both are permanent BrokerErrors: a closed client stays
// closed, a settled delivery stays settled.
var (
	// ErrBrokerClosed is returned by a broker's methods after its Close.
	ErrBrokerClosed error = &BrokerError{Broker: "broker", Err: errors.New("closed")}
	// ErrSettled is returned when a delivery is acked or nacked twice, or
	// extended after it was settled.
	ErrSettled error = &BrokerError{Broker: "broker", Err: errors.New("delivery already settled")}
)
