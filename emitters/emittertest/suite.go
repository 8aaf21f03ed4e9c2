// Package emittertest is the contract suite every svc.Emitter passes, in the
// style of testing/fstest, plus a Recorder emitter and payload checks for
// the tests of packages that emit events.
package emittertest

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

// Limits of the contract. The deadlines are generous on purpose: they catch
// an emitter that blocks (waits on a consumer, a lock or the network), not
// one that is merely slow on a loaded machine under the race detector.
const (
	// EmitTimeout bounds a single Emit call.
	EmitTimeout = 5 * time.Second
	// BurstSize is how many events the Burst subtest emits back to back.
	BurstSize = 10_000
	// BurstTimeout bounds the whole burst.
	BurstTimeout = 60 * time.Second
	// ConcurrentGoroutines × ConcurrentEmits events are emitted at once by
	// the Concurrent subtest, within BurstTimeout.
	ConcurrentGoroutines = 3
	ConcurrentEmits      = 1_000
)

// Run checks that emitters built by newEmitter honour the svc.Emitter
// contract: Emit returns promptly, never panics, does not block under a
// burst, accepts every event type and is safe for concurrent use. Each
// subtest builds its own emitter; newEmitter may register cleanups on the
// t it is given. Emit is always called from a goroutine guarded by a
// deadline, so an emitter that blocks fails the test instead of hanging it.
func Run(t *testing.T, newEmitter func(t *testing.T) svc.Emitter) {
	t.Helper()

	t.Run("EmitReturns", func(t *testing.T) {
		e := newEmitter(t)
		for _, typ := range []svc.EventType{svc.EventAgentCompleted, svc.EventAgentFailed} {
			ev := SampleEvent(typ)
			if err := drive(EmitTimeout, 1, func(int) { e.Emit(ev) }); err != nil {
				t.Fatalf("Emit(%s): %v", typ, err)
			}
		}
	})

	t.Run("NeverPanics", func(t *testing.T) {
		e := newEmitter(t)
		for _, c := range oddEvents() {
			if err := drive(EmitTimeout, 1, func(int) { e.Emit(c.ev) }); err != nil {
				t.Errorf("Emit(%s): %v", c.name, err)
			}
		}
	})

	t.Run("Burst", func(t *testing.T) {
		e := newEmitter(t)
		evs := make([]svc.RuntimeEvent, len(svc.EventTypes))
		for i, typ := range svc.EventTypes {
			evs[i] = SampleEvent(typ)
		}
		err := drive(BurstTimeout, 1, func(int) {
			for i := range BurstSize {
				e.Emit(evs[i%len(evs)])
			}
		})
		if err != nil {
			t.Fatalf("%d Emit calls: %v", BurstSize, err)
		}
	})

	t.Run("EveryEventType", func(t *testing.T) {
		if len(svc.EventTypes) != 19 {
			t.Fatalf("svc.EventTypes has %d types, the contract covers 19", len(svc.EventTypes))
		}
		e := newEmitter(t)
		for _, typ := range svc.EventTypes {
			ev := SampleEvent(typ)
			before := maps.Clone(ev.Payload)
			if err := drive(EmitTimeout, 1, func(int) { e.Emit(ev) }); err != nil {
				t.Errorf("Emit(%s): %v", typ, err)
				continue
			}
			// Events are shared between emitters (see svc.RuntimeEvent), so
			// an emitter that edits one corrupts what the others see.
			if !reflect.DeepEqual(before, ev.Payload) {
				t.Errorf("Emit(%s) modified the payload: before %v, after %v", typ, before, ev.Payload)
			}
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		e := newEmitter(t)
		err := drive(BurstTimeout, ConcurrentGoroutines, func(g int) {
			for i := range ConcurrentEmits {
				typ := svc.EventTypes[(g+i)%len(svc.EventTypes)]
				e.Emit(SampleEvent(typ))
			}
		})
		if err != nil {
			t.Fatalf("%d goroutines × %d Emit calls: %v", ConcurrentGoroutines, ConcurrentEmits, err)
		}
	})
}

// drive runs f(0) … f(goroutines-1), each in its own goroutine, and waits
// for all of them at most timeout. It reports a panic in any of them, or
// the timeout, as an error. On timeout the goroutines are abandoned: the
// test fails anyway, and there is no way to stop a blocked Emit.
func drive(timeout time.Duration, goroutines int, f func(g int)) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		panicErr error
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					if panicErr == nil {
						panicErr = fmt.Errorf("panicked: %v\n%s", r, debug.Stack())
					}
					mu.Unlock()
				}
			}()
			f(g)
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
		mu.Lock()
		defer mu.Unlock()
		return panicErr
	case <-timer.C:
		return fmt.Errorf("did not return within %v", timeout)
	}
}

type oddEvent struct {
	name string
	ev   svc.RuntimeEvent
}

