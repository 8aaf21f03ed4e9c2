package amqpbroker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/internal/flow"
)

var (
	errExpired = svc.PermanentBrokerError("amqpbroker", "", errors.New("ack deadline passed: the message was redelivered"))
	errLost    = svc.PermanentBrokerError("amqpbroker", "", errors.New("the connection was lost: the server requeued the message"))
)

type entry struct {
	m       amqp.Delivery
	id      string
	attempt int
	flow.Settlement
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
	s.fs.Panics, s.fs.Subject = &b.panics, subject
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
	// Declared on a channel of its own: a refused declaration closes it.
	if err := s.b.declareOn(ctx, func(ch *amqp.Channel) error { return s.b.declareWork(ch, s.subject) }); err != nil {
		return nil, err
	}
	ch, err := s.b.openChannel(ctx)
	if err != nil {
		return nil, err
	}
	var msgs <-chan amqp.Delivery
	err = ch.Qos(s.opts.Prefetch, 0, false)
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
					e.Lost = true
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

func strHeader(t amqp.Table, key string) string {
	v, _ := t[key].(string)
	return v
}

// attempt is the delivery count of m: the deliveries counted by the server
// on this queue (x-delivery-count: requeues by nack and by a channel that
// closed) plus those before it was published (svc-attempt, kept by
// messages an older build re-published). A message the server dead-lettered
// into this queue starts again from 1: the counts it carries are its source
// queue's.
func attempt(m amqp.Delivery) int {
	n := intHeader(m.Headers, "x-delivery-count") + 1
	if strHeader(m.Headers, "x-first-death-queue") == "" {
		n += intHeader(m.Headers, hdrAttempt)
	}
	return n
}

func (s *wsub) dispatch(m amqp.Delivery) {
	e := &entry{m: m, id: m.MessageId, attempt: attempt(m)}
	e.Start(time.Now().Add(s.opts.AckWait))
	if e.id == "" {
		e.id = fmt.Sprintf("%s-%d", s.tag, m.DeliveryTag)
	}
	var fn func(ctx context.Context)
	switch {
	case strHeader(m.Headers, hdrDead) == s.queue:
		e.State = flow.Settling // not the reaper's
		fn = func(ctx context.Context) { s.reject(ctx, e) }
	case s.opts.MaxDeliver > 0 && e.attempt > s.opts.MaxDeliver:
		e.State = flow.Settling
		fn = func(ctx context.Context) { s.stamp(ctx, e) }
	default:
		data := m.Body
		if src := strHeader(m.Headers, "x-first-death-queue"); src != "" && strHeader(m.Headers, hdrDead) == "" {
			data = s.b.deadRecord(m, src)
		}
		d := &svc.Delivery{Subject: s.subject, Data: data, Attempt: e.attempt, ID: e.id, AckWait: s.opts.AckWait, Acker: &Acker{
			Acker: flow.Acker{
				Mu: &s.mu, S: &e.Settlement, AckWait: s.opts.AckWait, Lost: errLost, Expired: errExpired,
				OnAck:  func(context.Context) error { return s.ack(e) },
				OnNack: func(context.Context) error { s.requeue(e); return nil },
			},
			s: s, e: e,
		}}
		fn = func(ctx context.Context) { s.h(ctx, d) }
	}
	s.mu.Lock()
	s.live[e] = struct{}{}
	s.mu.Unlock()
	s.fs.Go(fn) // refused after Stop: left unacked, requeued on close
}

// stamp turns a message delivered more than MaxDeliver times into its dead
// letter: a DeadLetter record, published to this same queue marked with
// hdrDead, replaces it. The server's own dead-lettering keeps neither the
// delivery count nor the reason, so they go into the record first; the
// member that takes the record rejects it and RabbitMQ routes it, through
// the dead-letter exchange, to the dead-letter queue (see reject).
func (s *wsub) stamp(ctx context.Context, e *entry) {
	n := e.attempt - 1
	dl := svc.DeadLetter{
		Subject: s.subject, Data: e.m.Body, Deliveries: n, At: time.Now().UTC(),
		Reason: fmt.Sprintf("delivered %d times without being acknowledged (max_deliver %d)", n, s.opts.MaxDeliver),
	}
	if err := s.replace(ctx, e, dl, false); err != nil {
		s.log.Warn("dead letter", zap.Error(err))
		s.requeue(e) // it comes back here
	}
}

// replace publishes dl to e's queue as the record that replaces e (quiet:
// without OnDeadLetter when rejected) and acks e.
func (s *wsub) replace(ctx context.Context, e *entry, dl svc.DeadLetter, quiet bool) error {
	raw, _ := json.Marshal(dl)
	h := amqp.Table{hdrAttempt: int64(0), hdrDead: s.queue}
	if quiet {
		h[hdrQuiet] = true
	}
	err := s.b.publishWork(ctx, s.subject, amqp.Publishing{
		DeliveryMode: amqp.Persistent, MessageId: e.id, Body: raw, Timestamp: time.Now(), Headers: h,
	})
	if err != nil {
		return err
	}
	s.done(e)
	if err := e.m.Ack(false); err != nil {
		s.log.Warn("ack a message replaced by its dead letter", zap.Error(err))
	}
	return nil
}

// Acker is the acknowledger of a delivery of this broker; beyond
// svc.Acknowledger it can dead-letter the delivery at once.
type Acker struct {
	flow.Acker
	s *wsub
	e *entry
}

// DeadLetter sends the delivery to its dead-letter queue now, through
// RabbitMQ's dead-letter exchange, with dl as its record (Subject, Data
// and Deliveries filled in when empty; At when zero). OnDeadLetter is not
// called: the handler that asks knows. A worker uses it for a task it
// refuses to run (unsigned, tampered). On failure the delivery is left to
// its deadline, and the caller may dead-letter it another way.
func (a *Acker) DeadLetter(ctx context.Context, dl svc.DeadLetter) error {
	if err := a.Take(); err != nil {
		return err
	}
	if dl.Subject == "" {
		dl.Subject = a.s.subject
	}
	if dl.Data == nil {
		dl.Data = a.e.m.Body
	}
	if dl.Deliveries == 0 {
		dl.Deliveries = a.e.attempt
	}
	if dl.At.IsZero() {
		dl.At = time.Now().UTC()
	}
	if err := a.s.replace(ctx, a.e, dl, true); err != nil {
		a.Mu.Lock()
		a.e.State, a.e.Deadline = flow.Handling, time.Now().Add(a.AckWait) // the reaper's again
		a.Mu.Unlock()
		return a.s.b.wrap("dead letter", err)
	}
	return nil
}

// reject hands a dead-letter record (see stamp) to OnDeadLetter and rejects
// it (basic.reject without requeue): the server dead-letters it to the
// dead-letter queue.
func (s *wsub) reject(ctx context.Context, e *entry) {
	var dl svc.DeadLetter
	if err := json.Unmarshal(e.m.Body, &dl); err != nil {
		s.log.Warn("undecodable dead letter record; dead-lettered as it is", zap.Error(err))
	} else if s.opts.OnDeadLetter != nil && e.m.Headers[hdrQuiet] != true {
		s.opts.OnDeadLetter(ctx, dl)
	}
	s.done(e)
	if err := e.m.Reject(false); err != nil {
		s.log.Warn("reject to the dead-letter exchange", zap.Error(err))
	}
}

// deadRecord is the DeadLetter record of a message the server dead-lettered
// on its own (a consumer rejected it without stamping it, or a limit of the
// source queue) : its delivery count is lost, svc-attempt is what it had
// when published.
func (b *Broker) deadRecord(m amqp.Delivery, src string) []byte {
	why := strHeader(m.Headers, "x-first-death-reason")
	dl := svc.DeadLetter{
		Subject: strings.TrimPrefix(src, b.o.Prefix+"q."), Data: m.Body, Deliveries: intHeader(m.Headers, hdrAttempt),
		Reason: fmt.Sprintf("dead-lettered by RabbitMQ from queue %s (%s)", src, why), At: time.Now().UTC(),
	}
	if deaths, ok := m.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if d, ok := deaths[0].(amqp.Table); ok {
			if at, ok := d["time"].(time.Time); ok {
				dl.At = at.UTC()
			}
		}
	}
	raw, _ := json.Marshal(dl)
	return raw
}

