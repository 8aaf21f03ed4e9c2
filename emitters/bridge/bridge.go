// Package bridge is the spec's BrokerEventBridge: the emitter a worker puts
// in its runtime's chain to relay the RuntimeEvents of a task to the
// publisher that sent it, on that publisher's svc.events.{runtime_id}
// (fleetwire.EventSubject), when the publisher runs with --publish-events.
//
// An emitter's Emit has no context, so the bridge cannot ask an event which
// task it belongs to. It goes by spans instead: the worker binds the span of
// the dispatching invocation (the task envelope's span_id, which the task's
// own events name as their parent_span_id) to the publisher's subject for as
// long as the task runs. An event whose parent_span_id (or span_id) is bound
// goes to that subject, and its own span_id is bound to it too, so the events
// of everything the task starts below itself (tool calls, batches, spawned
// children, team delegates) follow. Every other event, and every event while
// nothing is bound, is ignored: the bridge is safe to install always.
//
// Deltas take their own way. A task whose publisher listens for its
// streamed answer (the envelope's deltas flag) gets a delta relay (RelayDeltas), the
// DeltaSink the worker puts in the task's context: it queues each delta as
// an agent_delta event tagged with the task's dispatch (the payload's
// DeltaDispatch) for the publisher that holds the listener,
// whether or not that publisher asked for the task's events, and the
// agent_delta events of the task's spans no longer go out through Emit
// (they would reach the publisher twice). Deltas are the first thing to
// go: one is dropped (and counted) when the queue is half full, so a fast
// stream never crowds out the events behind it.
//
// Emit never blocks: events wait in a bounded queue for one goroutine that
// broadcasts them in batches (a JSON array per message, in emit order);
// what does not fit, and a batch the broker refuses, is dropped and counted.
package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/dropqueue"
)

// DeltaDispatch is the payload key of an agent_delta a delta relay relays:
// the task's dispatch (fleetwire.DispatchKey), by which the publisher
// routes the delta to the run that listens. The publisher removes it
// before the event goes on to its emitters.
const DeltaDispatch = "dispatch"

// Defaults of Config.
const (
	DefaultQueueSize = 8192
	DefaultBatch     = 256
	// maxMessageBytes bounds one broadcast; a larger batch is split. Well
	// under NATS's default 1 MiB max_payload.
	maxMessageBytes = 512 << 10
	// broadcastTimeout bounds one broadcast, so a broker that hangs costs
	// dropped events, not a stuck queue.
	broadcastTimeout = 5 * time.Second
)

// Config configures a Bridge. The zero value takes the defaults.
type Config struct {
	// QueueSize is how many events may wait to be broadcast before new ones
	// are dropped; DefaultQueueSize when 0.
	QueueSize int
	// Batch is the most events in one broadcast message; DefaultBatch when
	// 0.
	Batch int
	// Logger logs refused broadcasts; silent when nil.
	Logger *zap.Logger
}

// Bridge relays bound events to a broker. Create it with New; stop it with
// Close. It is safe for concurrent use.
type Bridge struct {
	broker svc.Broker
	log    *zap.Logger
	q      *dropqueue.Queue[item]

	mu    sync.Mutex
	spans map[string]*binding
	// relayed counts, by bound root span, the DeltaRelays open for the
	// task: Emit leaves that task's agent_delta events to them.
	relayed map[string]int

	published     atomic.Int64
	failed        atomic.Int64
	deltasDropped atomic.Int64 // every delta not queued
	deltasShed    atomic.Int64 // those not offered to the queue (half full)
	queueSize     int
}

// binding is one bound task: its subject, how many Binds hold it, and the
// spans learned under it (released with it).
type binding struct {
	subject string
	root    string
	refs    int
	learned []string
}

type item struct {
	subject string
	ev      svc.RuntimeEvent
}

var _ svc.Emitter = (*Bridge)(nil)

