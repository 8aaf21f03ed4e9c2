package emitters_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/emitters/emittertest"
)

// Instrument types as the tests name them, derived from the collected
// aggregation (a monotonic int64 sum is what an Int64Counter produces).
const (
	int64Counter     = "Int64Counter"
	int64Histogram   = "Int64Histogram"
	float64Histogram = "Float64Histogram"
)

// point is one collected data point: its attributes, and its value (a
// counter's sum, a histogram's sum) and count (1 for counters).
type point struct {
	attrs map[string]string
	sum   float64
	count uint64
}

// collected is one instrument as read back from the SDK.
type collected struct {
	typ, unit string
	points    []point
}

func newOTel(t *testing.T) (svc.Emitter, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	e, err := emitters.NewOTel(mp)
	if err != nil {
		t.Fatalf("NewOTel: %v", err)
	}
	return e, reader
}

// collect reads every instrument of the emitter's scope that has data.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]collected{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != emitters.OTelMeterName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, emitters.OTelMeterName)
		}
		for _, m := range sm.Metrics {
			c := collected{unit: m.Unit}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				c.typ = "non-monotonic Int64 sum"
				if d.IsMonotonic {
					c.typ = int64Counter
				}
				for _, dp := range d.DataPoints {
					c.points = append(c.points, point{attrMap(dp.Attributes), float64(dp.Value), 1})
				}
			case metricdata.Histogram[int64]:
				c.typ = int64Histogram
				for _, dp := range d.DataPoints {
					c.points = append(c.points, point{attrMap(dp.Attributes), float64(dp.Sum), dp.Count})
				}
			case metricdata.Histogram[float64]:
				c.typ = float64Histogram
				for _, dp := range d.DataPoints {
					c.points = append(c.points, point{attrMap(dp.Attributes), dp.Sum, dp.Count})
				}
			default:
				t.Fatalf("%s: unexpected aggregation %T", m.Name, m.Data)
			}
			if len(c.points) > 0 {
				out[m.Name] = c
			}
		}
	}
	return out
}

