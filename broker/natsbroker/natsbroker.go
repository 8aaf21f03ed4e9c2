// Package natsbroker is the svc.Broker on NATS: JetStream work-queue streams
// for work subjects, core NATS subjects for broadcasts, and an embedded
// nats-server for a fleet on one host.
//
// Layout on the server:
//
//   - Work subjects live in work-queue streams named after their first two
//     tokens: "svc.tasks.>" in SVC_TASKS, "svc.results.>" in SVC_RESULTS
//     (the publishers' inboxes: stored, so a result published while its
//     publisher reconnects is not lost; kept at most a day), "svc.dead.>"
//     in SVC_DEAD (kept a week). Streams are created on first use with file
//     storage, and left as they are when they exist.
//   - Each consumer group is a durable pull consumer filtered on its
//     subject (named after the group and a hash of group and subject), shared by every member (the fleet), with explicit acks,
//     AckWait as the ack deadline, in-progress acks to extend it, and
//     unbounded server-side redelivery: the client counts deliveries and
//     sends a message past MaxDeliver to the dead letter (publishing the
//     DeadLetter record to SVC_DEAD, then terminating the message), so the
//     same rules hold on every broker. A member pulls only as many
//     messages as it has free handler slots (its prefetch); the consumer's
//     MaxAckPending bounds the whole fleet's in-flight messages.
//     Consumers idle for a day are removed by the server.
//   - Broadcasts are core NATS publishes: at most once, to subscribers
//     connected at the time.
package natsbroker

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/internal/flow"
	"github.com/svc-dev/svc/fleetwire"
)

// Options configure a connection.
type Options struct {
	// Name is the connection name the server shows; default "svc".
	Name string
	// Logger receives connection events; nil is silent.
	Logger *zap.Logger
	// MaxAckPending bounds the messages in flight (delivered, not yet
	// acked) across all members of one consumer group; default 10000. Each
	// member's own bound is its SubscribeOptions.Prefetch.
	MaxAckPending int
	// Replicas of each stream in a JetStream cluster; default 1.
	Replicas int
}

// pullExpiry bounds one pull request, so that a stopped member's request
// does not linger on the server.
const pullExpiry = 5 * time.Second

// consumerIdle is how long a consumer without members is kept.
const consumerIdle = 24 * time.Hour

// Broker is a NATS connection.
type Broker struct {
	panics flow.Panics
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *zap.Logger
	o      Options

	streams sync.Map // stream name → struct{} once ensured

	kvMu sync.Mutex
	kv   jetstream.KeyValue // Retain's bucket, once created

	subs flow.Registry[*subscription] // live subscriptions; closed after Close
}

var _ svc.Broker = (*Broker)(nil)