// oddEvents are events a careless caller could emit. None of them may make
// an emitter panic or block; an emitter that cannot encode one drops it.
func oddEvents() []oddEvent {
	nilPayload := SampleEvent(svc.EventAgentSpawned)
	nilPayload.Payload = nil

	emptyPayload := SampleEvent(svc.EventAgentSpawned)
	emptyPayload.Payload = svc.Payload{}

	unknown := SampleEvent(svc.EventAgentSpawned)
	unknown.EventType = "no_such_event"

	manyKeys := SampleEvent(svc.EventBatchCompleted)
	manyKeys.Payload = svc.Payload{}
	for i := range 10_000 {
		manyKeys.Payload[fmt.Sprintf("key_%05d", i)] = i
	}

	bigValue := SampleEvent(svc.EventAgentFailed)
	bigValue.Payload = maps.Clone(bigValue.Payload)
	bigValue.Payload["error"] = strings.Repeat("x", 1<<20)

	weird := SampleEvent(svc.EventToolCallCompleted)
	weird.Payload = svc.Payload{
		"nil":      nil,
		"nested":   map[string]any{"a": []any{1, "two", map[string]any{"three": 3.0}}},
		"nan":      math.NaN(),
		"inf":      math.Inf(-1),
		"func":     func() {},
		"chan":     make(chan int),
		"bytes":    []byte{0xff, 0xfe},
		"utf8":     "\xff\xfe not utf-8",
		"agent":    "a payload key named like a field",
		"":         "empty key",
		"time":     time.Time{},
		"duration": time.Second,
	}

	extremes := SampleEvent(svc.EventWorkerHeartbeat)
	extremes.Timestamp = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	extremes.AgentName = strings.Repeat("a", 4096)
	extremes.TaskID = "\n\r\t\"'<>&"
	extremes.ParentTraceID = "parent"

	return []oddEvent{
		{"zero value", svc.RuntimeEvent{}},
		{"nil payload", nilPayload},
		{"empty payload", emptyPayload},
		{"unknown event type", unknown},
		{"10,000 payload keys", manyKeys},
		{"1 MiB payload value", bigValue},
		{"unencodable payload values", weird},
		{"extreme fields", extremes},
	}
}

// SampleEvent returns a well-formed event of type t: the payload has exactly
// the keys of svc.PayloadKeys[t], with values of the types the runtime puts
// there. Every call returns a fresh payload map.
func SampleEvent(t svc.EventType) svc.RuntimeEvent {
	ev := svc.RuntimeEvent{
		EventType: t,
		Timestamp: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC),
		AgentName: "triage",
		TaskID:    "0193a3b4-0000-7000-8000-000000000001",
		TraceID:   "0193a3b4-0000-7000-8000-0000000000aa",
		Payload:   svc.Payload{},
	}
	switch t {
	case svc.EventWorkerStarted, svc.EventWorkerStopped, svc.EventWorkerHeartbeat:
		// Worker lifecycle events are named after the runtime, not an agent.
		ev.AgentName, ev.TaskID, ev.TraceID = "rt-1", "", "rt-1"
	case svc.EventBatchStarted, svc.EventBatchCompleted, svc.EventGroupStarted, svc.EventGroupCompleted,
		svc.EventBudgetExceeded:
		ev.TaskID = ""
	}
	for _, k := range svc.PayloadKeys[t] {
		ev.Payload[k] = sampleValue(k)
	}
	if t == svc.EventRateLimited {
		ev.Payload["reason"] = "paced"
	}
	return ev
}

func sampleValue(key string) any {
	switch key {
	case "backend":
		return svc.BackendLocal
	case "broker", "broker_scheme":
		return "nats"
	case "trust_level":
		return string(svc.TrustMedium)
	case "duration_ms":
		return 12.5
	case "cost_usd":
		return 0.0042
	case "tokens_used", "limit", "used":
		return int64(128)
	case "model":
		return "test:echo"
	case "error":
		return "ModelError: provider unavailable"
	case "tool_name":
		return "current_time"
	case "scope":
		return "run"
	case "depth", "task_count", "max_concurrency", "success_count", "failure_count", "node_count",
		"concurrency", "prefetch", "in_flight", "concurrency_cap":
		return 4
	case "group_name":
		return "support"
	case "runtime_id":
		return "rt-1"
	case "consumer_id":
		return "rt-1-consumer"
	case "agents", "agent_subscriptions":
		return []string{"billing", "triage"}
	case "heartbeat_seconds":
		return 15.0
	case "rate_limit":
		return "openai_main"
	case "wait_ms":
		return int64(1250)
	case "run_id":
		return "0193a3b4-0000-7000-8000-0000000000ff"
	case "steps_replayed", "resumed":
		return int64(3)
	case "node":
		return "api-1"
	case "request_id":
		return "req_5f0c2a9e1b7d4c3a"
	case "wait_kind":
		return string(svc.WaitApproval)
	}
	return "sample"
}
