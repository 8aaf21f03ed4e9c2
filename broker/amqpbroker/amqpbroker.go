// Package amqpbroker is the svc.Broker on RabbitMQ (AMQP 0-9-1), through
// amqp091-go.
//
// Layout on the server (prefix "svc." by default):
//
//   - a work subject is the durable quorum queue {prefix}q.{subject},
//     declared by the first Publish or Subscribe; messages are published
//     persistent, through the default exchange, and Publish waits for the
//     server's publisher confirm. Every member of the subject's group
//     consumes that one queue (the Group is not needed: one queue per
//     agent is the group), with manual acks and basic.qos set to its
//     Prefetch.
//   - Ack is basic.ack. Nack, and an ack deadline that passes (kept by the
//     member: RabbitMQ has none short enough; InProgress moves it),
//     re-publish the message with its attempt count raised (header
//     svc-attempt, message id kept) and then ack the original. A member
//     that dies or stops with messages unacked has them requeued by the
//     server, which counts them in the quorum queue's x-delivery-count:
//     Attempt is svc-attempt + x-delivery-count + 1.
//   - a message whose Attempt would exceed MaxDeliver is not handed out: a
//     DeadLetter record goes to the dead-letter subject's queue, the member
//     calls OnDeadLetter and acks it. (RabbitMQ's own dead-lettering cannot
//     write the svc record nor call the hook, so the member does it.)
//   - a broadcast subject is the fanout exchange {prefix}b.{subject}; each
//     subscriber binds an exclusive, auto-delete queue of its own (capped,
//     dropping the oldest, so a subscriber far behind loses messages) and
//     consumes it with auto-ack.
//
// A connection lost ends its subscriptions (logged); the process that owns
// the broker restarts them. It needs RabbitMQ 3.8 or later (quorum queues).
package amqpbroker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/internal/flow"
)

// Options configure a connection.
type Options struct {
	// Prefix starts every queue and exchange name; default "svc.".
	Prefix string
	// Name is the connection name the server shows; default "svc".
	Name string
	// Logger receives failures of the background loops; nil is silent.
	Logger *zap.Logger
}

const (
	hdrAttempt = "svc-attempt" // deliveries before this message
	// broadcastBacklog caps a broadcast subscriber's queue.
	broadcastBacklog = 100000
)

// Broker is one AMQP connection.
type Broker struct {
	conn *amqp.Connection
	o    Options
	log  *zap.Logger

	pubMu    sync.Mutex // serializes publishes and their confirms
	pub      *amqp.Channel
	declared map[string]bool // queues and exchanges known to exist

	subs flow.Registry[svc.Subscription]
}

var _ svc.Broker = (*Broker)(nil)

// Connect dials rawURL (amqp://user:password@host:port/vhost, amqps:// for
// TLS).
func Connect(ctx context.Context, rawURL string, o Options) (*Broker, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("amqpbroker: %w", err)
	}
	if (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		return nil, fmt.Errorf("amqpbroker: %q: want amqp://user:password@host:port/vhost", u.Redacted())
	}
	if o.Prefix == "" {
		o.Prefix = "svc."
	}
	if o.Name == "" {
		o.Name = "svc"
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	cfg := amqp.Config{Properties: amqp.Table{"connection_name": o.Name}, Heartbeat: 10 * time.Second, Locale: "en_US"}
	if dl, ok := ctx.Deadline(); ok {
		cfg.Dial = amqp.DefaultDial(time.Until(dl))
	}
	conn, err := amqp.DialConfig(rawURL, cfg)
	if err != nil {
		return nil, fmt.Errorf("amqpbroker: connect to %s: %w", u.Host, err)
	}
	pub, err := conn.Channel()
	if err == nil {
		err = pub.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("amqpbroker: open publishing channel: %w", err)
	}
	return &Broker{conn: conn, o: o, pub: pub, declared: map[string]bool{}, log: o.Logger.With(zap.String("broker", "amqp"))}, nil
}

// Scheme is "amqp".
func (b *Broker) Scheme() string { return "amqp" }

// Connection is the underlying connection.
func (b *Broker) Connection() *amqp.Connection { return b.conn }

func (b *Broker) queueName(subject string) string    { return b.o.Prefix + "q." + subject }
func (b *Broker) exchangeName(subject string) string { return b.o.Prefix + "b." + subject }

// Ping opens and closes a channel.
func (b *Broker) Ping(ctx context.Context) error {
	if b.subs.Closed() {
		return svc.ErrBrokerClosed
	}
	ch, err := b.conn.Channel()
	if err != nil {
		return b.wrap("ping", err)
	}
	return b.wrap("ping", ch.Close())
}

// Close stops every subscription and closes the connection.
func (b *Broker) Close() error {
	subs, first := b.subs.Close()
	if !first {
		return nil
	}
	var errs []error
	for _, s := range subs {
		errs = append(errs, s.Stop())
	}
	if err := b.conn.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (b *Broker) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if b.subs.Closed() || errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("amqpbroker: %s: %w", op, errors.Join(svc.ErrBrokerClosed, err))
	}
	return fmt.Errorf("amqpbroker: %s: %w", op, err)
}