// Connect connects to the NATS servers of url (nats://host:port, several
// separated by commas) and checks that JetStream is enabled.
func Connect(ctx context.Context, url string, o Options) (*Broker, error) {
	if o.Name == "" {
		o.Name = "svc"
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.MaxAckPending <= 0 {
		o.MaxAckPending = 10000
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	log := o.Logger.With(zap.String("broker", "nats"))
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	nc, err := nats.Connect(url,
		nats.Name(o.Name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", zap.String("url", c.ConnectedUrlRedacted())) }),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			log.Warn("NATS error", zap.String("subject", subj), zap.Error(err))
		}),
	)
	if err != nil {
		return nil, flow.Wrap("natsbroker", "connect", err, permanent)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, flow.Wrap("natsbroker", "", err, permanent)
	}
	b := &Broker{nc: nc, js: js, log: log, o: o, panics: flow.Panics{Log: log}}
	if err := b.Ping(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	if mp := nc.MaxPayload(); mp < svc.MaxPayloadBytes {
		log.Warn("the NATS server's max_payload is below what svc may send; raise it (max_payload: 8MB)",
			zap.Int64("max_payload", mp), zap.Int("want", svc.MaxPayloadBytes))
	}
	log.Info("connected to NATS", zap.String("url", nc.ConnectedUrlRedacted()))
	return b, nil
}

// HandlerPanics is how many panics of its handlers this client recovered
// (each logged with its stack, its delivery abandoned).
func (b *Broker) HandlerPanics() int64 { return b.panics.Count() }

// Scheme is "nats".
func (b *Broker) Scheme() string { return "nats" }

// Conn is the underlying connection, for callers that need more of NATS.
func (b *Broker) Conn() *nats.Conn { return b.nc }

func (b *Broker) isClosed() bool { return b.subs.Closed() }

// Ping asks the server for the account's JetStream info: nil when the server
// answers and JetStream is on.
func (b *Broker) Ping(ctx context.Context) error {
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	if _, err := b.js.AccountInfo(ctx); err != nil {
		return b.wrap("JetStream not available", err)
	}
	return nil
}

var _ svc.BrokerStatus = (*Broker)(nil)

// Connected is nil while the connection is up; while nats.go reconnects
// (it does so for ever, every 500 ms) it says so.
func (b *Broker) Connected() error {
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	if st := b.nc.Status(); st != nats.CONNECTED {
		return svc.TransientBrokerError("natsbroker", "", fmt.Errorf("%s, not connected", strings.ToLower(st.String())))
	}
	return nil
}

// Close stops every subscription, sends what is buffered and closes the
// connection.
func (b *Broker) Close() error {
	subs, first := b.subs.Close()
	if !first {
		return nil
	}
	for _, s := range subs {
		_ = s.Stop()
	}
	if b.nc.IsConnected() {
		_ = b.nc.FlushTimeout(time.Second)
	}
	b.nc.Close()
	return nil
}

func (b *Broker) track(s *subscription) error { return b.subs.Track(s) }

func (b *Broker) untrack(s *subscription) { b.subs.Untrack(s) }

// wrap types a NATS error as a svc.BrokerError, ErrBrokerClosed after
// Close.
func (b *Broker) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if b.isClosed() || errors.Is(err, nats.ErrConnectionClosed) {
		return flow.Wrap("natsbroker", op, svc.ErrBrokerClosed, nil)
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		err = fmt.Errorf("%w (raise the server's max_payload to %d)", err, svc.MaxPayloadBytes)
	}
	return flow.Wrap("natsbroker", op, err, permanent)
}

// permanent tells what the server refuses whenever it is asked (too large
// a message, a bad subject, no permission) from a connection that is down
// or slow, which nats.go reconnects.
func permanent(err error) bool {
	for _, p := range []error{nats.ErrMaxPayload, nats.ErrBadSubject, nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrPermissionViolation} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// streamFor names the stream of a work subject and the subjects it holds.
func streamFor(subject string) (name, filter string, maxAge time.Duration, err error) {
	tokens := strings.Split(subject, ".")
	if len(tokens) < 3 {
		return "", "", 0, flow.Refused("natsbroker", "work subject %q needs at least three tokens (like svc.tasks.NAME)", subject)
	}
	for _, t := range tokens {
		if t == "" || strings.ContainsAny(t, " \t\r\n*>") {
			return "", "", 0, flow.Refused("natsbroker", "invalid subject %q", subject)
		}
	}
	prefix := tokens[0] + "." + tokens[1]
	name = strings.ToUpper(sanitize(tokens[0]) + "_" + sanitize(tokens[1]))
	switch prefix {
	case "svc.results":
		maxAge = 24 * time.Hour
	case "svc.dead":
		maxAge = 7 * 24 * time.Hour
	}
	return name, prefix + ".>", maxAge, nil
}

// sanitize keeps the characters NATS allows in stream and consumer names.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}

// durableName is the consumer of group on subject. A durable belongs to a
// stream, not a subject, so the name carries a hash of both: groups of the
// same name on different subjects stay apart, and sanitized names cannot
// collide.
func durableName(subject, group string) string {
	h := fnv.New64a()
	h.Write([]byte(subject))
	h.Write([]byte{0})
	h.Write([]byte(group))
	s := sanitize(group)
	if len(s) > 180 {
		s = s[:180]
	}
	return s + "_" + hex.EncodeToString(h.Sum(nil))
}

// ensureStream creates the stream of subject if this connection has not yet.
func (b *Broker) ensureStream(ctx context.Context, subject string) (string, error) {
	name, filter, maxAge, err := streamFor(subject)
	if err != nil {
		return "", err
	}
	if _, ok := b.streams.Load(name); ok {
		return name, nil
	}
	cfg := jetstream.StreamConfig{
		Name:      name,
		Subjects:  []string{filter},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
		MaxAge:    maxAge,
		Replicas:  b.o.Replicas,
		Discard:   jetstream.DiscardOld,
	}
	// Look before creating, and never update: an existing stream keeps the
	// configuration an operator may have tuned, and a stream update racing
	// a consumer creation trips a data race inside nats-server 2.15.
	_, err = b.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = b.js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil // created meanwhile by another client
		}
	}
	if err != nil {
		return "", b.wrap("create stream "+name, err)
	}
	b.streams.Store(name, struct{}{})
	return name, nil
}

// forgetStream makes the next use of subject's stream check it again.
func (b *Broker) forgetStream(subject string) {
	if name, _, _, err := streamFor(subject); err == nil {
		b.streams.Delete(name)
	}
}

