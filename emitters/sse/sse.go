// Package sse is the SSE emitter: it hands the runtime's events to live
// subscribers (the clients of GET /events/stream), each fed by its own
// actor behind a bounded mailbox that drops, rather than waits, when the
// subscriber falls behind.
//
// Emit never blocks the runtime, and costs it the same with one subscriber
// or a thousand: it hands the event to a bounded fan-out queue (one
// non-blocking channel send) and returns. The emitter's fan-out goroutine
// matches each event against every subscriber's filter and offers it to
// that subscriber's mailbox without waiting. The subscriber's actor moves
// events from its mailbox to the subscription's queue (a channel for
// Subscribe, a queue the reader takes from with Next for SubscribeEncoded),
// again without waiting. Each stage is bounded (the fan-out queue by 4 × QueueSize, the
// others by QueueSize); an event that finds a stage full is dropped and
// counted in Dropped (an event dropped by the fan-out queue, before any
// filter ran, counts for every subscription). A subscriber's queue is
// bounded in bytes too, by QueueBytes of the events' JSON: an event that
// would take it past that is dropped and counted the same way. So a
// subscriber that stops reading holds at most QueueSize events and
// QueueBytes waiting for it (plus at most QueueSize in transit in its
// mailbox, whose memory grows only as events wait in it), however long it
// stalls, and costs the runtime nothing but the drops.
//
// A subscriber whose client stops taking the stream altogether is cut
// off: once its queue has stayed full for StallTimeout while events kept
// coming (Stalled), or the HTTP handler's write deadline expires, the
// handler calls DisconnectSlow on its subscription, which ends it and
// counts it in SlowDisconnects and the svc.sse.slow_disconnects counter.
// Until then each event costs a stalled subscriber a length check in the
// fan-out, not a trip through its actor.
//
// Each event travels through the stages as one svc.EncodedEvent, shared by
// every subscriber: those of SubscribeEncoded (the HTTP handler's) get it
// as it is, and its JSON is encoded once, by the first that asks, instead
// of once per subscriber (at 1,000 subscribers the per-subscriber encoding
// was 27 % of the server's CPU, issue 15).
package sse

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"

	"github.com/svc-dev/svc"
)

// MetricSlowDisconnects is the Int64Counter, in {subscriber}, of the
// subscribers cut off for not keeping up (DisconnectSlow).
const MetricSlowDisconnects = "svc.sse.slow_disconnects"

// MeterName is the instrumentation scope of the emitter's meter.
const MeterName = "github.com/svc-dev/svc/emitters/sse"

// Defaults of Config.
const (
	DefaultHeartbeatInterval = 15 * time.Second
	DefaultQueueSize         = 1024
	DefaultStallTimeout      = 2 * time.Second
	// DefaultQueueBytes bounds the JSON of the events waiting for one
	// subscriber: 2,000 stalled subscribers of 1,024 large events each
	// could otherwise keep gigabytes alive (issue 25). Hundreds of
	// ordinary events (a few hundred bytes each) fit.
	DefaultQueueBytes = 256 << 10
)

// Config configures New. Zero fields take the defaults.
type Config struct {
	// HeartbeatInterval is how long a stream may stay idle before the
	// server writes a heartbeat (default 15 s). The emitter only reports
	// it (svc.EventSubscriber); the HTTP handler writes the heartbeats.
	HeartbeatInterval time.Duration
	// QueueSize bounds the events waiting for one subscriber (default
	// 1024).
	QueueSize int
	// QueueBytes bounds the JSON encodings of the events waiting for one
	// subscriber, in bytes (default DefaultQueueBytes); one event larger
	// than it still goes to a subscriber with nothing waiting.
	QueueBytes int
	// StallTimeout is how long a subscriber's queue may stay full, with
	// events arriving for it, before the subscription reports itself
	// stalled (Stalled), so that the HTTP handler cuts the client off
	// without waiting for its write timeout (default 2 s).
	StallTimeout time.Duration
	// Logger receives protoactor's own logs when New builds the actor
	// system itself; nil discards them. With a system given to New, that
	// system's logger is used.
	Logger *slog.Logger
	// MeterProvider, when set, receives MetricSlowDisconnects.
	MeterProvider metric.MeterProvider
	// Prefix is put before the names of the subscriber actors
	// ("PREFIX/subscribers/sse-N"), so that they stand apart in an actor
	// system shared with other actors (a host's); none when "".
	Prefix string
}