func attrMap(s attribute.Set) map[string]string {
	m := map[string]string{}
	for _, kv := range s.ToSlice() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// want is one instrument an event must record on, with exactly these
// attributes and this value.
type want struct {
	name, typ, unit string
	value           float64
	attrs           map[string]string
}

const (
	opName    = emitters.AttrOperationName
	provider  = emitters.AttrProviderName
	model     = emitters.AttrRequestModel
	tokenType = emitters.AttrTokenType
	agentName = emitters.AttrAgentName
	errType   = emitters.AttrErrorType
	agent     = emitters.AttrAgent
	tool      = emitters.AttrTool
)

func sample(t svc.EventType, edit func(p svc.Payload)) svc.RuntimeEvent {
	ev := emittertest.SampleEvent(t)
	if edit != nil {
		edit(ev.Payload)
	}
	return ev
}

func TestOTelRecordsTheSpecInstruments(t *testing.T) {
	completedAttrs := map[string]string{opName: "invoke_agent", agentName: "triage", provider: "test", model: "echo"}
	tokenAttrs := map[string]string{opName: "invoke_agent", agentName: "triage", provider: "test", model: "echo", tokenType: "total"}
	failedAttrs := func(kind svc.Kind) map[string]string {
		return map[string]string{opName: "invoke_agent", agentName: "triage", errType: string(kind)}
	}
	rejectAttrs := func(kind svc.Kind) map[string]string {
		return map[string]string{agent: "triage", errType: string(kind)}
	}
	failed := func(kind svc.Kind) []want {
		return []want{
			{emitters.MetricOperationDuration, float64Histogram, "s", 0.0125, failedAttrs(kind)},
			{emitters.MetricRejections, int64Counter, "{rejection}", 1, rejectAttrs(kind)},
		}
	}
	toolAttrs := map[string]string{agent: "triage", tool: "current_time"}
	toolFailedAttrs := func(kind svc.Kind) map[string]string {
		return map[string]string{agent: "triage", tool: "current_time", errType: string(kind)}
	}

	cases := []struct {
		name string
		ev   svc.RuntimeEvent
		want []want
	}{
		{"agent_completed", sample(svc.EventAgentCompleted, nil), []want{
			{emitters.MetricOperationDuration, float64Histogram, "s", 0.0125, completedAttrs},
			{emitters.MetricTokenUsage, int64Histogram, "{token}", 128, tokenAttrs},
		}},
		{"agent_completed with int values", sample(svc.EventAgentCompleted, func(p svc.Payload) {
			p["duration_ms"], p["tokens_used"] = 2000, 7
		}), []want{
			{emitters.MetricOperationDuration, float64Histogram, "s", 2, completedAttrs},
			{emitters.MetricTokenUsage, int64Histogram, "{token}", 7, tokenAttrs},
		}},
		{"agent_completed decoded from JSON", sample(svc.EventAgentCompleted, func(p svc.Payload) {
			p["duration_ms"], p["tokens_used"] = float64(1500), float64(42)
		}), []want{
			{emitters.MetricOperationDuration, float64Histogram, "s", 1.5, completedAttrs},
			{emitters.MetricTokenUsage, int64Histogram, "{token}", 42, tokenAttrs},
		}},
		{"agent_completed with no tokens", sample(svc.EventAgentCompleted, func(p svc.Payload) {
			p["tokens_used"] = int64(0)
		}), []want{
			{emitters.MetricOperationDuration, float64Histogram, "s", 0.0125, completedAttrs},
		}},
		{"agent_completed model name with a colon", sample(svc.EventAgentCompleted, func(p svc.Payload) {
			p["model"], p["tokens_used"] = "ollama:llama3:8b", 0
		}), []want{
			{emitters.MetricOperationDuration, float64Histogram, "s", 0.0125,
				map[string]string{opName: "invoke_agent", agentName: "triage", provider: "ollama", model: "llama3:8b"}},
		}},
		{"agent_completed without a model", sample(svc.EventAgentCompleted, func(p svc.Payload) {
			p["model"], p["tokens_used"] = "", 0
		}), []want{
			{emitters.MetricOperationDuration, float64Histogram, "s", 0.0125,
				map[string]string{opName: "invoke_agent", agentName: "triage"}},
		}},
		// The kind comes from the reason only: the error text, whatever it
		// says, is never parsed.
		{"agent_failed without a reason", sample(svc.EventAgentFailed, nil), failed(svc.KindRuntime)},
		{"agent_failed kind from the reason", sample(svc.EventAgentFailed, func(p svc.Payload) {
			p["error"], p["reason"] = "agent triage: timed out after 1s", "TimeoutError"
		}), failed(svc.KindTimeout)},
		{"agent_failed model failure", sample(svc.EventAgentFailed, func(p svc.Payload) {
			p["reason"] = "ModelError"
		}), failed(svc.KindModel)},
		{"agent_failed legacy reason", sample(svc.EventAgentFailed, func(p svc.Payload) {
			p["error"], p["reason"] = "token budget of 100 exceeded", "budget_exceeded"
		}), failed(svc.KindBudgetExceeded)},
		{"agent_failed spawn error", sample(svc.EventAgentFailed, func(p svc.Payload) {
			p["error"], p["reason"] = "agent triage: no such peer", "SpawnError"
		}), failed(svc.KindSpawn)},
		{"agent_failed unknown kind falls back", sample(svc.EventAgentFailed, func(p svc.Payload) {
			p["error"], p["error_type"], p["reason"] = "Oops: something", "NotAKind", "because"
		}), failed(svc.KindRuntime)},
		{"agent_failed with its model", sample(svc.EventAgentFailed, func(p svc.Payload) {
			p["reason"], p["model"] = "OutputValidationError", "ollama:llama3:8b"
		}), []want{
			{emitters.MetricOperationDuration, float64Histogram, "s", 0.0125, map[string]string{opName: "invoke_agent",
				agentName: "triage", errType: "OutputValidationError", provider: "ollama", model: "llama3:8b"}},
			{emitters.MetricRejections, int64Counter, "{rejection}", 1, rejectAttrs(svc.KindOutputValidation)},
		}},
		{"tool_call_completed", sample(svc.EventToolCallCompleted, nil), []want{
			{emitters.MetricToolCalls, int64Counter, "{call}", 1, toolAttrs},
			{emitters.MetricToolDuration, float64Histogram, "ms", 12.5, toolAttrs},
		}},
		{"tool_call_completed int duration", sample(svc.EventToolCallCompleted, func(p svc.Payload) {
			p["duration_ms"] = int64(3)
		}), []want{
			{emitters.MetricToolCalls, int64Counter, "{call}", 1, toolAttrs},
			{emitters.MetricToolDuration, float64Histogram, "ms", 3, toolAttrs},
		}},
		{"tool_call_failed", sample(svc.EventToolCallFailed, func(p svc.Payload) {
			p["error"] = "dial tcp: connection refused"
		}), []want{
			{emitters.MetricToolCalls, int64Counter, "{call}", 1, toolFailedAttrs(svc.KindToolExecution)},
			{emitters.MetricToolDuration, float64Histogram, "ms", 12.5, toolFailedAttrs(svc.KindToolExecution)},
		}},
		{"tool_call_failed kind not from the error text", sample(svc.EventToolCallFailed, func(p svc.Payload) {
			p["error"] = "TrustViolationError: tool needs high trust"
		}), []want{
			{emitters.MetricToolCalls, int64Counter, "{call}", 1, toolFailedAttrs(svc.KindToolExecution)},
			{emitters.MetricToolDuration, float64Histogram, "ms", 12.5, toolFailedAttrs(svc.KindToolExecution)},
		}},
		{"tool_call_failed kind from the reason", sample(svc.EventToolCallFailed, func(p svc.Payload) {
			p["error"], p["reason"] = "tool needs high trust", "TrustViolationError"
		}), []want{
			{emitters.MetricToolCalls, int64Counter, "{call}", 1, toolFailedAttrs(svc.KindTrustViolation)},
			{emitters.MetricToolDuration, float64Histogram, "ms", 12.5, toolFailedAttrs(svc.KindTrustViolation)},
		}},
		{"tool_call_failed with a bad duration", sample(svc.EventToolCallFailed, func(p svc.Payload) {
			p["error"], p["duration_ms"] = "x", math.NaN()
		}), []want{
			{emitters.MetricToolCalls, int64Counter, "{call}", 1, toolFailedAttrs(svc.KindToolExecution)},
		}},
		{"budget_exceeded", sample(svc.EventBudgetExceeded, nil), []want{
			{emitters.MetricRejections, int64Counter, "{rejection}", 1, rejectAttrs(svc.KindBudgetExceeded)},
		}},
		{"depth_limit_exceeded", sample(svc.EventDepthLimitExceeded, nil), []want{
			{emitters.MetricRejections, int64Counter, "{rejection}", 1, rejectAttrs(svc.KindDepthLimit)},
		}},
		{"rate_limited", sample(svc.EventRateLimited, nil), []want{
			{emitters.MetricRateLimitWait, float64Histogram, "ms", 1250,
				map[string]string{emitters.AttrAgent: "triage", emitters.AttrLimit: "openai_main", emitters.AttrReason: "paced"}},
		}},
	}
	for _, typ := range svc.EventTypes {
		switch typ {
		case svc.EventAgentCompleted, svc.EventAgentFailed, svc.EventToolCallCompleted, svc.EventToolCallFailed,
			svc.EventBudgetExceeded, svc.EventDepthLimitExceeded, svc.EventRateLimited:
		default:
			cases = append(cases, struct {
				name string
				ev   svc.RuntimeEvent
				want []want
			}{string(typ) + " records nothing", emittertest.SampleEvent(typ), nil})
		}
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, reader := newOTel(t)
			e.Emit(c.ev)
			got := collect(t, reader)

			var wantNames []string
			for _, w := range c.want {
				wantNames = append(wantNames, w.name)
				g, ok := got[w.name]
				if !ok {
					t.Errorf("%s: not recorded", w.name)
					continue
				}
				if g.typ != w.typ {
					t.Errorf("%s: type %s, want %s", w.name, g.typ, w.typ)
				}
				if g.unit != w.unit {
					t.Errorf("%s: unit %q, want %q", w.name, g.unit, w.unit)
				}
				if len(g.points) != 1 {
					t.Errorf("%s: %d data points, want 1", w.name, len(g.points))
					continue
				}
				p := g.points[0]
				if math.Abs(p.sum-w.value) > 1e-9 || p.count != 1 {
					t.Errorf("%s: value %v over %d recordings, want %v once", w.name, p.sum, p.count, w.value)
				}
				for k, v := range w.attrs {
					if p.attrs[k] != v {
						t.Errorf("%s: attribute %s = %q, want %q", w.name, k, p.attrs[k], v)
					}
				}
				for k, v := range p.attrs {
					if _, ok := w.attrs[k]; !ok {
						t.Errorf("%s: unexpected attribute %s = %q", w.name, k, v)
					}
				}
			}
			for name := range got {
				if !slices.Contains(wantNames, name) {
					t.Errorf("%s recorded, want only %q", name, wantNames)
				}
			}
		})
	}
}