// Publish stores data in the work subject's stream and waits for the
// server's ack.
func (b *Broker) Publish(ctx context.Context, subject string, data []byte) error {
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	if _, err := b.ensureStream(ctx, subject); err != nil {
		return err
	}
	if _, err := b.js.Publish(ctx, subject, data); err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			b.forgetStream(subject) // deleted on the server: recreate next time
		}
		return b.wrap("publish to "+subject, err)
	}
	return nil
}

// Subscribe joins the durable consumer of opts.Group on subject.
func (b *Broker) Subscribe(ctx context.Context, subject string, opts svc.SubscribeOptions, h svc.Handler) (svc.Subscription, error) {
	if h == nil {
		return nil, flow.Refused("natsbroker", "Subscribe needs a handler")
	}
	if b.isClosed() {
		return nil, svc.ErrBrokerClosed
	}
	opts = opts.WithDefaults(subject)
	m := &member{b: b, subject: subject, opts: opts, h: h}
	if err := m.join(ctx); err != nil {
		return nil, err
	}
	m.fs = flow.New(opts.Prefetch, nil)
	m.fs.Panics, m.fs.Subject = &b.panics, subject
	s := &subscription{fs: m.fs}
	s.cleanup = func() { b.untrack(s) }
	if err := b.track(s); err != nil {
		return nil, err
	}
	m.fs.Loop(m.pull)
	return s, nil
}

type member struct {
	b       *Broker
	subject string
	opts    svc.SubscribeOptions
	h       svc.Handler
	cons    jetstream.Consumer // written by join, in Subscribe and then only in pull
	fs      *flow.Sub
}

// join creates (or updates) the group's durable consumer, and its stream
// when missing.
func (m *member) join(ctx context.Context) error {
	b, opts, subject := m.b, m.opts, m.subject
	stream, err := b.ensureStream(ctx, subject)
	if err != nil {
		return err
	}
	cons, err := b.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:           durableName(subject, opts.Group),
		Description:       "svc consumer group " + opts.Group + " of " + subject,
		FilterSubject:     subject,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           opts.AckWait,
		MaxDeliver:        -1,
		MaxAckPending:     b.o.MaxAckPending,
		InactiveThreshold: consumerIdle,
		Replicas:          b.o.Replicas,
	})
	if err != nil {
		if strings.Contains(err.Error(), "filtered consumer not unique") || strings.Contains(err.Error(), "overlapping") {
			return flow.Refused("natsbroker", "subject %s already has a consumer group other than %q (a work queue has one): %w", subject, opts.Group, err)
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			b.forgetStream(subject)
		}
		return b.wrap("create consumer "+opts.Group, err)
	}
	m.cons = cons
	return nil
}