func (s *wsub) done(e *entry) {
	s.mu.Lock()
	e.State = flow.Done
	delete(s.live, e)
	s.mu.Unlock()
}

func (s *wsub) ack(e *entry) error {
	s.done(e)
	if err := e.m.Ack(false); err != nil {
		return s.b.wrap("ack", err)
	}
	return nil
}

// requeue gives e (Settling) back to the server, which counts the delivery
// in x-delivery-count. It is basic.reject, not basic.nack: since RabbitMQ
// 4.3 only a reject (or a channel closed) counts as a failed delivery, and
// only a reject without requeue is dead-lettered (see reject). On a channel
// already gone the server has requeued it.
func (s *wsub) requeue(e *entry) {
	s.done(e)
	if err := e.m.Reject(true); err != nil && !errors.Is(err, amqp.ErrClosed) {
		s.log.Warn("requeue", zap.Error(err))
	}
}

// reap requeues messages whose ack deadline passed or whose nack delay
// ended.
func (s *wsub) reap(ctx context.Context) {
	t := time.NewTicker(flow.ReapEvery(s.opts.AckWait))
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
			if e.Due(now) {
				due = append(due, e)
			}
		}
		s.mu.Unlock()
		for _, e := range due {
			s.requeue(e)
		}
	}
}

// finish runs after the loops and handlers have stopped: closing the
// channel requeues every message not acked, counted in x-delivery-count.
func (s *wsub) finish() {
	_ = s.channel().Close()
	s.b.subs.Untrack(s)
}
