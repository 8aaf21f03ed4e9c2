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
//     member: RabbitMQ has none short enough; InProgress moves it), are
//     basic.reject with requeue (since RabbitMQ 4.3 a basic.nack is not
//     counted as a failed delivery); a Nack with a delay holds the message
//     until the delay ends. A member that dies or stops with messages unacked
//     has them requeued by the server. The server counts every requeue in
//     the quorum queue's x-delivery-count: Attempt is x-delivery-count + 1
//     (plus svc-attempt, the count an older build wrote when it
//     re-published).
//   - every work queue is declared with the dead-letter exchange
//     {prefix}dead (direct, durable) and, as routing key, the queue of its
//     dead-letter subject {prefix}q.svc.dead.{...}, which is declared and
//     bound with it; dead-lettering is at-least-once. A message whose
//     Attempt would exceed MaxDeliver is not handed out: the member
//     replaces it in its queue by its DeadLetter record (header
//     svc-dead-letter; RabbitMQ's dead-lettering keeps neither the count
//     nor a reason), and the member that takes the record calls
//     OnDeadLetter and rejects it (basic.reject without requeue), so the
//     server routes it to the dead-letter queue. A message the server
//     dead-letters on its own (a limit of the queue, another consumer's
//     reject) reaches the dead-letter subject's handlers as a DeadLetter
//     record too, built from its x-death headers.
//   - a queue an older build declared without these arguments cannot be
//     redeclared (PRECONDITION_FAILED): Publish and Subscribe fail with an
//     error saying to empty and delete it.
//   - a broadcast subject is the fanout exchange {prefix}b.{subject}; each
//     subscriber binds an exclusive, auto-delete queue of its own (capped,
//     dropping the oldest, so a subscriber far behind loses messages) and
//     consumes it with auto-ack.
//
// A connection lost is dialled again (with backoff, until Close) and every
// subscription consumes again on the new one: the messages its handlers held
// were requeued by the server (their late Ack fails), and broadcasts sent
// while it was down are missed. Publishes fail while it is down. It needs
// RabbitMQ 3.10 or later (at-least-once dead-lettering).
package amqpbroker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/internal/flow"
	"github.com/svc-dev/svc/fleetwire"
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
	// hdrDead marks a DeadLetter record that replaced a message of the
	// queue it names: the consumer of that queue rejects it to the
	// dead-letter exchange.
	hdrDead = "svc-dead-letter"
	// hdrQuiet on such a record: the handler asked for it (Acker's
	// DeadLetter), so OnDeadLetter is not called.
	hdrQuiet = "svc-dead-letter-quiet"
	// broadcastBacklog caps a broadcast subscriber's queue.
	broadcastBacklog = 100000
)

// Broker is one AMQP connection, dialled again when it is lost.
type Broker struct {
	panics flow.Panics
	url    string
	cfg    amqp.Config
	o      Options
	log    *zap.Logger
	done   chan struct{} // closed by Close: stops the reconnecting watcher
	wg     sync.WaitGroup

	connMu sync.Mutex
	conn   *amqp.Connection // the current connection

	pubMu    sync.Mutex // serializes publishes and their confirms
	pub      *amqp.Channel
	declared map[string]bool // queues and exchanges known to exist on pub

	subs flow.Registry[svc.Subscription]
}

var _ svc.Broker = (*Broker)(nil)

// Connect dials rawURL (amqp://user:password@host:port/vhost, amqps:// for
// TLS).
func Connect(ctx context.Context, rawURL string, o Options) (*Broker, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, svc.PermanentBrokerError("amqpbroker", "", err)
	}
	if (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		return nil, flow.Refused("amqpbroker", "%q: want amqp://user:password@host:port/vhost", u.Redacted())
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
	b := &Broker{url: rawURL, cfg: cfg, o: o, done: make(chan struct{}), log: o.Logger.With(zap.String("broker", "amqp"))}
	b.panics.Log = b.log
	conn, err := b.dial()
	if err != nil {
		return nil, flow.Wrap("amqpbroker", "connect to "+u.Host, err, permanent)
	}
	b.cfg.Dial = nil // later dials use the default timeout
	b.wg.Add(1)
	go b.watch(conn)
	return b, nil
}

// dial connects and opens the publishing channel.
func (b *Broker) dial() (*amqp.Connection, error) {
	conn, err := amqp.DialConfig(b.url, b.cfg)
	if err != nil {
		return nil, err
	}
	pub, err := conn.Channel()
	if err == nil {
		err = pub.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("open publishing channel: %w", err)
	}
	b.connMu.Lock()
	b.conn = conn
	b.connMu.Unlock()
	b.pubMu.Lock()
	b.pub, b.declared = pub, map[string]bool{}
	b.pubMu.Unlock()
	return conn, nil
}