// Every event type, emitted with the runtime's payloads: the only labels
// are the allowed ones and no id, error text or other payload value leaks
// into a label.
func TestOTelLabelsAreBounded(t *testing.T) {
	e, reader := newOTel(t)
	var leaks []string
	for _, typ := range svc.EventTypes {
		ev := emittertest.SampleEvent(typ)
		ev.TaskID, ev.TraceID, ev.ParentTraceID = "task-secret", "trace-secret", "parent-secret"
		if typ == svc.EventAgentFailed {
			ev.Payload["reason"] = "timeout"
		}
		if typ == svc.EventToolCallFailed {
			ev.Payload["error"] = "prompt: summarise the secret memo"
		}
		e.Emit(ev)
		leaks = append(leaks, ev.TaskID, ev.TraceID, ev.ParentTraceID)
	}
	leaks = append(leaks, "ModelError: provider unavailable", "summarise the secret memo", "run", "nats", "rt-1")

	got := collect(t, reader)
	names := make([]string, 0, len(got))
	for name := range got {
		names = append(names, name)
	}
	sort.Strings(names)
	wantNames := []string{emitters.MetricOperationDuration, emitters.MetricTokenUsage,
		emitters.MetricRejections, emitters.MetricToolCalls, emitters.MetricToolDuration, emitters.MetricRateLimitWait}
	sort.Strings(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Errorf("instruments with data %q, want %q", names, wantNames)
	}
	for name, c := range got {
		for _, p := range c.points {
			for k, v := range p.attrs {
				if !slices.Contains(emitters.OTelAttributeKeys, k) {
					t.Errorf("%s: attribute key %q outside %q", name, k, emitters.OTelAttributeKeys)
				}
				for _, leak := range leaks {
					if strings.Contains(v, leak) {
						t.Errorf("%s: attribute %s = %q carries %q", name, k, v, leak)
					}
				}
			}
		}
	}
}