// Emitter is the SSE emitter: an svc.Emitter and an svc.EventSubscriber.
// It is safe for concurrent use.
type Emitter struct {
	system    *actor.ActorSystem
	ownSystem bool
	heartbeat time.Duration
	queueSize int
	queueB    int // Config.QueueBytes
	stall     time.Duration
	prefix    string // of the subscriber actors' names: "" or "PREFIX/"

	// subs is replaced, never changed, so that Emit reads it without a
	// lock; mu serialises the writers and guards closed.
	subs atomic.Pointer[[]*subscription]
	// deltaSubs counts the subscriptions that asked for agent_delta
	// events: without one, Emit does not fan them out at all.
	deltaSubs atomic.Int64
	mu        sync.Mutex
	closed    bool
	once      sync.Once

	// live counts the subscriber actors spawned and not yet stopped.
	live atomic.Int64

	// slow counts DisconnectSlow; slowCounter records it too when a
	// MeterProvider was given.
	slow        atomic.Uint64
	slowCounter metric.Int64Counter

	// fan is the fan-out queue between Emit and the fan-out goroutine,
	// which stops when done closes and closes fanned when it has.
	fan        chan *svc.EncodedEvent
	done       chan struct{}
	fanned     chan struct{}
	fanDropped atomic.Uint64
}

var (
	_ svc.Emitter                = (*Emitter)(nil)
	_ svc.EventSubscriber        = (*Emitter)(nil)
	_ svc.EncodedEventSubscriber = (*Emitter)(nil)
)

// New returns an SSE emitter whose subscriber actors live in system. With
// a nil system it builds its own, which Close shuts down; a system given
// here is the caller's to shut down, after Close. Negative sizes or
// intervals are an error.
func New(system *actor.ActorSystem, cfg Config) (*Emitter, error) {
	if cfg.HeartbeatInterval < 0 {
		return nil, fmt.Errorf("sse: HeartbeatInterval %v: must not be negative", cfg.HeartbeatInterval)
	}
	if cfg.StallTimeout < 0 {
		return nil, fmt.Errorf("sse: StallTimeout %v: must not be negative", cfg.StallTimeout)
	}
	if cfg.QueueSize < 0 {
		return nil, fmt.Errorf("sse: QueueSize %d: must not be negative", cfg.QueueSize)
	}
	if cfg.QueueBytes < 0 {
		return nil, fmt.Errorf("sse: QueueBytes %d: must not be negative", cfg.QueueBytes)
	}
	if cfg.QueueBytes == 0 {
		cfg.QueueBytes = DefaultQueueBytes
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	e := &Emitter{system: system, heartbeat: cfg.HeartbeatInterval, queueSize: cfg.QueueSize, queueB: cfg.QueueBytes, stall: cfg.StallTimeout,
		fan: make(chan *svc.EncodedEvent, 4*cfg.QueueSize), done: make(chan struct{}), fanned: make(chan struct{})}
	if cfg.Prefix != "" {
		e.prefix = cfg.Prefix + "/"
	}
	if cfg.MeterProvider != nil {
		c, err := cfg.MeterProvider.Meter(MeterName).Int64Counter(MetricSlowDisconnects, metric.WithUnit("{subscriber}"),
			metric.WithDescription("Event stream subscribers disconnected for not keeping up."))
		if err != nil {
			return nil, fmt.Errorf("sse: %s counter: %w", MetricSlowDisconnects, err)
		}
		e.slowCounter = c
	}
	if system == nil {
		logger := cfg.Logger
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		e.system = actor.NewActorSystem(
			actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }),
			// A dead letter starts a timer goroutine for the throttle
			// window; keep it short so that it does not outlive Close.
			actor.WithDeadLetterThrottleInterval(10*time.Millisecond),
			actor.WithDeadLetterRequestLogging(false),
		)
		e.ownSystem = true
	}
	go e.fanOut()
	return e, nil
}

// fanOut delivers queued events to the subscribers, in emit order, until
// Close.
func (e *Emitter) fanOut() {
	defer close(e.fanned)
	for {
		select {
		case <-e.done:
			return
		case ev := <-e.fan:
			subs := e.subs.Load()
			if subs == nil {
				continue
			}
			var now int64 // read once an event, and only when a queue is full
			for _, s := range *subs {
				if !s.filter.Match(&ev.Event) {
					continue
				}
				// A subscriber whose queue is full (its client is not
				// reading) would only have the event queued, its actor
				// scheduled and the event dropped there: with hundreds
				// of stalled subscribers that was most of the process's
				// CPU (issue 13). Drop it here, for the cost of a length
				// check. len is racy, which is fine: an event let through
				// is dropped by the actor, one held back is one the
				// subscriber had no room for a moment ago.
				if s.full() {
					s.skipped.Add(1)
					if now == 0 {
						now = time.Now().UnixNano()
					}
					switch {
					case s.fullSince == 0:
						s.fullSince = now
					case now-s.fullSince >= int64(e.stall):
						s.stall() // once; later calls do nothing
					}
					continue
				}
				s.fullSince = 0
				s.mb.offer(ev)
			}
		}
	}
}