// pull fetches as many messages as there are free handler slots, until the
// subscription stops. After repeated failures it joins again, which brings
// back a consumer or stream that was deleted on the server.
func (m *member) pull(ctx context.Context) {
	backoff := 50 * time.Millisecond
	failures := 0
	for {
		if !m.fs.Acquire() {
			return
		}
		n := 1
		for m.fs.TryAcquire() {
			n++
		}
		fctx, cancel := context.WithTimeout(ctx, pullExpiry)
		batch, err := m.cons.Fetch(n, jetstream.FetchContext(fctx))
		got := 0
		if err == nil {
			for msg := range batch.Messages() {
				got++
				m.dispatch(msg)
			}
			err = batch.Error()
		}
		cancel()
		for ; got < n; got++ {
			m.fs.Release()
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			m.b.log.Debug("pull failed", zap.String("subject", m.subject), zap.Error(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			if failures++; failures%3 == 0 {
				jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if err := m.join(jctx); err != nil && ctx.Err() == nil {
					m.b.log.Warn("rejoining the consumer group failed", zap.String("subject", m.subject), zap.Error(err))
				}
				cancel()
			}
			continue
		}
		backoff = 50 * time.Millisecond
		failures = 0
	}
}

// dispatch hands one message (holding one slot) to the handler, or to the
// dead letter when it has been delivered MaxDeliver times already.
func (m *member) dispatch(msg jetstream.Msg) {
	if m.fs.Stopping() {
		// Arrived as the member stops: give it straight back.
		m.fs.Go(func(context.Context) { _ = msg.Nak() })
		return
	}
	meta, err := msg.Metadata()
	if err != nil {
		m.b.log.Warn("message without JetStream metadata", zap.String("subject", msg.Subject()), zap.Error(err))
		m.fs.Go(func(context.Context) { _ = msg.Term() })
		return
	}
	attempt := int(meta.NumDelivered)
	if m.opts.MaxDeliver > 0 && attempt > m.opts.MaxDeliver {
		m.fs.Go(func(ctx context.Context) { m.deadLetter(ctx, msg, attempt-1) })
		return
	}
	d := &svc.Delivery{
		Subject: msg.Subject(), Data: msg.Data(), Attempt: attempt,
		ID:      strconv.FormatUint(meta.Sequence.Stream, 10),
		AckWait: m.opts.AckWait, Acker: acker{b: m.b, msg: msg},
	}
	m.fs.Go(func(ctx context.Context) { m.h(ctx, d) })
}

func (m *member) deadLetter(ctx context.Context, msg jetstream.Msg, deliveries int) {
	dl := svc.DeadLetter{
		Subject: msg.Subject(), Data: msg.Data(), Deliveries: deliveries, At: time.Now().UTC(),
		Reason: fmt.Sprintf("not acknowledged after %d deliveries", deliveries),
	}
	if m.opts.OnDeadLetter != nil {
		m.opts.OnDeadLetter(ctx, dl)
	}
	rec, err := json.Marshal(dl)
	if err == nil {
		// A context of its own: the record must land even while stopping.
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = m.b.Publish(pctx, fleetwire.DeadLetterSubject(msg.Subject()), rec)
		cancel()
	}
	if err != nil {
		// Leave the message to come back and try again.
		m.b.log.Warn("dead letter not stored; the message stays", zap.String("subject", msg.Subject()), zap.Error(err))
		return
	}
	if err := msg.TermWithReason(dl.Reason); err != nil {
		m.b.log.Warn("dead-lettered message not terminated", zap.String("subject", msg.Subject()), zap.Error(err))
	}
}

type acker struct {
	b   *Broker
	msg jetstream.Msg
}

// Ack waits for the server to confirm it, so a nil error means the message
// is gone from the stream.
func (a acker) Ack(ctx context.Context) error {
	return a.b.wrap("ack", a.msg.DoubleAck(ctx))
}

func (a acker) Nack(ctx context.Context, delay time.Duration) error {
	if delay > 0 {
		return a.b.wrap("nak", a.msg.NakWithDelay(delay))
	}
	return a.b.wrap("nak", a.msg.Nak())
}

func (a acker) InProgress(ctx context.Context) error {
	return a.b.wrap("in-progress ack", a.msg.InProgress())
}

// broadcastBuffer is how far a broadcast subscriber may fall behind before
// NATS drops messages for it.
const broadcastBuffer = 1024

// Broadcast publishes data on the core NATS subject.
func (b *Broker) Broadcast(ctx context.Context, subject string, data []byte) error {
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.wrap("broadcast to "+subject, b.nc.Publish(subject, data))
}

// setupTimeout bounds a subscription's setup when the caller's context has
// no deadline of its own.
const setupTimeout = 30 * time.Second

// SubscribeBroadcast subscribes to the core NATS subject; it returns once
// the server has the subscription.
func (b *Broker) SubscribeBroadcast(ctx context.Context, subject string, h svc.BroadcastHandler) (svc.Subscription, error) {
	if h == nil {
		return nil, flow.Refused("natsbroker", "SubscribeBroadcast needs a handler")
	}
	if b.isClosed() {
		return nil, svc.ErrBrokerClosed
	}
	ch := make(chan *nats.Msg, broadcastBuffer)
	ns, err := b.nc.ChanSubscribe(subject, ch)
	if err != nil {
		return nil, b.wrap("subscribe to "+subject, err)
	}
	// FlushWithContext refuses a context without a deadline; a caller's
	// Background gets a bound here rather than an error.
	fctx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		fctx, cancel = context.WithTimeout(ctx, setupTimeout)
	}
	err = b.nc.FlushWithContext(fctx)
	cancel()
	if err != nil {
		_ = ns.Unsubscribe()
		return nil, b.wrap("subscribe to "+subject, err)
	}
	fs := flow.New(1, nil)
	s := &subscription{fs: fs}
	s.cleanup = func() { b.untrack(s) }
	s.before = func() { _ = ns.Unsubscribe() }
	if err := b.track(s); err != nil {
		_ = ns.Unsubscribe()
		return nil, err
	}
	fs.Loop(func(ctx context.Context) {
		for {
			select {
			case <-ctx.Done():
				return
			case msg := <-ch:
				func() {
					defer b.panics.Recover(subject)
					h(ctx, msg.Subject, msg.Data)
				}()
			}
		}
	})
	return s, nil
}

type subscription struct {
	fs      *flow.Sub
	before  func() // runs first, once
	cleanup func()
	b1, b2  sync.Once
}

func (s *subscription) Stop() error { return s.end(s.fs.Stop) }

func (s *subscription) Drain(ctx context.Context) error {
	return s.end(func() error { return s.fs.Drain(ctx) })
}

func (s *subscription) end(finish func() error) error {
	if s.before != nil {
		s.b1.Do(s.before)
	}
	err := finish()
	s.b2.Do(s.cleanup)
	return err
}