func TestOTelAccumulates(t *testing.T) {
	e, reader := newOTel(t)
	for range 3 {
		e.Emit(emittertest.SampleEvent(svc.EventToolCallCompleted))
	}
	other := emittertest.SampleEvent(svc.EventToolCallCompleted)
	other.Payload["tool_name"] = "search"
	e.Emit(other)

	calls := collect(t, reader)[emitters.MetricToolCalls]
	byTool := map[string]float64{}
	for _, p := range calls.points {
		byTool[p.attrs[tool]] += p.sum
	}
	if byTool["current_time"] != 3 || byTool["search"] != 1 || len(byTool) != 2 {
		t.Errorf("svc.tool.calls by tool = %v, want current_time 3, search 1", byTool)
	}
}

func TestOTelContract(t *testing.T) {
	emittertest.Run(t, func(t *testing.T) svc.Emitter {
		e, _ := newOTel(t)
		return e
	})
}

func TestOTelContractPanickingProvider(t *testing.T) {
	emittertest.Run(t, func(t *testing.T) svc.Emitter {
		e, err := emitters.NewOTel(faultyProvider{panics: true})
		if err != nil {
			t.Fatalf("NewOTel: %v", err)
		}
		return e
	})
}

// A nil provider means the global one, as installed by the host, even when
// it is installed after the emitter was built.
//
// The global provider can be installed only once per process (later
// installs do not reach instruments already delegated), so the test
// installs one for the whole test binary, never shuts it down, and counts
// what this run added: it passes with -count=N, and it is the only test
// that touches the global provider.
func TestOTelNilProviderUsesGlobal(t *testing.T) {
	e, err := emitters.NewOTel(nil)
	if err != nil {
		t.Fatalf("NewOTel(nil): %v", err)
	}
	reader := installGlobalProvider() // after NewOTel on the first run
	rejections := func() float64 {
		var n float64
		for _, p := range collect(t, reader)[emitters.MetricRejections].points {
			n += p.sum
		}
		return n
	}
	before := rejections()
	e.Emit(emittertest.SampleEvent(svc.EventDepthLimitExceeded))
	if got := rejections() - before; got != 1 {
		t.Errorf("svc.rejections through the global provider grew by %v, want one rejection", got)
	}
}