// HeartbeatInterval is Config.HeartbeatInterval.
func (e *Emitter) HeartbeatInterval() time.Duration { return e.heartbeat }

// Subscribers is the number of subscriber actors running: one per open
// subscription, until its actor has stopped.
func (e *Emitter) Subscribers() int { return int(e.live.Load()) }

// SlowDisconnects is how many subscriptions were ended by DisconnectSlow:
// subscribers cut off because their client did not keep up.
func (e *Emitter) SlowDisconnects() uint64 { return e.slow.Load() }

// Emit queues ev for the subscribers. It takes no lock and never waits:
// with the fan-out queue full, ev is dropped (and counted). With no
// subscribers it does nothing.
func (e *Emitter) Emit(ev svc.RuntimeEvent) {
	if subs := e.subs.Load(); subs == nil || len(*subs) == 0 {
		return
	}
	if ev.EventType == svc.EventAgentDelta && e.deltaSubs.Load() == 0 {
		return
	}
	// One copy on the heap, shared by every subscriber with its encoding
	// (made once, when first asked for): events are immutable once
	// emitted.
	select {
	case e.fan <- svc.NewEncodedEvent(ev):
	default:
		e.fanDropped.Add(1)
	}
}

// Subscribe starts a subscription to the events f matches. It ends when
// the caller closes it, when ctx ends, or when the emitter is closed. An
// unknown event type in f is a SpecValidationError; a closed emitter
// answers ShuttingDownError.
func (e *Emitter) Subscribe(ctx context.Context, f svc.EventFilter) (svc.EventSubscription, error) {
	s, err := e.subscribe(ctx, f, false)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// SubscribeEncoded is Subscribe, for a subscription that delivers each
// event with its JSON encoding, computed once and shared by all such
// subscribers (svc.EncodedEventSubscriber). The subscription also has
// Stalled and DisconnectSlow, as Subscribe's has.
func (e *Emitter) SubscribeEncoded(ctx context.Context, f svc.EventFilter) (svc.EncodedEventSubscription, error) {
	s, err := e.subscribe(ctx, f, true)
	if err != nil {
		return nil, err
	}
	return encodedSubscription{s}, nil
}

// subscribe starts a subscription whose events go to its enc queue when
// encoded, else to its out channel.
func (e *Emitter) subscribe(ctx context.Context, f svc.EventFilter, encoded bool) (*subscription, error) {
	for _, t := range f.EventTypes {
		if !slices.Contains(svc.EventTypes, t) && t != svc.EventAgentDelta {
			return nil, svc.Errorf(svc.KindSpecValidation, "unknown event type %q", t)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, svc.Wrap(svc.KindCancelled, err, "sse: subscribe")
	}
	f.EventTypes = slices.Clone(f.EventTypes) // the caller may reuse its slice
	s := &subscription{
		em:      e,
		fanBase: e.fanDropped.Load(),
		filter:  f,
		mb:      newDropMailbox(e.queueSize),
		stopped: make(chan struct{}),
	}
	s.stalled, s.stall = context.WithCancel(context.Background())
	if encoded {
		s.enc = newEventQueue(e.queueSize, e.queueB)
	} else {
		s.out = make(chan svc.RuntimeEvent, e.queueSize)
	}
	props := actor.PropsFromProducer(func() actor.Actor { return &subscriber{s: s} },
		actor.WithMailbox(func() actor.Mailbox { return s.mb }))

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, svc.Errorf(svc.KindShuttingDown, "sse: the emitter is closed")
	}
	// Counted before the spawn, so that the actor's Stopped can never
	// bring the count below zero.
	e.live.Add(1)
	pid, err := e.system.Root.SpawnNamed(props, e.prefix+"subscribers/sse-"+e.system.ProcessRegistry.NextId())
	if err != nil {
		e.live.Add(-1)
		return nil, fmt.Errorf("sse: spawn subscriber: %w", err)
	}
	s.pid = pid
	next := []*subscription{s}
	if old := e.subs.Load(); old != nil {
		next = append(slices.Clone(*old), s)
	}
	e.subs.Store(&next)
	if f.Deltas {
		e.deltaSubs.Add(1)
	}
	// If ctx has already ended, Close runs at once in its own goroutine
	// and waits for e.mu, which this call releases on return.
	// The callback may run (ctx ending) before this assignment is seen,
	// hence the atomic.
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	s.stopWatch.Store(&stop)
	return s, nil
}

// remove takes s out of the subscriber list, so that Emit stops offering
// it events.
func (e *Emitter) remove(s *subscription) {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.subs.Load()
	if old == nil {
		return
	}
	i := slices.Index(*old, s)
	if i < 0 {
		return
	}
	next := slices.Delete(slices.Clone(*old), i, i+1)
	e.subs.Store(&next)
	if s.filter.Deltas {
		e.deltaSubs.Add(-1)
	}
}

// Close ends every subscription, waits for their actors to stop and, if
// New built the actor system, shuts it down. Later Subscribe calls fail
// and later events go nowhere. It is idempotent.
func (e *Emitter) Close() error {
	e.once.Do(func() {
		e.mu.Lock()
		e.closed = true
		var subs []*subscription
		if p := e.subs.Load(); p != nil {
			subs = *p
		}
		e.mu.Unlock()
		for _, s := range subs {
			_ = s.Close()
		}
		close(e.done)
		<-e.fanned
		if e.ownSystem {
			e.system.Shutdown()
		}
	})
	return nil
}

// subscription is one subscriber's feed (svc.EventSubscription).
type subscription struct {
	em     *Emitter
	filter svc.EventFilter
	mb     *dropMailbox
	// out (Subscribe) or enc (SubscribeEncoded), the other nil, is
	// written and closed (ended) only by the subscriber actor.
	out       chan svc.RuntimeEvent
	enc       *eventQueue
	dropped   atomic.Uint64 // events that found out full in the actor
	skipped   atomic.Uint64 // events the fan-out did not offer: out was full
	fanBase   uint64        // the emitter's fan-out drops when this subscription began
	pid       *actor.PID
	stopWatch atomic.Pointer[func() bool] // stops the context.AfterFunc of Subscribe
	once      sync.Once
	stopped   chan struct{} // closed by the actor once it has stopped
	slow      atomic.Bool   // DisconnectSlow has counted it
	// fullSince is when the fan-out first found the queue full, in a run
	// of events that found it full (0: it had room); the fan-out
	// goroutine alone uses it. stalled ends (stall) once that run lasts
	// StallTimeout: a context, so that Stalled is its Done and AfterStall
	// its AfterFunc.
	fullSince int64
	stalled   context.Context
	stall     context.CancelFunc
	// overBytes is set by the actor when it dropped an event of a
	// Subscribe subscription for QueueBytes, with overAt the channel's
	// length then: the queue counts as full until the reader has taken an
	// event from it. (A SubscribeEncoded queue keeps its own.)
	overBytes atomic.Bool
	overAt    atomic.Int64
}

// full reports whether the subscription's queue is full, in events or in
// bytes. It is racy (see fanOut).
func (s *subscription) full() bool {
	if s.enc != nil {
		return s.enc.full()
	}
	n := len(s.out)
	return n == cap(s.out) || s.overBytes.Load() && int64(n) >= s.overAt.Load()
}

// Stalled is closed once the subscriber's queue has stayed full for the
// emitter's StallTimeout while events kept arriving for it: its client
// is not taking the stream, and the HTTP handler cuts it off
// (DisconnectSlow) rather than wait for its write timeout.
func (s *subscription) Stalled() <-chan struct{} { return s.stalled.Done() }

// AfterStall arranges for f to run in its own goroutine once the
// subscription has stalled (as Stalled closes), and returns a stop that
// cancels it, as context.AfterFunc does: stop reports false when f has
// already started. Unlike a goroutine waiting on Stalled, it holds no
// goroutine until then: the HTTP handler of each of thousands of event
// streams would otherwise keep one parked for the stream's life.
func (s *subscription) AfterStall(f func()) (stop func() bool) {
	return context.AfterFunc(s.stalled, f)
}

// Events delivers the matching events in emit order; it is closed once
// the subscription has ended and its actor stopped.
func (s *subscription) Events() <-chan svc.RuntimeEvent { return s.out }

// Dropped is how many matching events this subscriber missed because its
// queues were full.
func (s *subscription) Dropped() uint64 {
	return s.dropped.Load() + s.skipped.Load() + s.mb.Dropped() + s.em.fanDropped.Load() - s.fanBase
}

// Close ends the subscription and returns once its actor has stopped (and
// Events is closed). Events still queued are discarded. It is idempotent
// and safe to call from any goroutine.
func (s *subscription) Close() error {
	s.once.Do(func() {
		if stop := s.stopWatch.Load(); stop != nil {
			(*stop)()
		}
		s.em.remove(s)
		// Stop is a system message: it overtakes the queued events.
		s.em.system.Root.Stop(s.pid)
	})
	<-s.stopped
	return nil
}

// DisconnectSlow ends the subscription because its client cannot keep
// up (the HTTP handler's write deadline expired), and counts it in the
// emitter's SlowDisconnects and svc.sse.slow_disconnects. Only the first
// call of a subscription counts; it returns whether this one did.
func (s *subscription) DisconnectSlow() bool {
	counted := s.slow.CompareAndSwap(false, true)
	if counted {
		s.em.slow.Add(1)
		if s.em.slowCounter != nil {
			s.em.slowCounter.Add(context.Background(), 1)
		}
	}
	_ = s.Close()
	return counted
}

// subscriber is the actor of one subscription. Its Receive never waits:
// an event that finds the subscription's queue full, or its QueueBytes
// spent, is dropped.
type subscriber struct {
	s *subscription
	// For a Subscribe subscription, whose reader takes events from a
	// channel without telling: sizes are the JSON sizes of the events
	// sent to the channel and not known to be taken, oldest first; bytes
	// is their sum. The channel is FIFO and only this actor sends to it,
	// so the events still in it are the last len(channel) sent.
	sizes []int32
	bytes int
}

// admit reports whether an event of size bytes fits a Subscribe
// subscription's QueueBytes, after forgetting the events the reader has
// taken.
func (a *subscriber) admit(size int) bool {
	n := len(a.s.out)
	for len(a.sizes) > n {
		a.bytes -= int(a.sizes[0])
		a.sizes = a.sizes[1:]
	}
	if len(a.sizes) == 0 {
		a.sizes = nil // a drained queue pins no array
	}
	if a.bytes > 0 && a.bytes+size > a.s.em.queueB {
		a.s.overAt.Store(int64(n))
		a.s.overBytes.Store(true)
		return false
	}
	a.s.overBytes.Store(false)
	return true
}

func (a *subscriber) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *svc.EncodedEvent:
		// Encoded once, by the first subscriber that asks, for all: the
		// HTTP handler writes this very encoding.
		data, _ := m.JSON()
		size := len(data)
		if a.s.enc != nil {
			if !a.s.enc.push(m, size) {
				a.s.dropped.Add(1)
			}
			return
		}
		if !a.admit(size) {
			a.s.dropped.Add(1)
			return
		}
		sent := false
		select {
		case a.s.out <- m.Event:
			sent = true
		default:
		}
		if !sent {
			a.s.dropped.Add(1)
			return
		}
		a.sizes = append(a.sizes, int32(size))
		a.bytes += size
	case *actor.Stopped:
		// The last message the actor gets: nothing writes to out (enc)
		// after it.
		if a.s.enc != nil {
			a.s.enc.end()
		} else {
			close(a.s.out)
		}
		a.s.em.live.Add(-1)
		close(a.s.stopped)
	}
}

