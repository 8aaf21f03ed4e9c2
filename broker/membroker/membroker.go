// Package membroker is the in-process svc.Broker: work queues and broadcasts
// held in memory, for tests and for a publisher and workers in one process.
//
// It keeps the contract of the networked brokers (ack deadlines, redelivery,
// dead letters, prefetch) so code tested against it behaves the same on NATS
// or Redis; nothing survives the process.
package membroker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/internal/flow"
	"github.com/svc-dev/svc/fleetwire"
	"go.uber.org/zap"
)

// Hub is the shared state of the in-process broker: its queues and
// broadcast subscribers. Clients made with Connect share it, as separate
// processes share a networked broker.
type Hub struct {
	mu      sync.Mutex
	closed  bool
	queues  map[string]*queue
	topics  map[string]map[*listener]struct{}
	seq     uint64
	clients int
	// retained are Retainer records, by key, with when each expires.
	retained map[string]time.Time
	// release runs when the last client of a named hub closes.
	release func()
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{queues: map[string]*queue{}, topics: map[string]map[*listener]struct{}{}, retained: map[string]time.Time{}}
}

// New returns a client of a new private hub; closing it closes the hub.
func New() *Broker {
	h := NewHub()
	h.release = h.shutdown
	return h.Connect()
}

var (
	namedMu sync.Mutex
	named   = map[string]*Hub{}
)

// Open returns a client of the process-wide hub called name, created on first
// use and dropped when its last client closes; an empty name gives a private
// hub (New). This is what the URL memory://name opens.
func Open(name string) *Broker {
	if name == "" {
		return New()
	}
	namedMu.Lock()
	defer namedMu.Unlock()
	h, ok := named[name]
	if !ok {
		h = NewHub()
		h.release = func() {
			namedMu.Lock()
			if named[name] == h {
				delete(named, name)
			}
			namedMu.Unlock()
			h.shutdown()
		}
		named[name] = h
	}
	return h.Connect()
}

// Connect returns a new client of the hub. Closing the client stops its
// subscriptions; deliveries it held and did not settle are redelivered after
// their ack deadline, as when a process dies.
func (h *Hub) Connect() *Broker {
	h.mu.Lock()
	h.clients++
	h.mu.Unlock()
	return &Broker{hub: h, panics: flow.Panics{Log: zap.L().With(zap.String("broker", "memory"))}}
}

// HandlerPanics is how many panics of its handlers this client recovered
// (each logged with its stack, its delivery abandoned).
func (b *Broker) HandlerPanics() int64 { return b.panics.Count() }

// shutdown stops every timer of the hub; its queues are dropped.
func (h *Hub) shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, q := range h.queues {
		for m := range q.all {
			if m.timer != nil {
				m.timer.Stop()
			}
		}
	}
	h.queues = map[string]*queue{}
}

// Broker is one client of a Hub.
type Broker struct {
	hub *Hub
	// panics recovers its handlers' panics, logged at zap.L(): a hub
	// in memory has no logger of its own.
	panics flow.Panics

	subs flow.Registry[*subscription] // live subscriptions; closed after Close
}

var (
	_ svc.Broker   = (*Broker)(nil)
	_ svc.Retainer = (*Broker)(nil)
)

// Retain records key in the hub for ttl, for every client of the hub.
func (b *Broker) Retain(ctx context.Context, key string, ttl time.Duration) error {
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	h := b.hub
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	// Expired records go on each write, so the map holds only live ones
	// (plus those of the last ttl).
	for k, until := range h.retained {
		if !now.Before(until) {
			delete(h.retained, k)
		}
	}
	h.retained[key] = now.Add(ttl)
	return nil
}