var (
	globalOnce   sync.Once
	globalReader *sdkmetric.ManualReader
)

// installGlobalProvider installs, once per process, a global meter
// provider read by the reader it returns.
func installGlobalProvider() *sdkmetric.ManualReader {
	globalOnce.Do(func() {
		globalReader = sdkmetric.NewManualReader()
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(globalReader)))
	})
	return globalReader
}

func TestOTelInstrumentError(t *testing.T) {
	e, err := emitters.NewOTel(faultyProvider{})
	if e != nil || svc.KindOf(err) != svc.KindRuntime || !errors.Is(err, errInstrument) {
		t.Fatalf("NewOTel = %v, %v; want a %s wrapping %v", e, err, svc.KindRuntime, errInstrument)
	}
}

var errInstrument = errors.New("instrument refused")

// faultyProvider's meters refuse the emitter's instruments (panics false)
// or hand out instruments that panic on every recording (panics true).
type faultyProvider struct {
	noop.MeterProvider
	panics bool
}

func (p faultyProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return faultyMeter{panics: p.panics}
}

type faultyMeter struct {
	noop.Meter
	panics bool
}

func (m faultyMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	if m.panics {
		return panicCounter{}, nil
	}
	return nil, errInstrument
}

func (m faultyMeter) Int64Histogram(string, ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	return panicInt64Histogram{}, nil
}

func (m faultyMeter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return panicFloat64Histogram{}, nil
}

type panicCounter struct{ noop.Int64Counter }

func (panicCounter) Add(context.Context, int64, ...metric.AddOption) { panic("counter bug") }

type panicInt64Histogram struct{ noop.Int64Histogram }

func (panicInt64Histogram) Record(context.Context, int64, ...metric.RecordOption) {
	panic("histogram bug")
}

type panicFloat64Histogram struct{ noop.Float64Histogram }

func (panicFloat64Histogram) Record(context.Context, float64, ...metric.RecordOption) {
	panic("histogram bug")
}

// Whatever text a failure carries, error.type is a kind name and the model
// labels are the two halves of the identifier: labels stay bounded.
func FuzzOTelLabels(f *testing.F) {
	f.Add("ModelError: provider unavailable", "timeout", "", "test:echo")
	f.Add("agent triage: cancelled", "cancelled", "BudgetExceededError", "ollama:llama3:8b")
	f.Add("", "", "NotAKind", "bare")
	f.Add(":", "\xff", "", ":")
	f.Fuzz(func(t *testing.T, errText, reason, errorType, modelID string) {
		e, reader := newOTel(t)
		failed := emittertest.SampleEvent(svc.EventAgentFailed)
		failed.Payload["error"], failed.Payload["reason"], failed.Payload["error_type"] = errText, reason, errorType
		e.Emit(failed)
		completed := emittertest.SampleEvent(svc.EventAgentCompleted)
		completed.Payload["model"] = modelID
		e.Emit(completed)

		for name, c := range collect(t, reader) {
			for _, p := range c.points {
				if k, ok := p.attrs[errType]; ok && !slices.Contains(svc.Kinds, svc.Kind(k)) {
					t.Errorf("%s: error.type %q is not a kind", name, k)
				}
				if _, failedRun := p.attrs[errType]; failedRun || name != emitters.MetricOperationDuration {
					continue
				}
				wantProv, wantModel, ok := strings.Cut(modelID, ":")
				if !ok {
					wantProv, wantModel = "", modelID
				}
				if p.attrs[provider] != wantProv || p.attrs[model] != wantModel {
					t.Errorf("model labels %v for %q, want provider %q, model %q", p.attrs, modelID, wantProv, wantModel)
				}
				if _, has := p.attrs[provider]; has && wantProv == "" {
					t.Errorf("empty provider label for %q", modelID)
				}
				if _, has := p.attrs[model]; has && wantModel == "" {
					t.Errorf("empty model label for %q", modelID)
				}
			}
		}
	})
}