// encodedSubscription is a subscription of SubscribeEncoded
// (svc.EncodedEventSubscription); it has no Events, which would be nil.
type encodedSubscription struct {
	s *subscription
}

// Next takes the oldest matching event waiting, shared with the other
// subscribers; ended is true once the subscription has ended, its actor
// stopped and no event waits.
func (es encodedSubscription) Next() (ev *svc.EncodedEvent, ended bool) { return es.s.enc.next() }

// Notify sets the reader's wake-up (svc.EncodedEventSubscription): f is
// called by the subscriber's actor, as an event arrives at an empty queue
// and when the subscription ends.
func (es encodedSubscription) Notify(f func()) { es.s.enc.setNotify(f) }

// Dropped is subscription.Dropped.
func (es encodedSubscription) Dropped() uint64 { return es.s.Dropped() }

// Close is subscription.Close.
func (es encodedSubscription) Close() error { return es.s.Close() }

// Stalled is subscription.Stalled.
func (es encodedSubscription) Stalled() <-chan struct{} { return es.s.Stalled() }

// AfterStall is subscription.AfterStall.
func (es encodedSubscription) AfterStall(f func()) (stop func() bool) { return es.s.AfterStall(f) }

// DisconnectSlow is subscription.DisconnectSlow.
func (es encodedSubscription) DisconnectSlow() bool { return es.s.DisconnectSlow() }
