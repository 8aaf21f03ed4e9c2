package emitters_test

import (
	"slices"
	"testing"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/emittertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func observed(t *testing.T, level zapcore.Level) (svc.Emitter, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(level)
	return emitters.NewLog(zap.New(core)), logs
}

func TestLogContract(t *testing.T) {
	emittertest.Run(t, func(t *testing.T) svc.Emitter {
		e, _ := observed(t, zapcore.DebugLevel)
		return e
	})
}

func TestLogContractNilLogger(t *testing.T) {
	emittertest.Run(t, func(*testing.T) svc.Emitter { return emitters.NewLog(nil) })
}

// A real encoder on a discarding sink: the payload values are encoded, so
// odd values (NaN, funcs, channels) go through zap's reflection path.
func TestLogContractJSONEncoder(t *testing.T) {
	emittertest.Run(t, func(*testing.T) svc.Emitter {
		enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
		core := zapcore.NewCore(enc, zapcore.AddSync(discard{}), zapcore.DebugLevel)
		return emitters.NewLog(zap.New(core))
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestLogLevelsAndFields(t *testing.T) {
	e, logs := observed(t, zapcore.DebugLevel)
	for _, typ := range svc.EventTypes {
		ev := emittertest.SampleEvent(typ)
		e.Emit(ev)

		entries := logs.TakeAll()
		if len(entries) != 1 {
			t.Fatalf("%s: %d log entries, want 1", typ, len(entries))
		}
		got := entries[0]
		wantLevel := zapcore.InfoLevel
		if typ.IsFailure() {
			wantLevel = zapcore.ErrorLevel
		}
		if got.Level != wantLevel {
			t.Errorf("%s logged at %v, want %v", typ, got.Level, wantLevel)
		}
		if got.Message != string(typ) {
			t.Errorf("%s logged with message %q", typ, got.Message)
		}

		var keys []string
		for _, f := range got.Context {
			keys = append(keys, f.Key)
		}
		payloadKeys := slices.Clone(svc.PayloadKeys[typ])
		slices.Sort(payloadKeys)
		want := append([]string{"agent", "task_id", "trace_id"}, payloadKeys...)
		if !slices.Equal(keys, want) {
			t.Errorf("%s fields = %v, want %v", typ, keys, want)
		}
		ctx := got.ContextMap()
		if ctx["agent"] != ev.AgentName || ctx["task_id"] != ev.TaskID || ctx["trace_id"] != ev.TraceID {
			t.Errorf("%s identity fields = %v, event %+v", typ, ctx, ev)
		}
		for k, v := range ev.Payload {
			if _, ok := ctx[k]; !ok {
				t.Errorf("%s: payload key %s (%v) not logged", typ, k, v)
			}
		}
	}
}

func TestLogFailureLevelsExactly(t *testing.T) {
	failures := []svc.EventType{svc.EventAgentFailed, svc.EventToolCallFailed, svc.EventBudgetExceeded, svc.EventDepthLimitExceeded}
	// An observer that keeps only error level sees exactly the failures.
	e, logs := observed(t, zapcore.ErrorLevel)
	for _, typ := range svc.EventTypes {
		e.Emit(emittertest.SampleEvent(typ))
	}
	var got []svc.EventType
	for _, entry := range logs.All() {
		got = append(got, svc.EventType(entry.Message))
	}
	if !slices.Equal(got, failures) {
		t.Fatalf("error-level entries = %v, want %v", got, failures)
	}
}

func TestLogParentTraceAndCollisions(t *testing.T) {
	e, logs := observed(t, zapcore.DebugLevel)

	ev := emittertest.SampleEvent(svc.EventAgentSpawned)
	ev.ParentTraceID = "parent-trace"
	ev.Payload["agent"] = "from payload"
	e.Emit(ev)
	ctx := logs.TakeAll()[0].ContextMap()
	if ctx["parent_trace_id"] != "parent-trace" {
		t.Errorf("parent_trace_id = %v, want parent-trace", ctx["parent_trace_id"])
	}
	if ctx["agent"] != ev.AgentName || ctx["payload.agent"] != "from payload" {
		t.Errorf("a payload key named agent overwrote the field: %v", ctx)
	}

	e.Emit(svc.RuntimeEvent{})
	entry := logs.TakeAll()[0]
	if _, ok := entry.ContextMap()["parent_trace_id"]; ok {
		t.Error("parent_trace_id logged for an event without one")
	}
	if entry.Message == "" {
		t.Error("an event without a type logged an empty message")
	}
}

// panicCore panics on every write, like a broken sink.
type panicCore struct{ zapcore.Core }

func (c panicCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, c)
}
func (panicCore) Write(zapcore.Entry, []zapcore.Field) error { panic("sink exploded") }
func (panicCore) Enabled(zapcore.Level) bool                 { return true }
func (c panicCore) With([]zapcore.Field) zapcore.Core        { return c }
func (panicCore) Sync() error                                { return nil }

func TestLogContainsPanickingCore(t *testing.T) {
	emittertest.Run(t, func(*testing.T) svc.Emitter {
		return emitters.NewLog(zap.New(panicCore{}))
	})
}

func TestMultiContract(t *testing.T) {
	emittertest.Run(t, func(t *testing.T) svc.Emitter {
		log, _ := observed(t, zapcore.DebugLevel)
		return emitters.Multi(&emittertest.Recorder{}, panicking(), log, nil)
	})
}

func TestMultiEmptyContract(t *testing.T) {
	emittertest.Run(t, func(*testing.T) svc.Emitter { return emitters.Multi() })
}

func panicking() svc.Emitter {
	return svc.EmitterFunc(func(svc.RuntimeEvent) { panic("sibling bug") })
}

func TestMultiPanickingSiblingDoesNotStopOthers(t *testing.T) {
	var before, after emittertest.Recorder
	m := emitters.Multi(&before, panicking(), &after)
	for _, typ := range svc.EventTypes {
		m.Emit(emittertest.SampleEvent(typ))
	}
	for name, r := range map[string]*emittertest.Recorder{"before": &before, "after": &after} {
		if got := len(r.Events()); got != len(svc.EventTypes) {
			t.Errorf("emitter %s the panicking one got %d events, want %d", name, got, len(svc.EventTypes))
		}
	}
}

func TestMultiOrderNilAndNesting(t *testing.T) {
	var order []string
	named := func(name string) svc.Emitter {
		return svc.EmitterFunc(func(svc.RuntimeEvent) { order = append(order, name) })
	}
	m := emitters.Multi(
		nil,
		named("a"),
		emitters.Multi(named("b"), nil, emitters.Multi(named("c")), panicking()),
		emitters.Multi(),
		named("d"),
	)
	m.Emit(emittertest.SampleEvent(svc.EventAgentSpawned))
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(order, want) {
		t.Fatalf("emitters called in order %v, want %v", order, want)
	}
}

func TestMultiSharesTheEvent(t *testing.T) {
	var r1, r2 emittertest.Recorder
	ev := emittertest.SampleEvent(svc.EventAgentCompleted)
	emitters.Multi(&r1, &r2).Emit(ev)
	for _, r := range []*emittertest.Recorder{&r1, &r2} {
		got := r.Events()
		if len(got) != 1 || got[0].EventType != ev.EventType || got[0].TraceID != ev.TraceID {
			t.Fatalf("recorded %v, want the emitted event", got)
		}
		emittertest.CheckPayload(t, got[0])
	}
}

// A recovered panic is counted and logged at the global logger with what
// panicked, not swallowed silently; a global logger that panics too is
// counted, and still does not escape Emit.
func TestRecoveredPanicsCountedAndLogged(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	undo := zap.ReplaceGlobals(zap.New(core))
	defer undo()
	before := emitters.RecoveredPanics()
	emitters.Multi(panicking()).Emit(emittertest.SampleEvent(svc.EventAgentCompleted))
	emitters.NewLog(zap.New(panicCore{})).Emit(emittertest.SampleEvent(svc.EventAgentCompleted))
	if n := emitters.RecoveredPanics() - before; n != 2 {
		t.Errorf("RecoveredPanics went up by %d, want 2", n)
	}
	got := map[string]any{}
	for _, e := range logs.FilterMessageSnippet("emitter panicked").All() {
		got[e.ContextMap()["emitter"].(string)] = e.ContextMap()["panic"]
	}
	if got["multi"] != "sibling bug" || got["log"] != "sink exploded" {
		t.Errorf("logged panics = %v, want multi's and log's", got)
	}

	zap.ReplaceGlobals(zap.New(panicCore{}))
	before = emitters.RecoveredPanics()
	emitters.Multi(panicking()).Emit(emittertest.SampleEvent(svc.EventAgentCompleted))
	if n := emitters.RecoveredPanics() - before; n != 2 {
		t.Errorf("with a panicking global logger RecoveredPanics went up by %d, want 2", n)
	}
}