// New starts the bridge's goroutine, which broadcasts on b. The broker
// stays the caller's: Close the bridge before closing it.
func New(b svc.Broker, cfg Config) *Bridge {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	br := &Bridge{broker: b, log: cfg.Logger, spans: map[string]*binding{}, relayed: map[string]int{}, queueSize: cfg.QueueSize}
	if br.log == nil {
		br.log = zap.NewNop()
	}
	br.q = dropqueue.New(dropqueue.Config{Size: cfg.QueueSize, Batch: cfg.Batch}, br.send)
	return br
}

// Bind relays the events under span (those naming it as their parent span,
// and, transitively, those under theirs) to subject until the returned
// unbind is called. Binding an empty span or subject binds nothing. The same
// span may be bound more than once (a task redelivered to the worker that
// still runs it): it stays bound until every unbind is called. unbind is
// idempotent.
func (b *Bridge) Bind(span, subject string) (unbind func()) {
	if span == "" || subject == "" {
		return func() {}
	}
	b.mu.Lock()
	bd, ok := b.spans[span]
	if !ok || bd.root != span {
		bd = &binding{subject: subject, root: span}
		b.spans[span] = bd
	}
	bd.refs++
	b.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { b.release(bd) }) }
}

func (b *Bridge) release(bd *binding) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bd.refs--; bd.refs > 0 {
		return
	}
	for _, s := range bd.learned {
		if b.spans[s] == bd {
			delete(b.spans, s)
		}
	}
	if b.spans[bd.root] == bd {
		delete(b.spans, bd.root)
	}
}

// Bound is the number of spans bound now, learned ones included: 0 once
// every task has unbound.
func (b *Bridge) Bound() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.spans)
}

// Emit queues ev for its task's publisher when its span is bound, and does
// nothing otherwise. It never blocks.
func (b *Bridge) Emit(ev svc.RuntimeEvent) {
	if ev.ParentSpanID == "" && ev.SpanID == "" {
		return // run-less events (worker lifecycle): never a task's
	}
	b.mu.Lock()
	bd := b.spans[ev.ParentSpanID]
	if bd == nil && ev.SpanID != "" {
		bd = b.spans[ev.SpanID]
	}
	var subject string
	if bd != nil && (ev.EventType != svc.EventAgentDelta || b.relayed[bd.root] == 0) {
		subject = bd.subject
	}
	if bd != nil {
		if ev.SpanID != "" {
			if _, known := b.spans[ev.SpanID]; !known {
				b.spans[ev.SpanID] = bd
				bd.learned = append(bd.learned, ev.SpanID)
			}
		}
	}
	b.mu.Unlock()
	if subject != "" {
		b.q.Put(item{subject: subject, ev: ev})
	}
}

// deltaRelay is the DeltaSink of one task whose publisher listens for its
// deltas: it queues them for the publisher (see the package doc).
type deltaRelay struct {
	b        *Bridge
	subject  string
	dispatch string
	sent     atomic.Int64
}

// RelayDeltas returns the DeltaSink of the task whose dispatching span is
// root (the envelope's span_id), relaying to subject (the envelope's
// DeltasTo) with every delta tagged dispatch (fleetwire.DispatchKey of
// the envelope); sent, the number of deltas it queued, which the task's
// result tells the publisher to wait for; and done, which ends it once the
// task ran. done is idempotent. While it is open, Emit relays none of the
// task's agent_delta events: the sink does.
func (b *Bridge) RelayDeltas(root, subject, dispatch string) (sink svc.DeltaSink, sent func() int64, done func()) {
	b.mu.Lock()
	b.relayed[root]++
	b.mu.Unlock()
	var once sync.Once
	r := &deltaRelay{b: b, subject: subject, dispatch: dispatch}
	return r, r.sent.Load, func() {
		once.Do(func() {
			b.mu.Lock()
			if b.relayed[root]--; b.relayed[root] <= 0 {
				delete(b.relayed, root)
			}
			b.mu.Unlock()
		})
	}
}

