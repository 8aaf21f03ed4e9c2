package agent

import (
	"sync"
	"time"

	"github.com/svc-dev/svc"
)

// Values of Compiled.stream.
const (
	streamAuto int8 = iota
	streamOn
	streamOff
)

// Coalesce is how an invocation's streamed fragments are gathered into
// deltas: handed on at most once per Interval, or as soon as Bytes wait.
// The first fragment, and one after a pause longer than Interval, is
// handed on at once, so coalescing adds nothing to the time to the first
// delta. The zero Coalesce hands every fragment on as it comes.
type Coalesce struct {
	Interval time.Duration
	Bytes    int
}

// CoalesceOf is the Coalesce of the runtime options.
func CoalesceOf(o svc.Options) Coalesce {
	return Coalesce{Interval: time.Duration(o.DeltaIntervalMS) * time.Millisecond, Bytes: o.DeltaBytes}
}

// WithDeltaSink returns em carrying sink: an invocation whose Emitter it
// is hands its deltas to sink as well as to em, and streams when sink
// listens unless its agent says otherwise. The runtime gives its
// invocations such an emitter for a run whose scope has a DeltaSink
// (svc.WithDeltas). The sink rides on the emitter rather than being looked
// up in the context at each model call: a lookup that finds nothing walks
// the whole chain, and a WithoutCancel context on it costs an allocation.
func WithDeltaSink(em svc.Emitter, sink svc.DeltaSink) svc.Emitter {
	if em == nil {
		em = svc.NopEmitter{}
	}
	return &sinkEmitter{Emitter: em, sink: sink}
}

type sinkEmitter struct {
	svc.Emitter
	sink svc.DeltaSink
}

// DeltaSinkOf returns the DeltaSink em carries (WithDeltaSink), or nil: a
// runtime that sends an invocation to a fleet asks for its deltas when
// its emitter carries one that listens.
func DeltaSinkOf(em svc.Emitter) svc.DeltaSink { return sinkOf(em) }

// sinkOf returns the DeltaSink em carries, or nil.
func sinkOf(em svc.Emitter) svc.DeltaSink {
	if se, ok := em.(*sinkEmitter); ok {
		return se.sink
	}
	return nil
}

// streams reports whether the model calls of inv ask for a stream: its
// agent says so, or it does not say and the DeltaSink its emitter carries
// listens now.
func streams(inv *Invocation) bool {
	switch inv.Agent.stream {
	case streamOn:
		return true
	case streamOff:
		return false
	}
	sink := sinkOf(inv.Emitter)
	return sink != nil && sink.Listening()
}

// newDeltaBuf returns the deltaBuf of inv, handing its deltas to inv's
// emitter and to the DeltaSink it carries.
//
//go:noinline
func newDeltaBuf(inv *Invocation, co Coalesce) *deltaBuf {
	d := &deltaBuf{inv: inv, em: inv.Emitter, co: co, sink: sinkOf(inv.Emitter)}
	if d.em == nil {
		d.em = svc.NopEmitter{}
	}
	d.add, d.finish = d.fragment, d.end
	return d
}

// deltaBuf coalesces the fragments of one invocation's streamed answers.
// The model's goroutine adds fragments; a timer flushes what waits once
// the interval has passed. The mutex makes the two take turns, so the
// listener gets one delta at a time, in order.
type deltaBuf struct {
	inv  *Invocation
	em   svc.Emitter
	co   Coalesce
	sink svc.DeltaSink // nil: only the emitter gets the deltas
	// add and finish are fragment and end, made once: add goes into each
	// streamed request.
	add    func(string)
	finish func(failed bool)

	mu    sync.Mutex
	buf   []byte
	index int
	last  time.Time   // when the last delta was handed on
	timer *time.Timer // pending flush, nil when none
	// restart is set by a failed call: the next delta is index 0.
	restart bool
}

// fragment takes one fragment from the model.
func (d *deltaBuf) fragment(text string) {
	if text == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.buf = append(d.buf, text...)
	now := time.Now()
	switch {
	case d.co.Bytes > 0 && len(d.buf) >= d.co.Bytes, now.Sub(d.last) >= d.co.Interval:
		d.flushLocked(now)
	case d.timer == nil:
		d.timer = time.AfterFunc(d.co.Interval-now.Sub(d.last), d.tick)
	}
}

// tick is the timer's flush.
func (d *deltaBuf) tick() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timer = nil
	d.flushLocked(time.Now())
}

// end hands on what waits when a model call ends; failed marks the call
// failed, so that the next call's text starts a new answer.
func (d *deltaBuf) end(failed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flushLocked(time.Now()) // stops the pending timer too
	if failed {
		d.restart = true
	}
}

func (d *deltaBuf) flushLocked(now time.Time) {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if len(d.buf) == 0 {
		return
	}
	if d.restart {
		d.index, d.restart = 0, false
	}
	text := string(d.buf)
	d.buf = d.buf[:0]
	d.last = now
	inv := d.inv
	i := d.index
	d.index++
	d.em.Emit(svc.RuntimeEvent{EventType: svc.EventAgentDelta, Timestamp: now.UTC(), AgentName: inv.Agent.Def.Name,
		TaskID: inv.TaskID, TraceID: inv.TraceID, ParentTraceID: inv.ParentTraceID,
		SpanID: inv.SpanID, ParentSpanID: inv.ParentSpanID,
		Payload: svc.Payload{"text": text, "index": i}})
	if d.sink != nil {
		d.sink.Delta(svc.Delta{Agent: inv.Agent.Def.Name, TaskID: inv.TaskID, TraceID: inv.TraceID, SpanID: inv.SpanID,
			ParentTraceID: inv.ParentTraceID, ParentSpanID: inv.ParentSpanID, Index: i, Text: text})
	}
}
