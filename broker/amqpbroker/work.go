package amqpbroker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/internal/flow"
)

var (
	errExpired = errors.New("amqpbroker: ack deadline passed: the message was redelivered")
	errLost    = errors.New("amqpbroker: the connection was lost: the server requeued the message")
)

type state int

const (
	stHandling     state = iota // in a handler, or abandoned by it
	stDelayed                   // nacked with a delay: re-publish at deadline
	stRedelivering              // being re-published
	stDone                      // acked, re-published or dead-lettered
)

type entry struct {
	m        amqp.Delivery
	id       string
	attempt  int
	st       state
	deadline time.Time
	lost     bool // its channel went with a lost connection
}

// wsub is one consumer of a work queue.
type wsub struct {
	b       *Broker
	subject string
	opts    svc.SubscribeOptions
	h       svc.Handler
	queue   string
	tag     string
	fs      *flow.Sub
	log     *zap.Logger

	mu   sync.Mutex
	ch   *amqp.Channel       // the current channel
	live map[*entry]struct{} // delivered, not settled
}

// Subscribe consumes the subject's queue.
func (b *Broker) Subscribe(ctx context.Context, subject string, opts svc.SubscribeOptions, h svc.Handler) (svc.Subscription, error) {
	if b.subs.Closed() {
		return nil, svc.ErrBrokerClosed
	}
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults(subject)
	s := &wsub{
		b: b, subject: subject, opts: opts, h: h, queue: b.queueName(subject), tag: opts.ConsumerID + "-" + newID(),
		live: map[*entry]struct{}{},
		log:  b.log.With(zap.String("subject", subject), zap.String("consumer", opts.ConsumerID)),
	}
	msgs, err := s.open(ctx)
	if err != nil {
		return nil, b.wrap("subscribe to "+s.queue, err)
	}
	s.fs = flow.New(opts.Prefetch, s.finish)
	if err := b.subs.Track(s); err != nil {
		_ = s.channel().Close()
		return nil, err
	}
	s.fs.Loop(func(ctx context.Context) { s.consume(ctx, msgs) })
	s.fs.Loop(s.reap)
	return s, nil
}

// open consumes the queue on a new channel.
func (s *wsub) open(ctx context.Context) (<-chan amqp.Delivery, error) {
	ch, err := s.b.openChannel(ctx)
	if err != nil {
		return nil, err
	}
	var msgs <-chan amqp.Delivery
	err = declareQueue(ch, s.queue)
	if err == nil {
		err = ch.Qos(s.opts.Prefetch, 0, false)
	}
	if err == nil {
		msgs, err = ch.Consume(s.queue, s.tag, false, false, false, false, nil)
	}
	if err != nil {
		_ = ch.Close()
		return nil, err
	}
	s.mu.Lock()
	s.ch = ch
	s.mu.Unlock()
	return msgs, nil
}

func (s *wsub) channel() *amqp.Channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *wsub) Stop() error                     { return s.fs.Stop() }
func (s *wsub) Drain(ctx context.Context) error { return s.fs.Drain(ctx) }

func (s *wsub) consume(ctx context.Context, msgs <-chan amqp.Delivery) {
	// Stop taking messages the moment the subscription stops: the server
	// keeps the rest for other members.
	defer func() { _ = s.channel().Cancel(s.tag, false) }()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				// The channel went (a lost connection): what it held is
				// requeued by the server; consume again on the next one.
				s.mu.Lock()
				for e := range s.live {
					e.lost = true
				}
				clear(s.live)
				s.mu.Unlock()
				next, err := s.open(ctx)
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, svc.ErrBrokerClosed) {
						s.log.Error("subscription ended: cannot consume again", zap.Error(err))
					}
					return
				}
				msgs = next
				continue
			}
			if !s.fs.Acquire() {
				return // unacked: the server requeues it when the channel closes
			}
			s.dispatch(m)
		}
	}
}

func intHeader(t amqp.Table, key string) int {
	switch v := t[key].(type) {
	case int64:
		return int(v)
	case int32:
		return int(v)
	case int16:
		return int(v)
	case int8:
		return int(v)
	case uint8:
		return int(v)
	case uint16:
		return int(v)
	case uint32:
		return int(v)
	}
	return 0
}