func checkSubject(subject string) error {
	if subject == "" {
		return errors.New("amqpbroker: empty subject")
	}
	return nil
}

func checkSize(n int) error {
	if n > svc.MaxPayloadBytes {
		return fmt.Errorf("amqpbroker: message of %d bytes exceeds the %d-byte limit", n, svc.MaxPayloadBytes)
	}
	return nil
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// declareQueue declares the work queue on ch; every declaration carries
// the same arguments, as RabbitMQ refuses a redeclaration that differs.
func declareQueue(ch *amqp.Channel, name string) error {
	_, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	return err
}

func declareExchange(ch *amqp.Channel, name string) error {
	return ch.ExchangeDeclare(name, amqp.ExchangeFanout, true, false, false, false, nil)
}

// publish sends one message through the publishing channel and waits for
// its confirm; declare (may be nil) runs first, once per name.
func (b *Broker) publish(ctx context.Context, exchange, key string, declare func(*amqp.Channel) error, msg amqp.Publishing) error {
	if b.subs.Closed() {
		return svc.ErrBrokerClosed
	}
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	name := exchange + "/" + key
	if declare != nil && !b.declared[name] {
		if err := declare(b.pub); err != nil {
			return b.wrap("declare "+name, err)
		}
		b.declared[name] = true
	}
	conf, err := b.pub.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		return b.wrap("publish to "+name, err)
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return b.wrap("publish to "+name, err)
	}
	if !ok {
		return fmt.Errorf("amqpbroker: publish to %s: the server refused the message (nack)", name)
	}
	return nil
}

// Publish stores data on the subject's queue.
func (b *Broker) Publish(ctx context.Context, subject string, data []byte) error {
	if err := checkSubject(subject); err != nil {
		return err
	}
	if err := checkSize(len(data)); err != nil {
		return err
	}
	return b.append(ctx, subject, data, newID(), 0)
}

func (b *Broker) append(ctx context.Context, subject string, data []byte, id string, prior int) error {
	q := b.queueName(subject)
	return b.publish(ctx, "", q, func(ch *amqp.Channel) error { return declareQueue(ch, q) }, amqp.Publishing{
		DeliveryMode: amqp.Persistent, MessageId: id, Body: data, Timestamp: time.Now(),
		Headers: amqp.Table{hdrAttempt: int64(prior)},
	})
}

// Broadcast sends data to the subject's fanout exchange.
func (b *Broker) Broadcast(ctx context.Context, subject string, data []byte) error {
	if err := checkSubject(subject); err != nil {
		return err
	}
	if err := checkSize(len(data)); err != nil {
		return err
	}
	ex := b.exchangeName(subject)
	return b.publish(ctx, ex, "", func(ch *amqp.Channel) error { return declareExchange(ch, ex) }, amqp.Publishing{Body: data})
}

// SubscribeBroadcast binds a private queue to the subject's exchange.
func (b *Broker) SubscribeBroadcast(ctx context.Context, subject string, h svc.BroadcastHandler) (svc.Subscription, error) {
	if b.subs.Closed() {
		return nil, svc.ErrBrokerClosed
	}
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, b.wrap("subscribe", err)
	}
	ex := b.exchangeName(subject)
	var msgs <-chan amqp.Delivery
	err = declareExchange(ch, ex)
	if err == nil {
		var q amqp.Queue
		q, err = ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-max-length": int64(broadcastBacklog), "x-overflow": "drop-head"})
		if err == nil {
			err = ch.QueueBind(q.Name, "", ex, false, nil)
		}
		if err == nil {
			msgs, err = ch.Consume(q.Name, "", true, true, false, false, nil)
		}
	}
	if err != nil {
		_ = ch.Close()
		return nil, b.wrap("subscribe to "+ex, err)
	}
	s := &bsub{ch: ch, done: make(chan struct{})}
	var lctx context.Context
	lctx, s.cancel = context.WithCancel(context.Background())
	if err := b.subs.Track(s); err != nil {
		s.cancel()
		_ = ch.Close()
		return nil, err
	}
	s.untrack = func() { b.subs.Untrack(s) }
	go s.run(lctx, subject, msgs, h)
	return s, nil
}

type bsub struct {
	ch      *amqp.Channel
	cancel  context.CancelFunc
	done    chan struct{}
	once    sync.Once
	untrack func()
}

func (s *bsub) run(ctx context.Context, subject string, msgs <-chan amqp.Delivery, h svc.BroadcastHandler) {
	defer close(s.done)
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			func() {
				defer func() { _ = recover() }()
				h(ctx, subject, m.Body)
			}()
		}
	}
}

func (s *bsub) Stop() error {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		_ = s.ch.Close()
		s.untrack()
	})
	return nil
}

func (s *bsub) Drain(context.Context) error { return s.Stop() }