// Listening is true: the publisher asked for the deltas when it
// dispatched the task.
func (r *deltaRelay) Listening() bool { return true }

// Delta queues d for the publisher, unless the queue is half full: then
// it is dropped and counted. It never blocks.
func (r *deltaRelay) Delta(d svc.Delta) {
	b := r.b
	if b.q.Len() >= b.queueSize/2 {
		b.deltasShed.Add(1)
		b.deltasDropped.Add(1)
		return
	}
	ev := svc.RuntimeEvent{EventType: svc.EventAgentDelta, Timestamp: time.Now().UTC(), AgentName: d.Agent,
		TaskID: d.TaskID, TraceID: d.TraceID, ParentTraceID: d.ParentTraceID, SpanID: d.SpanID, ParentSpanID: d.ParentSpanID,
		Payload: svc.Payload{"text": d.Text, "index": d.Index, DeltaDispatch: r.dispatch}}
	if !b.q.Put(item{subject: r.subject, ev: ev}) {
		b.deltasDropped.Add(1)
		return
	}
	r.sent.Add(1)
}

// Published is the number of events handed to the broker.
func (b *Bridge) Published() int64 { return b.published.Load() }

// Dropped is the number of bound events lost, deltas included: the queue
// was full or closed (half full, for a delta), or the broker refused their
// broadcast.
func (b *Bridge) Dropped() int64 { return b.q.Dropped() + b.failed.Load() + b.deltasShed.Load() }

// DeltasDropped is the number of deltas the delta relays did not queue: the
// queue was half full, full or closed.
func (b *Bridge) DeltasDropped() int64 { return b.deltasDropped.Load() }

// Close broadcasts what is queued, within ctx, and stops the goroutine;
// later events are dropped. When ctx ends first, what is left is dropped
// and ctx's error returned. Idempotent.
func (b *Bridge) Close(ctx context.Context) error { return b.q.Close(ctx) }

// send broadcasts one batch from the queue: its events grouped by subject,
// each group in emit order.
func (b *Bridge) send(batch []item) {
	var order []string
	groups := map[string][]svc.RuntimeEvent{}
	for _, it := range batch {
		if _, ok := groups[it.subject]; !ok {
			order = append(order, it.subject)
		}
		groups[it.subject] = append(groups[it.subject], it.ev)
	}
	for _, subject := range order {
		b.broadcast(subject, groups[subject])
	}
}

func (b *Bridge) broadcast(subject string, evs []svc.RuntimeEvent) {
	data, err := Encode(evs)
	if err != nil {
		b.failed.Add(int64(len(evs)))
		b.log.Warn("events not relayed: encoding", zap.String("subject", subject), zap.Error(err))
		return
	}
	if len(data) > maxMessageBytes && len(evs) > 1 {
		b.broadcast(subject, evs[:len(evs)/2])
		b.broadcast(subject, evs[len(evs)/2:])
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), broadcastTimeout)
	defer cancel()
	if err := b.broker.Broadcast(ctx, subject, data); err != nil {
		b.failed.Add(int64(len(evs)))
		b.log.Warn("events not relayed", zap.String("subject", subject), zap.Int("events", len(evs)), zap.Error(err))
		return
	}
	b.published.Add(int64(len(evs)))
}

// Encode is the wire form of relayed events: a JSON array of RuntimeEvents.
func Encode(evs []svc.RuntimeEvent) ([]byte, error) { return json.Marshal(evs) }

// Decode reads a message of relayed events (Encode's form).
func Decode(data []byte) ([]svc.RuntimeEvent, error) {
	var evs []svc.RuntimeEvent
	if err := json.Unmarshal(data, &evs); err != nil {
		return nil, fmt.Errorf("relayed events: %w", err)
	}
	for i, ev := range evs {
		if ev.EventType == "" {
			return nil, fmt.Errorf("relayed events: [%d] has no event_type", i)
		}
	}
	if len(evs) == 0 {
		return nil, errors.New("relayed events: empty message")
	}
	return evs, nil
}