// Retained reports whether key was retained and has not expired.
func (b *Broker) Retained(ctx context.Context, key string) (bool, error) {
	if b.isClosed() {
		return false, svc.ErrBrokerClosed
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	h := b.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	until, ok := h.retained[key]
	return ok && time.Now().Before(until), nil
}

// Scheme is "memory".
func (b *Broker) Scheme() string { return "memory" }

func (b *Broker) isClosed() bool { return b.subs.Closed() }

// Ping reports ErrBrokerClosed after Close.
func (b *Broker) Ping(ctx context.Context) error {
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	return ctx.Err()
}

// Close stops this client's subscriptions; the hub's messages stay for its
// other clients (a private hub closes with its only client).
func (b *Broker) Close() error {
	subs, first := b.subs.Close()
	if !first {
		return nil
	}
	for _, s := range subs {
		_ = s.Stop()
	}
	h := b.hub
	h.mu.Lock()
	h.clients--
	last := h.clients == 0
	h.mu.Unlock()
	if last && h.release != nil {
		h.release()
	}
	return nil
}

func (b *Broker) track(s *subscription) error { return b.subs.Track(s) }

func (b *Broker) untrack(s *subscription) { b.subs.Untrack(s) }

func checkPublish(ctx context.Context, subject string, data []byte) error {
	if err := flow.CheckSubject("membroker", subject); err != nil {
		return err
	}
	if err := flow.CheckSize("membroker", len(data)); err != nil {
		return err
	}
	return ctx.Err()
}

// ---- work queues

type queue struct {
	subject string
	group   string
	ready   []*message
	all     map[*message]struct{} // ready, in flight or waiting out a nack delay
	members []*member
	next    int // round robin over members
}

type message struct {
	id         string
	data       []byte
	deliveries int
	// token identifies the current delivery; 0 when not in flight.
	token    uint64
	deadline time.Time
	timer    *time.Timer
}

type member struct {
	q    *queue
	opts svc.SubscribeOptions
	h    svc.Handler
	sub  *flow.Sub
	cl   *Broker
}

func (h *Hub) queueLocked(subject string) *queue {
	q, ok := h.queues[subject]
	if !ok {
		q = &queue{subject: subject, all: map[*message]struct{}{}}
		h.queues[subject] = q
	}
	return q
}

// Publish queues data on subject.
func (b *Broker) Publish(ctx context.Context, subject string, data []byte) error {
	if err := checkPublish(ctx, subject, data); err != nil {
		return err
	}
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	b.hub.enqueue(subject, append([]byte(nil), data...))
	return nil
}

func (h *Hub) enqueue(subject string, data []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.seq++
	q := h.queueLocked(subject)
	m := &message{id: strconv.FormatUint(h.seq, 10), data: data}
	q.all[m] = struct{}{}
	q.ready = append(q.ready, m)
	h.pumpLocked(q)
}

// Subscribe joins opts.Group on subject.
func (b *Broker) Subscribe(ctx context.Context, subject string, opts svc.SubscribeOptions, hd svc.Handler) (svc.Subscription, error) {
	if subject == "" || hd == nil {
		return nil, flow.Refused("membroker", "Subscribe needs a subject and a handler")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults(subject)
	h := b.hub
	m := &member{opts: opts, h: hd, cl: b}
	m.sub = flow.New(opts.Prefetch, nil)
	m.sub.Panics, m.sub.Subject = &b.panics, subject
	m.sub.OnRelease = func() {
		h.mu.Lock()
		h.pumpLocked(m.q)
		h.mu.Unlock()
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, svc.ErrBrokerClosed
	}
	q := h.queueLocked(subject)
	if q.group != "" && q.group != opts.Group {
		h.mu.Unlock()
		return nil, flow.Refused("membroker", "subject %s is consumed by group %q; refusing a second group %q", subject, q.group, opts.Group)
	}
	q.group = opts.Group
	m.q = q
	h.mu.Unlock()

	s := &subscription{sub: m.sub}
	s.cleanup = func() {
		h.mu.Lock()
		for i, x := range q.members {
			if x == m {
				q.members = append(q.members[:i], q.members[i+1:]...)
				break
			}
		}
		h.mu.Unlock()
		b.untrack(s)
	}
	if err := b.track(s); err != nil {
		return nil, err
	}
	h.mu.Lock()
	q.members = append(q.members, m)
	h.pumpLocked(q)
	h.mu.Unlock()
	return s, nil
}

// pumpLocked hands ready messages to members with free slots, round robin.
func (h *Hub) pumpLocked(q *queue) {
	if h.closed || q == nil {
		return
	}
	for len(q.ready) > 0 {
		var to *member
		for i := range q.members {
			m := q.members[(q.next+i)%len(q.members)]
			if !m.sub.Stopping() && m.sub.TryAcquire() {
				to = m
				q.next = (q.next + i + 1) % len(q.members)
				break
			}
		}
		if to == nil {
			return
		}
		msg := q.ready[0]
		deliveries := msg.deliveries + 1
		if to.opts.MaxDeliver > 0 && deliveries > to.opts.MaxDeliver {
			if !h.deadLetterLocked(q, to, msg, deliveries-1) {
				continue // the member is stopping; the message stays
			}
			q.ready[0] = nil
			q.ready = q.ready[1:]
			delete(q.all, msg)
			continue
		}
		h.seq++
		token := h.seq
		d := &svc.Delivery{
			Subject: q.subject, Data: msg.data, Attempt: deliveries, ID: msg.id,
			AckWait: to.opts.AckWait, Acker: &acker{h: h, q: q, m: msg, token: token, wait: to.opts.AckWait},
		}
		hd := to.h
		// The handler cannot settle before the lock is released, so the
		// message's state may be set after it starts.
		if !to.sub.Go(func(ctx context.Context) { hd(ctx, d) }) {
			continue
		}
		q.ready[0] = nil
		q.ready = q.ready[1:]
		msg.deliveries = deliveries
		msg.token = token
		msg.deadline = time.Now().Add(to.opts.AckWait)
		msg.timer = time.AfterFunc(to.opts.AckWait, func() { h.expire(q, msg, token) })
	}
}

// deadLetterLocked hands msg, delivered n times, to the member's dead-letter
// hook and the dead-letter subject; false when the member is stopping.
func (h *Hub) deadLetterLocked(q *queue, to *member, msg *message, n int) bool {
	dl := svc.DeadLetter{
		Subject: q.subject, Data: msg.data, Deliveries: n, At: time.Now().UTC(),
		Reason: fmt.Sprintf("not acknowledged after %d deliveries", n),
	}
	hook := to.opts.OnDeadLetter
	return to.sub.Go(func(ctx context.Context) {
		if hook != nil {
			hook(ctx, dl)
		}
		rec, err := json.Marshal(dl)
		if err == nil {
			h.enqueue(fleetwire.DeadLetterSubject(q.subject), rec)
		}
	})
}

func (h *Hub) expire(q *queue, m *message, token uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || m.token != token {
		return
	}
	if left := time.Until(m.deadline); left > 0 {
		m.timer = time.AfterFunc(left, func() { h.expire(q, m, token) })
		return
	}
	m.token = 0
	m.timer = nil
	q.ready = append(q.ready, m)
	h.pumpLocked(q)
}

type acker struct {
	h     *Hub
	q     *queue
	m     *message
	token uint64
	wait  time.Duration
}

var errExpired = svc.PermanentBrokerError("membroker", "", errors.New("delivery no longer held (its ack deadline passed)"))

// current checks, with h.mu held, that the delivery still holds its message.
func (a *acker) current() error {
	if a.h.closed {
		return svc.ErrBrokerClosed
	}
	if a.m.token != a.token {
		return errExpired
	}
	return nil
}

func (a *acker) Ack(ctx context.Context) error {
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	if err := a.current(); err != nil {
		return err
	}
	a.m.token = 0
	if a.m.timer != nil {
		a.m.timer.Stop()
		a.m.timer = nil
	}
	delete(a.q.all, a.m)
	return nil
}

func (a *acker) Nack(ctx context.Context, delay time.Duration) error {
	h := a.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := a.current(); err != nil {
		return err
	}
	m, q := a.m, a.q
	m.token = 0
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	if delay <= 0 {
		q.ready = append(q.ready, m)
		h.pumpLocked(q)
		return nil
	}
	m.timer = time.AfterFunc(delay, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.closed || m.token != 0 {
			return
		}
		m.timer = nil
		q.ready = append(q.ready, m)
		h.pumpLocked(q)
	})
	return nil
}

func (a *acker) InProgress(ctx context.Context) error {
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	if err := a.current(); err != nil {
		return err
	}
	a.m.deadline = time.Now().Add(a.wait)
	return nil
}

// ---- broadcast

// listenerBuffer is how far a broadcast subscriber may fall behind before it
// loses messages.
const listenerBuffer = 1024

type listener struct {
	ch chan []byte
}

// Broadcast sends data to the current subscribers of subject; one whose
// buffer is full misses it.
func (b *Broker) Broadcast(ctx context.Context, subject string, data []byte) error {
	if err := checkPublish(ctx, subject, data); err != nil {
		return err
	}
	if b.isClosed() {
		return svc.ErrBrokerClosed
	}
	h := b.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	for l := range h.topics[subject] {
		select {
		case l.ch <- append([]byte(nil), data...): // each handler keeps its own
		default:
		}
	}
	return nil
}

// SubscribeBroadcast calls hd for every message broadcast on subject.
func (b *Broker) SubscribeBroadcast(ctx context.Context, subject string, hd svc.BroadcastHandler) (svc.Subscription, error) {
	if subject == "" || hd == nil {
		return nil, flow.Refused("membroker", "SubscribeBroadcast needs a subject and a handler")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h := b.hub
	l := &listener{ch: make(chan []byte, listenerBuffer)}
	fs := flow.New(1, nil)
	s := &subscription{sub: fs}
	h.mu.Lock()
	if h.topics[subject] == nil {
		h.topics[subject] = map[*listener]struct{}{}
	}
	h.topics[subject][l] = struct{}{}
	h.mu.Unlock()
	fs.Loop(func(ctx context.Context) {
		for {
			select {
			case <-ctx.Done():
				return
			case data := <-l.ch:
				func() {
					defer b.panics.Recover(subject)
					hd(ctx, subject, data)
				}()
			}
		}
	})
	s.cleanup = func() {
		h.mu.Lock()
		delete(h.topics[subject], l)
		if len(h.topics[subject]) == 0 {
			delete(h.topics, subject)
		}
		h.mu.Unlock()
		b.untrack(s)
	}
	if err := b.track(s); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

type subscription struct {
	sub     *flow.Sub
	cleanup func()
	once    sync.Once
}

func (s *subscription) Stop() error {
	err := s.sub.Stop()
	s.once.Do(s.cleanup)
	return err
}

func (s *subscription) Drain(ctx context.Context) error {
	err := s.sub.Drain(ctx)
	s.once.Do(s.cleanup)
	return err
}