// watch dials again whenever the connection is lost, until Close.
func (b *Broker) watch(conn *amqp.Connection) {
	defer b.wg.Done()
	for {
		lost := conn.NotifyClose(make(chan *amqp.Error, 1))
		select {
		case <-b.done:
			return
		case err := <-lost:
			b.log.Warn("connection lost; reconnecting", zap.Error(err))
		}
		backoff := 100 * time.Millisecond
		for {
			select {
			case <-b.done:
				return
			case <-time.After(backoff):
			}
			c, err := b.dial()
			if err == nil {
				b.log.Info("reconnected")
				conn = c
				break
			}
			b.log.Warn("reconnect", zap.Error(err))
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

func (b *Broker) current() *amqp.Connection {
	b.connMu.Lock()
	defer b.connMu.Unlock()
	return b.conn
}

// openChannel opens a channel on the current connection, waiting (until
// ctx ends or Close) for a reconnection when it is down.
func (b *Broker) openChannel(ctx context.Context) (*amqp.Channel, error) {
	for {
		ch, err := b.current().Channel()
		if err == nil {
			return ch, nil
		}
		if b.subs.Closed() {
			return nil, svc.ErrBrokerClosed
		}
		if !errors.Is(err, amqp.ErrClosed) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (connection down: %v)", ctx.Err(), err)
		case <-b.done:
			return nil, svc.ErrBrokerClosed
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// HandlerPanics is how many panics of its handlers this client recovered
// (each logged with its stack, its delivery abandoned).
func (b *Broker) HandlerPanics() int64 { return b.panics.Count() }

// Scheme is "amqp".
func (b *Broker) Scheme() string { return "amqp" }

// Connection is the underlying connection.
func (b *Broker) Connection() *amqp.Connection { return b.current() }

func (b *Broker) queueName(subject string) string    { return b.o.Prefix + "q." + subject }
func (b *Broker) exchangeName(subject string) string { return b.o.Prefix + "b." + subject }

// Ping opens and closes a channel.
func (b *Broker) Ping(ctx context.Context) error {
	if b.subs.Closed() {
		return svc.ErrBrokerClosed
	}
	ch, err := b.current().Channel()
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
	close(b.done)
	b.wg.Wait()
	if err := b.current().Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (b *Broker) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if b.subs.Closed() {
		return flow.Wrap("amqpbroker", op, errors.Join(svc.ErrBrokerClosed, err), nil)
	}
	// amqp.ErrClosed while the broker is open is a lost connection, which
	// watch dials again: transient.
	return flow.Wrap("amqpbroker", op, err, permanent)
}

// permanent is a refusal the server repeats for the same call: too large
// a message, no route, access refused, no such queue or exchange, a queue
// declared with other arguments, a command it does not allow. Connection
// errors (forced close, frame, resource, internal) and a closed channel or
// connection, which watch dials again, are transient.
func permanent(err error) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case amqp.ContentTooLarge, amqp.NoRoute, amqp.AccessRefused, amqp.NotFound, amqp.PreconditionFailed,
		amqp.InvalidPath, amqp.SyntaxError, amqp.CommandInvalid, amqp.NotAllowed, amqp.NotImplemented:
		return true
	}
	return false
}

func checkSubject(subject string) error { return flow.CheckSubject("amqpbroker", subject) }

func checkSize(n int) error { return flow.CheckSize("amqpbroker", n) }

func newID() string { return flow.NewID() }

// The arguments of every work queue: RabbitMQ refuses a redeclaration
// whose arguments differ (PRECONDITION_FAILED), so every declaration builds
// them here. A message a consumer rejects goes, through the dead-letter
// exchange, to the queue of the subject's dead letter; "at-least-once"
// keeps it in its queue until the dead-letter queue has confirmed it (it
// needs x-overflow reject-publish, which no limit here ever triggers).
func (b *Broker) workArgs(subject string) amqp.Table {
	return amqp.Table{
		"x-queue-type":              "quorum",
		"x-dead-letter-exchange":    b.deadExchange(),
		"x-dead-letter-routing-key": b.queueName(fleetwire.DeadLetterSubject(subject)),
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
	}
}

func (b *Broker) deadExchange() string { return b.o.Prefix + "dead" }

// declareWork declares the subject's queue, the dead-letter exchange, and
// the queue of the subject's dead letter bound to it (so that nothing the
// subject's consumers reject is unroutable).
func (b *Broker) declareWork(ch *amqp.Channel, subject string) error {
	dead := fleetwire.DeadLetterSubject(subject)
	q, dq := b.queueName(subject), b.queueName(dead)
	if err := ch.ExchangeDeclare(b.deadExchange(), amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(dq, true, false, false, false, b.workArgs(dead)); err != nil {
		return b.explainArgs(dq, err)
	}
	if err := ch.QueueBind(dq, dq, b.deadExchange(), false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, b.workArgs(subject)); err != nil {
		return b.explainArgs(q, err)
	}
	return nil
}

// explainArgs says what to do about a queue an older build declared
// without the dead-letter arguments.
func (b *Broker) explainArgs(queue string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		return fmt.Errorf("queue %s exists with other arguments (an older svc declared it without its dead-letter exchange %s): "+
			"let the workers empty it, then delete it (rabbitmqctl delete_queue %s) so svc declares it again: %w",
			queue, b.deadExchange(), queue, err)
	}
	return err
}

func declareExchange(ch *amqp.Channel, name string) error {
	return ch.ExchangeDeclare(name, amqp.ExchangeFanout, true, false, false, false, nil)
}

// declareOnce runs declare once per name per connection, on a channel of
// its own: a declaration the server refuses closes its channel, which must
// not be the publishing one.
func (b *Broker) declareOnce(ctx context.Context, name string, declare func(*amqp.Channel) error) error {
	b.pubMu.Lock()
	known := b.declared[name]
	b.pubMu.Unlock()
	if known {
		return nil
	}
	if err := b.declareOn(ctx, declare); err != nil {
		return b.wrap("declare "+name, err)
	}
	b.pubMu.Lock()
	b.declared[name] = true
	b.pubMu.Unlock()
	return nil
}

// declareOn runs declare on a channel of its own.
func (b *Broker) declareOn(ctx context.Context, declare func(*amqp.Channel) error) error {
	ch, err := b.openChannel(ctx)
	if err != nil {
		return b.wrap("declare", err)
	}
	err = declare(ch)
	_ = ch.Close()
	return b.wrap("declare", err)
}

// publish sends one message through the publishing channel and waits for
// its confirm; declare (may be nil) runs first, once per name.
func (b *Broker) publish(ctx context.Context, exchange, key string, declare func(*amqp.Channel) error, msg amqp.Publishing) error {
	if b.subs.Closed() {
		return svc.ErrBrokerClosed
	}
	name := exchange + "/" + key
	if declare != nil {
		if err := b.declareOnce(ctx, name, declare); err != nil {
			return err
		}
	}
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	conf, err := b.pub.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		return b.wrap("publish to "+name, err)
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return b.wrap("publish to "+name, err)
	}
	if !ok {
		return svc.TransientBrokerError("amqpbroker", "publish to "+name, errors.New("the server refused the message (nack)"))
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
	return b.publishWork(ctx, subject, amqp.Publishing{
		DeliveryMode: amqp.Persistent, MessageId: newID(), Body: data, Timestamp: time.Now(),
		Headers: amqp.Table{hdrAttempt: int64(0)},
	})
}

// publishWork sends msg to the subject's queue, declared first.
func (b *Broker) publishWork(ctx context.Context, subject string, msg amqp.Publishing) error {
	q := b.queueName(subject)
	return b.publish(ctx, "", q, func(ch *amqp.Channel) error { return b.declareWork(ch, subject) }, msg)
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
	ex := b.exchangeName(subject)
	ch, msgs, err := b.bindBroadcast(ctx, ex)
	if err != nil {
		return nil, b.wrap("subscribe to "+ex, err)
	}
	s := &bsub{b: b, ex: ex, ch: ch, done: make(chan struct{})}
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

// bindBroadcast opens a channel with a private queue bound to ex.
func (b *Broker) bindBroadcast(ctx context.Context, ex string) (*amqp.Channel, <-chan amqp.Delivery, error) {
	ch, err := b.openChannel(ctx)
	if err != nil {
		return nil, nil, err
	}
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
		return nil, nil, err
	}
	return ch, msgs, nil
}

type bsub struct {
	b       *Broker
	ex      string
	mu      sync.Mutex
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
				// The connection was lost: bind again on the next one.
				ch, next, err := s.b.bindBroadcast(ctx, s.ex)
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, svc.ErrBrokerClosed) {
						s.b.log.Error("broadcast subscription ended", zap.String("exchange", s.ex), zap.Error(err))
					}
					return
				}
				s.mu.Lock()
				s.ch = ch
				s.mu.Unlock()
				msgs = next
				continue
			}
			func() {
				defer s.b.panics.Recover(subject)
				h(ctx, subject, m.Body)
			}()
		}
	}
}

func (s *bsub) Stop() error {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		s.mu.Lock()
		_ = s.ch.Close()
		s.mu.Unlock()
		s.untrack()
	})
	return nil
}

func (s *bsub) Drain(context.Context) error { return s.Stop() }