func (s *wsub) dispatch(m amqp.Delivery) {
	e := &entry{m: m, id: m.MessageId, st: stHandling, deadline: time.Now().Add(s.opts.AckWait)}
	if e.id == "" {
		e.id = fmt.Sprintf("%s-%d", s.tag, m.DeliveryTag)
	}
	e.attempt = intHeader(m.Headers, hdrAttempt) + intHeader(m.Headers, "x-delivery-count") + 1
	var fn func(ctx context.Context)
	if s.opts.MaxDeliver > 0 && e.attempt > s.opts.MaxDeliver {
		e.st = stRedelivering // not the reaper's
		fn = func(ctx context.Context) { s.deadLetter(ctx, e) }
	} else {
		d := &svc.Delivery{Subject: s.subject, Data: m.Body, Attempt: e.attempt, ID: e.id, AckWait: s.opts.AckWait, Acker: &acker{s: s, e: e}}
		fn = func(ctx context.Context) { s.h(ctx, d) }
	}
	s.mu.Lock()
	s.live[e] = struct{}{}
	s.mu.Unlock()
	s.fs.Go(fn) // refused after Stop: left unacked, requeued on close
}

func (s *wsub) deadLetter(ctx context.Context, e *entry) {
	n := e.attempt - 1
	dl := svc.DeadLetter{
		Subject: s.subject, Data: e.m.Body, Deliveries: n, At: time.Now().UTC(),
		Reason: fmt.Sprintf("delivered %d times without being acknowledged (max_deliver %d)", n, s.opts.MaxDeliver),
	}
	raw, _ := json.Marshal(dl)
	if err := s.b.Publish(ctx, svc.DeadLetterSubject(s.subject), raw); err != nil {
		s.log.Warn("dead letter", zap.Error(err))
		return // unacked: requeued when the channel closes
	}
	if s.opts.OnDeadLetter != nil {
		s.opts.OnDeadLetter(ctx, dl)
	}
	s.done(e)
	if err := e.m.Ack(false); err != nil {
		s.log.Warn("ack dead letter", zap.Error(err))
	}
}

func (s *wsub) done(e *entry) {
	s.mu.Lock()
	e.st = stDone
	delete(s.live, e)
	s.mu.Unlock()
}

// reap re-publishes messages whose ack deadline passed or whose nack delay
// ended.
func (s *wsub) reap(ctx context.Context) {
	tick := min(max(s.opts.AckWait/10, 10*time.Millisecond), 250*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var due []*entry
		s.mu.Lock()
		for e := range s.live {
			if (e.st == stHandling || e.st == stDelayed) && now.After(e.deadline) {
				e.st = stRedelivering
				due = append(due, e)
			}
		}
		s.mu.Unlock()
		for _, e := range due {
			_ = s.redeliver(e)
		}
	}
}

// redeliver re-publishes e (already stRedelivering) with its attempt
// counted and acks the original; on failure e goes back to its deadline.
func (s *wsub) redeliver(e *entry) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The re-published copy carries this delivery's count; the original's
	// x-delivery-count no longer applies to it.
	err := s.b.append(ctx, s.subject, e.m.Body, e.id, e.attempt)
	if err == nil {
		err = e.m.Ack(false)
	}
	if err != nil {
		s.log.Warn("redeliver", zap.Error(err))
		s.mu.Lock()
		e.st = stHandling
		e.deadline = time.Now().Add(s.opts.AckWait)
		s.mu.Unlock()
		return fmt.Errorf("amqpbroker: redeliver: %w", err)
	}
	s.done(e)
	return nil
}

// finish runs after the loops and handlers have stopped: closing the
// channel requeues every message not acked, counted in x-delivery-count.
func (s *wsub) finish() {
	_ = s.channel().Close()
	s.b.subs.Untrack(s)
}

type acker struct {
	s *wsub
	e *entry
}

func (a *acker) settle(st state, at time.Time) error {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	switch {
	case a.e.lost:
		return errLost
	case a.e.st != stHandling:
		return errExpired
	}
	a.e.st = st
	a.e.deadline = at
	return nil
}

func (a *acker) Ack(context.Context) error {
	if err := a.settle(stRedelivering, time.Time{}); err != nil {
		return err
	}
	a.s.done(a.e)
	if err := a.e.m.Ack(false); err != nil {
		return a.s.b.wrap("ack", err)
	}
	return nil
}

func (a *acker) Nack(_ context.Context, delay time.Duration) error {
	if delay > 0 {
		return a.settle(stDelayed, time.Now().Add(min(delay, a.s.opts.AckWait)))
	}
	if err := a.settle(stRedelivering, time.Time{}); err != nil {
		return err
	}
	return a.s.redeliver(a.e)
}

func (a *acker) InProgress(context.Context) error {
	return a.settle(stHandling, time.Now().Add(a.s.opts.AckWait))
}
